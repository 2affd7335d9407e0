#include "core/data/empty_prompt.h"

#include <absl/strings/str_cat.h>

#include <map>

#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<EmptyPromptInfo> WriteEmptyPrompt(const std::string& dir, const std::string& encoder,
                                                 const at::Tensor& prompt_embeds) {
  if (prompt_embeds.dim() != 2 || prompt_embeds.size(0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the empty caption's embedding is ", ShapeString(prompt_embeds.sizes()), ", not [text_len, J]"));
  }
  at::Tensor stored = prompt_embeds.to(at::kCPU, at::kFloat).contiguous();
  RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, kEmptyPromptFile), {{"prompt_embeds", stored}},
                                   {{"encoder", encoder}, {"text_len", std::to_string(stored.size(0))}}));
  return EmptyPromptInfo{stored.size(0), CacheSampleChecksum(CacheSample{at::Tensor(), stored})};
}

absl::StatusOr<at::Tensor> ReadEmptyPrompt(const std::string& dir, const CacheLayout& layout,
                                           const EmptyPromptInfo& info, const std::string& encoder) {
  const std::string path = JoinPath(dir, kEmptyPromptFile);
  auto fail = [&](const absl::Status& why) {
    return absl::DataLossError(absl::StrCat("empty-caption embedding ", path, ": ", why.message()));
  };
  auto opened = SafetensorsFile::Open(path);
  if (!opened.ok()) return fail(opened.status());
  const SafetensorsFile& file = **opened;
  if (!encoder.empty()) {
    auto it = file.metadata().find("encoder");
    if (it == file.metadata().end() || it->second != encoder) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("made by encoder '", it == file.metadata().end() ? "" : it->second, "', not '", encoder, "'")));
    }
  }
  auto embeds = file.Load("prompt_embeds", at::kFloat);
  if (!embeds.ok()) return fail(embeds.status());
  const at::Tensor& e = *embeds;
  if (e.dim() != 2 || e.size(0) != info.text_len || e.size(1) != layout.text_dim) {
    return fail(absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(e.sizes()), ", the index says [",
                                                        info.text_len, ", ", layout.text_dim, "]")));
  }
  if (absl::Status values = CheckCacheValues(e, "prompt_embeds", kMaxAbsPromptEmbed); !values.ok()) {
    return fail(values);
  }
  const std::string checksum = CacheSampleChecksum(CacheSample{at::Tensor(), e});
  if (!info.checksum.empty() && checksum != info.checksum) {
    return fail(
        absl::InvalidArgumentError(absl::StrCat("checksum of the tensor bytes is ", checksum, ", the index says ",
                                                info.checksum, " (rerun encoder_worker on the cache to rebuild it)")));
  }
  return e;
}

}  // namespace baton

#include "core/sample/prompt_embeds.h"

#include <absl/strings/str_format.h>

#include <map>

#include "core/encode/flux2_encoder.h"
#include "core/lora/lora_linear.h"
#include "core/tensor/safetensors.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

// What the embeddings depend on besides the prompt, cheaply (without loading the encoder): the folder, the text
// encoder's config and weight index, the tokenizer, and the length.
std::string CacheKey(const std::string& pipeline_dir, int64_t max_sequence_length, const std::string& prompt) {
  std::string identity = pipeline_dir;
  for (const char* file : {"text_encoder/config.json", "text_encoder/model.safetensors.index.json",
                           "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"}) {
    absl::StatusOr<std::string> text = ReadFile(JoinPath(pipeline_dir, file));
    if (text.ok()) absl::StrAppend(&identity, "|", file, "=", absl::StrFormat("%016x", HashName(*text)));
  }
  return absl::StrFormat("prompt/%016x", HashName(absl::StrCat(identity, "|", max_sequence_length, "|", prompt)));
}

}  // namespace

absl::StatusOr<std::vector<at::Tensor>> EncodePromptsLocally(const std::string& pipeline_dir,
                                                             const std::vector<std::string>& prompts,
                                                             int64_t max_sequence_length,
                                                             const std::string& cache_file) {
  std::map<std::string, at::Tensor> cache;
  if (!cache_file.empty() && PathExists(cache_file)) {
    absl::StatusOr<std::map<std::string, at::Tensor>> read = LoadAllSafetensors(cache_file);
    if (read.ok()) {
      cache = std::move(*read);
    } else {  // a cache never fails a run: encode again
      LogWarning("prompt cache ", cache_file, " is unreadable (", read.status().message(), "); encoding again");
    }
  }
  std::unique_ptr<Flux2SampleEncoder> encoder;  // opened only for a prompt the cache lacks
  std::vector<at::Tensor> out;
  bool added = false;
  for (const std::string& prompt : prompts) {
    const std::string key = CacheKey(pipeline_dir, max_sequence_length, prompt);
    auto it = cache.find(key);
    if (it != cache.end() && it->second.dim() == 2 && it->second.size(0) == max_sequence_length) {
      out.push_back(it->second.to(at::kFloat));
      continue;
    }
    if (!encoder) {
      Flux2EncoderOptions options;
      options.max_sequence_length = max_sequence_length;
      ASSIGN_OR_RETURN(encoder, Flux2SampleEncoder::Open(pipeline_dir, options));
    }
    ASSIGN_OR_RETURN(at::Tensor embeds, encoder->EncodeText(prompt));
    cache[key] = embeds.contiguous();
    out.push_back(embeds);
    added = true;
  }
  if (added && !cache_file.empty()) RETURN_IF_ERROR(WriteSafetensors(cache_file, cache));
  return out;
}

}  // namespace baton

#include "core/encode/wan_encoder.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<WanSampleEncoder>> WanSampleEncoder::Open(const std::string& pipeline_dir,
                                                                         const WanEncoderOptions& options) {
  std::unique_ptr<WanSampleEncoder> e(new WanSampleEncoder());
  e->options_ = options;
  for (const char* sub : {"vae", "text_encoder", "tokenizer"}) {
    if (!IsDirectory(JoinPath(pipeline_dir, sub))) {
      return absl::NotFoundError(absl::StrCat(pipeline_dir, " is not a Wan pipeline folder: no ", sub, "/"));
    }
  }
  ASSIGN_OR_RETURN(e->vae_, WanVaeEncoder::Load(JoinPath(pipeline_dir, "vae"), options.dtype, options.device));
  ASSIGN_OR_RETURN(e->text_, Umt5Encoder::Open(JoinPath(pipeline_dir, "text_encoder"), options.dtype, options.device));
  ASSIGN_OR_RETURN(e->tokenizer_, UnigramTokenizer::Load(JoinPath(pipeline_dir, "tokenizer/tokenizer.json")));
  // BuildWanPromptIds checks max_length against the template; fail at open, not on the first caption.
  RETURN_IF_ERROR(BuildWanPromptIds(*e->tokenizer_, "", options.max_sequence_length).status());
  // Everything that changes the numbers: the folder's configs and tokenizer, and our settings.
  std::string fingerprint;
  for (const char* f :
       {"vae/config.json", "text_encoder/config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"}) {
    auto text = ReadFile(JoinPath(pipeline_dir, f));
    if (text.ok()) absl::StrAppend(&fingerprint, *text);
  }
  e->identity_ = absl::StrFormat("wan:%s:%016x:len%d:%s:mean", pipeline_dir, HashName(fingerprint),
                                 options.max_sequence_length, c10::toString(options.dtype));
  return e;
}

absl::StatusOr<at::Tensor> WanSampleEncoder::EncodeVideo(const at::Tensor& pixels) {
  if (pixels.dim() != 5 || pixels.size(0) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan clip pixels must be [1, 3, F, H, W], got [", absl::StrJoin(pixels.sizes(), ", "), "]"));
  }
  ASSIGN_OR_RETURN(at::Tensor mean, vae_->EncodeMean(pixels));
  return vae_->Normalize(mean).squeeze(0).to(at::kCPU, at::kFloat).contiguous();
}

absl::StatusOr<at::Tensor> WanSampleEncoder::EncodeImage(const Image& image) {
  return EncodeVideo(ImageToPixels(image).unsqueeze(2));  // [1, 3, H, W] → one frame [1, 3, 1, H, W]
}

absl::StatusOr<at::Tensor> WanSampleEncoder::EncodeText(const std::string& caption) {
  ASSIGN_OR_RETURN(WanPromptIds ids, BuildWanPromptIds(*tokenizer_, caption, options_.max_sequence_length));
  ASSIGN_OR_RETURN(at::Tensor embeds, EncodeWanPrompt(*text_, ids));
  return embeds.squeeze(0).to(at::kCPU, at::kFloat).contiguous();
}

bool IsWanPipelineFolder(const std::string& dir) {
  auto class_name = [](const std::string& path) -> std::string {
    auto text = ReadFile(path);
    if (!text.ok()) return "";
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("_class_name") || !j["_class_name"].is_string()) return "";
    return j["_class_name"].get<std::string>();
  };
  const std::string pipeline = class_name(JoinPath(dir, "model_index.json"));
  if (!pipeline.empty()) return absl::StartsWith(pipeline, "Wan");
  return class_name(JoinPath(dir, "transformer/config.json")) == "WanTransformer3DModel";
}

}  // namespace baton

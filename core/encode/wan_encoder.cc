#include "core/encode/wan_encoder.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <nlohmann/json.hpp>

#include "core/model/wan_config.h"
#include "core/model/wan_i2v.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// The transformer config of a pipeline folder: transformer/ (diffusers) or high_noise_model/ (original A14B).
absl::StatusOr<WanConfig> PipelineTransformerConfig(const std::string& dir) {
  for (const char* sub : {"transformer/config.json", "high_noise_model/config.json"}) {
    if (PathExists(JoinPath(dir, sub))) return LoadWanConfig(JoinPath(dir, sub));
  }
  return absl::NotFoundError(absl::StrCat(dir,
                                          " has no transformer/config.json: the conditioning the model needs is "
                                          "unknown"));
}

// The conditioning kind for the option and the pipeline's transformer (WanEncoderOptions::conditioning).
absl::StatusOr<std::string> ChooseConditioning(const std::string& option, const WanConfig& t, int64_t z_dim) {
  const bool concat = t.in_channels == 2 * z_dim + 4, flf2v = t.pos_embed_seq_len > 0;
  if (option == "auto") return concat ? std::string(flf2v ? kWanFirstLastFrame : kWanFirstFrame) : std::string();
  if (option == "none") {
    if (!concat) return std::string();
    return absl::InvalidArgumentError(absl::StrCat("conditioning none: this image-to-video transformer takes ",
                                                   t.in_channels, " channels and needs a conditioning"));
  }
  if (option != "first-frame" && option != "first-last-frame") {
    return absl::InvalidArgumentError(
        absl::StrCat("conditioning '", option, "': expected auto, none, first-frame or first-last-frame"));
  }
  if (concat) return std::string(option == "first-frame" ? kWanFirstFrame : kWanFirstLastFrame);
  if (option == "first-frame" && t.in_channels == z_dim) return std::string(kWanCleanFirstFrame);
  return absl::InvalidArgumentError(absl::StrCat("conditioning ", option, ": a transformer of ", t.in_channels,
                                                 " input channels over ", z_dim, "-channel latents takes no ",
                                                 option == "first-frame" ? "first frame" : "last frame"));
}

}  // namespace

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
  ASSIGN_OR_RETURN(e->text_, Umt5Encoder::Open(JoinPath(pipeline_dir, "text_encoder"), options.dtype, options.device,
                                               options.text_quantize));
  ASSIGN_OR_RETURN(e->tokenizer_, UnigramTokenizer::Load(JoinPath(pipeline_dir, "tokenizer/tokenizer.json")));
  // BuildWanPromptIds checks max_length against the template; fail at open, not on the first caption.
  RETURN_IF_ERROR(BuildWanPromptIds(*e->tokenizer_, "", options.max_sequence_length).status());
  ASSIGN_OR_RETURN(WanConfig transformer, PipelineTransformerConfig(pipeline_dir));
  ASSIGN_OR_RETURN(e->conditioning_, ChooseConditioning(options.conditioning, transformer, e->vae_->config().z_dim));
  if (!e->conditioning_.empty() && transformer.has_image_branch()) {
    if (options.max_sequence_length != kWanMaxSequenceLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(pipeline_dir, ": a transformer with the CLIP image branch (Wan 2.1 I2V) takes the last ",
                       kWanMaxSequenceLength, " context tokens as text, so prompts must be ", kWanMaxSequenceLength,
                       " tokens, not ", options.max_sequence_length));
    }
    RETURN_IF_ERROR(e->OpenClip(pipeline_dir, transformer.image_dim));
  }
  // Everything that changes the numbers: the folder's configs and tokenizer, and our settings.
  std::string fingerprint;
  for (const char* f :
       {"vae/config.json", "text_encoder/config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
        "image_encoder/config.json", "image_processor/preprocessor_config.json"}) {
    auto text = ReadFile(JoinPath(pipeline_dir, f));
    if (text.ok()) absl::StrAppend(&fingerprint, *text);
  }
  e->identity_ = absl::StrFormat("wan:%s:%016x:len%d:%s:mean", pipeline_dir, HashName(fingerprint),
                                 options.max_sequence_length, c10::toString(options.dtype));
  if (!e->conditioning_.empty()) absl::StrAppend(&e->identity_, ":", e->conditioning_);
  if (options.text_quantize != WeightQuant::kNone) {  // 8-bit umT5: other embeddings, so records re-encode
    absl::StrAppend(&e->identity_, ":text-", WeightQuantName(options.text_quantize));
  }
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

int64_t WanSampleEncoder::condition_channels() const {
  return conditioning_.empty() ? 0 : WanConditionChannels(conditioning_, vae_->config().z_dim);
}

// WanImageToVideoPipeline.prepare_latents: the VAE posterior mean ("argmax") of the first frame followed by zero
// frames (and the last frame, FLF2V) at full length, normalised, behind the 4-channel mask; with expand_timesteps
// the first frame alone.
absl::StatusOr<ClipConditioning> WanSampleEncoder::EncodeConditioning(const at::Tensor& pixels) {
  if (conditioning_.empty()) return SampleEncoder::EncodeConditioning(pixels);
  if (pixels.dim() != 5 || pixels.size(0) != 1 || pixels.size(2) < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan image-to-video conditioning needs a clip [1, 3, F >= 2, H, W], "
                     "got [",
                     absl::StrJoin(pixels.sizes(), ", "), "]"));
  }
  const int64_t f = pixels.size(2);
  at::Tensor first = pixels.slice(2, 0, 1);
  at::Tensor video = first;
  if (conditioning_ != kWanCleanFirstFrame) {
    const bool last = conditioning_ == kWanFirstLastFrame;
    std::vector<at::Tensor> parts = {first, at::zeros_like(pixels.slice(2, 1, last ? f - 1 : f))};
    if (last) parts.push_back(pixels.slice(2, f - 1, f));
    video = at::cat(parts, 2);
  }
  ASSIGN_OR_RETURN(at::Tensor mean, vae_->EncodeMean(video));
  at::Tensor latents = vae_->Normalize(mean).squeeze(0).to(at::kCPU, at::kFloat);  // [z, F' or 1, h, w]
  ClipConditioning out;
  if (clip_) {
    ASSIGN_OR_RETURN(out.image_embeds, EncodeFirstFrameImage(first));
  }
  if (conditioning_ == kWanCleanFirstFrame) {
    out.condition = latents.contiguous();
    return out;
  }
  at::Tensor mask = WanConditionMask(latents.size(1), latents.size(2), latents.size(3),
                                     conditioning_ == kWanFirstLastFrame, vae_->config().temporal_factor());
  out.condition = at::cat({mask, latents}, 0).contiguous();
  return out;
}

absl::Status WanSampleEncoder::OpenClip(const std::string& pipeline_dir, int64_t image_dim) {
  if (conditioning_ == kWanFirstLastFrame) {
    return absl::UnimplementedError(absl::StrCat(pipeline_dir,
                                                 ": first-last-frame conditioning with the CLIP image "
                                                 "branch (Wan 2.1 FLF2V: two images' embeddings) is not built yet"));
  }
  ASSIGN_OR_RETURN(ClipFolders folders, FindClipFolders(pipeline_dir));
  if (folders.image_processor.empty()) {
    return absl::NotFoundError(absl::StrCat(pipeline_dir, " has image_encoder/ but no image_processor/"));
  }
  ASSIGN_OR_RETURN(clip_, ClipVisionEncoder::Load(folders.image_encoder, options_.dtype, options_.device));
  ASSIGN_OR_RETURN(ClipImageProcessor processor, ClipImageProcessor::Load(folders.image_processor));
  clip_processor_ = std::make_unique<ClipImageProcessor>(std::move(processor));
  if (clip_->config().hidden_size != image_dim) {
    return absl::InvalidArgumentError(absl::StrCat(pipeline_dir, ": image_encoder/ is ", clip_->config().hidden_size,
                                                   " wide, the transformer's image_dim ", image_dim));
  }
  return absl::OkStatus();
}

// The conditioning frame (pixels [1, 3, 1, H, W] in [-1, 1]) as the 8-bit image it came from, through the pipeline's
// image processor and CLIP: [tokens, image_dim] fp32.
absl::StatusOr<at::Tensor> WanSampleEncoder::EncodeFirstFrameImage(const at::Tensor& first) const {
  at::Tensor rgb = ((first[0].select(1, 0) + 1) * 127.5).round().clamp(0, 255).to(at::kByte).permute({1, 2, 0});
  Image image;
  image.height = static_cast<int>(rgb.size(0));
  image.width = static_cast<int>(rgb.size(1));
  rgb = rgb.contiguous();
  image.pixels.assign(rgb.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>() + rgb.numel());
  ASSIGN_OR_RETURN(at::Tensor pixel_values, clip_processor_->Preprocess(image));
  ASSIGN_OR_RETURN(at::Tensor hidden, clip_->PenultimateHiddenStates(pixel_values));
  return hidden[0].to(at::kCPU, at::kFloat).contiguous();
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

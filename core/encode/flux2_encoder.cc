#include "core/encode/flux2_encoder.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <nlohmann/json.hpp>

#include "core/encode/sample_encoder.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/torch_call.h"
#include "core/text/text_encoder_checkpoint.h"
#include "core/text/tiny_tokenizer.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Flux2SampleEncoder>> Flux2SampleEncoder::Open(const std::string& pipeline_dir,
                                                                             const Flux2EncoderOptions& options) {
  std::unique_ptr<Flux2SampleEncoder> e(new Flux2SampleEncoder());
  e->options_ = options;
  for (const char* sub : {"vae", "text_encoder", "tokenizer"}) {
    if (!IsDirectory(JoinPath(pipeline_dir, sub))) {
      return absl::NotFoundError(absl::StrCat(pipeline_dir, " is not a FLUX.2 pipeline folder: no ", sub, "/"));
    }
  }
  ASSIGN_OR_RETURN(e->vae_, Flux2VaeEncoder::Load(JoinPath(pipeline_dir, "vae"), options.dtype, options.device));
  ASSIGN_OR_RETURN(e->text_, TextEncoder::Open(JoinPath(pipeline_dir, "text_encoder"), options.dtype, options.device,
                                               options.text_quantize));
  ASSIGN_OR_RETURN(e->tokenizer_, BpeTokenizer::Load(JoinPath(pipeline_dir, "tokenizer/tokenizer.json")));
  ASSIGN_OR_RETURN(e->family_, Flux2FamilyForConfig(e->text_->config()));
  ASSIGN_OR_RETURN(e->padding_side_,
                   ReadTokenizerPaddingSide(JoinPath(pipeline_dir, "tokenizer/tokenizer_config.json")));
  // Everything that changes the numbers: the folder's configs and tokenizer, and our settings.
  std::string fingerprint;
  for (const char* f : {"vae/config.json", "text_encoder/config.json", "tokenizer/tokenizer.json"}) {
    auto text = ReadFile(JoinPath(pipeline_dir, f));
    if (text.ok()) absl::StrAppend(&fingerprint, *text);
  }
  e->identity_ = absl::StrFormat("flux2:%s:%016x:len%d:%s:%s", pipeline_dir, HashName(fingerprint),
                                 options.max_sequence_length, c10::toString(options.dtype),
                                 options.sample_latents ? absl::StrCat("sample", options.seed) : "mean");
  // An 8-bit text encoder changes the embeddings: its records re-encode (full precision keeps older identities).
  if (options.text_quantize != WeightQuant::kNone) {
    absl::StrAppend(&e->identity_, ":text-", WeightQuantName(options.text_quantize));
  }
  return e;
}

int64_t Flux2SampleEncoder::latent_channels() const { return vae_->config().patched_channels(); }

int64_t Flux2SampleEncoder::text_dim() const {
  return static_cast<int64_t>(Flux2HiddenStateLayers(family_).size()) * text_->config().hidden_size;
}

absl::StatusOr<at::Tensor> Flux2SampleEncoder::EncodeImage(const Image& image) {
  at::Tensor pixels = ImageToPixels(image);
  at::Tensor latents;
  if (options_.sample_latents) {
    ASSIGN_OR_RETURN(latents, vae_->EncodeSample(pixels, options_.seed));
  } else {
    ASSIGN_OR_RETURN(latents, vae_->EncodeMean(pixels));
  }
  at::Tensor packed;
  RETURN_IF_ERROR(TorchCall("patchify", [&] { packed = vae_->PatchifyAndNormalize(latents); }));
  return packed.squeeze(0).to(at::kCPU, at::kFloat).contiguous();
}

absl::StatusOr<PromptIds> Flux2SampleEncoder::PromptIdsFor(const std::string& caption) const {
  return BuildFlux2PromptIds(*tokenizer_, caption, family_, options_.max_sequence_length, padding_side_);
}

absl::StatusOr<at::Tensor> Flux2SampleEncoder::EncodeText(const std::string& caption) {
  ASSIGN_OR_RETURN(PromptIds ids, PromptIdsFor(caption));
  ASSIGN_OR_RETURN(at::Tensor embeds, EncodeFlux2Prompt(*text_, ids, family_));
  return embeds.squeeze(0).to(at::kCPU, at::kFloat).contiguous();
}

absl::Status WriteTinyFlux2Pipeline(const std::string& dir, uint64_t seed) {
  RETURN_IF_ERROR(MakeDirs(dir));
  TextEncoderConfig text = TinyMistral3TextConfig();
  Flux2Config transformer;  // configs/models/flux2-small.json: the real architecture at D = 64
  transformer.in_channels = 128;
  transformer.num_layers = 2;
  transformer.num_single_layers = 4;
  transformer.attention_head_dim = 16;
  transformer.num_attention_heads = 4;
  transformer.axes_dims_rope = {4, 4, 4, 4};
  transformer.joint_attention_dim = 3 * text.hidden_size;
  RETURN_IF_ERROR(WriteRandomFlux2Weights(transformer, JoinPath(dir, "transformer"), MixSeed(seed, 1)));
  RETURN_IF_ERROR(WriteRandomFlux2Vae(TinyFlux2VaeConfig(), JoinPath(dir, "vae"), MixSeed(seed, 2)));
  RETURN_IF_ERROR(WriteRandomTextEncoder(text, JoinPath(dir, "text_encoder"), MixSeed(seed, 3)));
  RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "tokenizer")));
  RETURN_IF_ERROR(WriteTinyBpeTokenizerJson(JoinPath(dir, "tokenizer/tokenizer.json")));
  RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "tokenizer/tokenizer_config.json"), TinyTokenizerConfigJson()));
  RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "scheduler")));
  nlohmann::ordered_json scheduler = {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
                                      {"num_train_timesteps", 1000},
                                      {"shift", 3.0},
                                      {"use_dynamic_shifting", true},
                                      {"base_shift", 0.5},
                                      {"max_shift", 1.15},
                                      {"base_image_seq_len", 256},
                                      {"max_image_seq_len", 4096}};
  RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "scheduler/scheduler_config.json"), scheduler.dump(2)));
  nlohmann::ordered_json index = {{"_class_name", "Flux2Pipeline"},
                                  {"_diffusers_version", "0.36.0"},
                                  {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
                                  {"text_encoder", {"transformers", "Mistral3ForConditionalGeneration"}},
                                  {"tokenizer", {"transformers", "PixtralProcessor"}},
                                  {"transformer", {"diffusers", "Flux2Transformer2DModel"}},
                                  {"vae", {"diffusers", "AutoencoderKLFlux2"}}};
  return WriteFileAtomic(JoinPath(dir, "model_index.json"), index.dump(2));
}

}  // namespace baton

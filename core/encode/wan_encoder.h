// The Wan sample encoder: a diffusers Wan pipeline folder's VAE (vae/, AutoencoderKLWan), text encoder
// (text_encoder/, umT5) and tokenizer (tokenizer/tokenizer.json, sentencepiece Unigram) turning a bucketed clip and
// its caption into what WanTransformer3DModel trains on: normalised posterior-mean latents
// ((z − latents_mean) / latents_std) [C, F', H/8, W/8] and prompt embeddings [max_sequence_length, d_model] exactly
// as WanPipeline._get_t5_prompt_embeds (core/text/wan_prompt.h).
#pragma once

#include <memory>
#include <string>

#include "core/encode/clip_image_processor.h"
#include "core/encode/clip_vision.h"
#include "core/encode/sample_encoder.h"
#include "core/text/umt5_encoder.h"
#include "core/text/unigram_tokenizer.h"
#include "core/text/wan_prompt.h"
#include "core/vae/wan_vae.h"

namespace baton {

struct WanEncoderOptions {
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  int64_t max_sequence_length = kWanMaxSequenceLength;  // WanPipeline.__call__'s 512
  // Image-to-video conditioning to cache: "auto" (what the transformer's in_channels require: first frame for a
  // 36-channel I2V model, first and last for an FLF2V one, none otherwise), "none", "first-frame" (also TI2V-5B's
  // image-to-video mode) or "first-last-frame".
  std::string conditioning = "auto";
  WeightQuant text_quantize = WeightQuant::kNone;  // umT5's Linear weights (core/text/text_weights.h)
};

class WanSampleEncoder : public SampleEncoder {
 public:
  static absl::StatusOr<std::unique_ptr<WanSampleEncoder>> Open(const std::string& pipeline_dir,
                                                                const WanEncoderOptions& options);

  std::string identity() const override { return identity_; }
  int64_t latent_channels() const override { return vae_->config().z_dim; }
  int64_t text_dim() const override { return text_->config().d_model; }
  // One image as a one-frame clip: [C, 1, H/8, W/8] (Wan trains images as single-frame videos).
  absl::StatusOr<at::Tensor> EncodeImage(const Image& image) override;
  absl::StatusOr<at::Tensor> EncodeText(const std::string& caption) override;
  bool encodes_video() const override { return true; }
  absl::StatusOr<at::Tensor> EncodeVideo(const at::Tensor& pixels) override;
  // core/model/wan_i2v.h's kinds, as WanImageToVideoPipeline.prepare_latents conditions a clip's first (and last)
  // frame.
  std::string conditioning() const override { return conditioning_; }
  int64_t condition_channels() const override;
  // Wan 2.1 I2V (the transformer's CLIP image branch): the first frame's image_encoder/ embeddings, hidden_states[-2]
  // as WanImageToVideoPipeline.encode_image, through the folder's image_processor/.
  int64_t image_dim() const override { return clip_ ? clip_->config().hidden_size : 0; }
  absl::StatusOr<ClipConditioning> EncodeConditioning(const at::Tensor& pixels) override;

  WanVaeEncoder& vae() { return *vae_; }
  Umt5Encoder& text_encoder() { return *text_; }
  const UnigramTokenizer& tokenizer() const { return *tokenizer_; }

 private:
  WanSampleEncoder() = default;
  WanEncoderOptions options_;
  std::unique_ptr<WanVaeEncoder> vae_;
  std::unique_ptr<Umt5Encoder> text_;
  std::unique_ptr<UnigramTokenizer> tokenizer_;
  std::unique_ptr<ClipVisionEncoder> clip_;  // with the transformer's image branch only
  std::unique_ptr<ClipImageProcessor> clip_processor_;
  absl::Status OpenClip(const std::string& pipeline_dir, int64_t image_dim);
  absl::StatusOr<at::Tensor> EncodeFirstFrameImage(const at::Tensor& pixels) const;
  std::string conditioning_;  // "" or a core/model/wan_i2v.h kind
  std::string identity_;
};

// True when `dir`'s model_index.json names a Wan pipeline (_class_name starting with "Wan"), or, without one, its
// transformer/config.json is a WanTransformer3DModel: how encoder_worker picks the family of --model.
bool IsWanPipelineFolder(const std::string& dir);

// A complete tiny Wan 2.1 T2V pipeline folder with random weights in the real layouts and names:
// model_index.json (WanPipeline), transformer/ (a small WanTransformer3DModel with text_dim = the tiny umT5's
// d_model, in_channels = the tiny VAE's z_dim), vae/ (a whole AutoencoderKLWan: encoder and decoder),
// text_encoder/ (UMT5EncoderModel), tokenizer/ (a small real Unigram tokenizer.json + tokenizer_config.json) and
// scheduler/ (UniPCMultistepScheduler, flow prediction, as Wan 2.1 ships).
// variant "i2v": a WanImageToVideoPipeline of the Wan 2.2 I2V-A14B kind (a 2·z + 4 channel transformer, no image
// encoder); "i2v-a14b": the same with both experts (transformer/ high noise, transformer_2/ low noise, boundary_ratio
// 0.9); "i2v-2.1": Wan 2.1 I2V's kind (the transformer's CLIP image branch over a tiny image_encoder/ and
// image_processor/); "ti2v": a WanPipeline with expand_timesteps (Wan 2.2 TI2V-5B's image-to-video mode); "t2v"
// (default).
absl::Status WriteTinyWanPipeline(const std::string& dir, uint64_t seed, const std::string& variant = "t2v");

// The tiny Unigram tokenizer.json WriteTinyWanPipeline writes: T5's layout (<pad>/</s>/<unk> added tokens, Metaspace
// "▁" always-prepend, "$A </s>" template) over single characters plus whole words of everyday captions.
std::string TinyUnigramTokenizerJson();

}  // namespace baton

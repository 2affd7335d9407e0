// The FLUX.2 sample encoder: a diffusers pipeline folder's VAE (vae/), text encoder (text_encoder/) and
// tokenizer (tokenizer/) turning a bucket-sized image and a caption into what the transformer trains on —
// packed, normalised latents and the stacked hidden states of the text encoder.
#pragma once

#include <memory>
#include <string>

#include "core/encode/sample_encoder.h"
#include "core/text/prompt.h"
#include "core/text/text_encoder.h"
#include "core/text/tokenizer.h"
#include "core/vae/flux2_vae.h"

namespace baton {

struct Flux2EncoderOptions {
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  int64_t max_sequence_length = kFlux2MaxSequenceLength;  // diffusers' max_sequence_length (512)
  bool sample_latents = false;                            // posterior sample instead of the mean
  uint64_t seed = 0;                                      // for sample_latents
  WeightQuant text_quantize = WeightQuant::kNone;         // the text encoder's Linear weights (text_weights.h)
};

class Flux2SampleEncoder : public SampleEncoder {
 public:
  static absl::StatusOr<std::unique_ptr<Flux2SampleEncoder>> Open(const std::string& pipeline_dir,
                                                                  const Flux2EncoderOptions& options);

  std::string identity() const override { return identity_; }
  int64_t latent_channels() const override;
  int64_t text_dim() const override;
  absl::StatusOr<at::Tensor> EncodeImage(const Image& image) override;
  absl::StatusOr<at::Tensor> EncodeText(const std::string& caption) override;

  Flux2VaeEncoder& vae() { return *vae_; }
  TextEncoder& text_encoder() { return *text_; }
  const BpeTokenizer& tokenizer() const { return *tokenizer_; }
  TextEncoderFamily family() const { return family_; }
  absl::StatusOr<PromptIds> PromptIdsFor(const std::string& caption) const;

 private:
  Flux2SampleEncoder() = default;
  Flux2EncoderOptions options_;
  std::unique_ptr<Flux2VaeEncoder> vae_;
  std::unique_ptr<TextEncoder> text_;
  std::unique_ptr<BpeTokenizer> tokenizer_;
  std::optional<PaddingSide> padding_side_;
  TextEncoderFamily family_ = TextEncoderFamily::kMistral3;
  std::string identity_;
};

// A complete tiny FLUX.2 pipeline folder with random weights in the real layouts and names:
// model_index.json, transformer/ (a small FLUX.2 whose joint_attention_dim = 3 × the text hidden size),
// vae/, text_encoder/ (Mistral3ForConditionalGeneration, vision tower included), tokenizer/ (a small real
// byte-level BPE tokenizer.json) and scheduler/.
absl::Status WriteTinyFlux2Pipeline(const std::string& dir, uint64_t seed);

}  // namespace baton

// The FLUX.2 VAE decoder: the transformer's image tokens → pixels, as Flux2Pipeline does it after its denoising
// loop: un-pack the tokens, de-normalise with the frozen BatchNorm running statistics, un-patchify (2×2) to the
// latent channels, then diffusers' AutoencoderKLFlux2.decode (post_quant_conv + decoder). Loads a diffusers `vae/`
// folder, reading only the decoder/post_quant_conv/bn tensors from the memory-mapped safetensors.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/vae/flux2_vae_config.h"

namespace baton {

class Flux2VaeDecoder {
 public:
  // `vae_dir`: a diffusers vae/ folder, or a pipeline folder holding vae/ (as Flux2VaeEncoder::Load).
  static absl::StatusOr<std::unique_ptr<Flux2VaeDecoder>> Load(const std::string& vae_dir, at::ScalarType dtype,
                                                               at::Device device);
  virtual ~Flux2VaeDecoder() = default;
  virtual const Flux2VaeConfig& config() const = 0;
  // latents [B, latent_channels, h, w] (un-normalised, un-patchified: what the encoder's posterior gives; any
  // device) → pixels [B, out_channels, 8h, 8w] fp32 on the decoder's device, about [-1, 1]
  // (AutoencoderKLFlux2.decode(...).sample).
  virtual absl::StatusOr<at::Tensor> Decode(const at::Tensor& latents) = 0;
  // The transformer's image tokens [B, grid_h·grid_w, 4·latent_channels] (token i·grid_w + j; normalised as
  // Flux2VaeEncoder::PatchifyAndNormalize makes them) → pixels [B, out_channels, 16·grid_h, 16·grid_w] fp32:
  // de-normalise, un-patchify, Decode.
  virtual absl::StatusOr<at::Tensor> DecodeTokens(const at::Tensor& tokens, int64_t grid_h, int64_t grid_w) = 0;
};

}  // namespace baton

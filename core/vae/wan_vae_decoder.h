// The Wan VAE decoder (Wan 2.1, and Wan 2.2's TI2V-5B VAE: is_residual + patch_size 2): latents → pixels exactly as
// diffusers' AutoencoderKLWan.decode (post_quant_conv, then the decoder once per latent frame with the causal
// feature cache, unpatchify, clamp to [-1, 1]), after the un-normalisation WanPipeline.__call__ applies to the
// transformer's latents (z / (1 / latents_std) + latents_mean). Loads a diffusers `vae/` folder, memory-mapping the
// safetensors and reading only decoder.* / post_quant_conv.*. The encoder is core/vae/wan_vae.h.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/vae/wan_vae_config.h"
#include "core/vae/wan_vae_decoder_blocks.h"

namespace baton {

// True for the names the decoder path uses (decoder.*, post_quant_conv.*).
bool IsWanVaeDecoderKey(const std::string& name);

// What the decoder needs beyond WanVaeConfig::Validate: out_channels a positive multiple of patch², a positive
// decoder_base_dim when given, and (is_residual) each DupUp3D shortcut's channels divisible as diffusers asserts.
absl::Status ValidateWanVaeDecoderConfig(const WanVaeConfig& config);

// Frames per later latent frame: 2 per temporal upsampler (diffusers' temperal_upsample = temperal_downsample
// reversed, one entry per up level but the last). 4 for every released Wan VAE.
int64_t WanVaeDecoderTemporalFactor(const WanVaeConfig& config);

// Owns the decoder module. Decode* calls only read the weights, so one instance may serve several threads.
class WanVaeDecoder {
 public:
  // `vae_dir`: a diffusers vae/ folder (config.json with _class_name AutoencoderKLWan +
  // diffusion_pytorch_model.safetensors, or shards listed in its .index.json); a pipeline folder holding vae/ is
  // accepted too. decoder.* / post_quant_conv.* are converted to `dtype`; encoder.* / quant_conv.* are never read.
  // Missing, mis-shaped and unexpected decoder tensors are reported together in one InvalidArgument.
  static absl::StatusOr<std::unique_ptr<WanVaeDecoder>> Load(const std::string& vae_dir, at::ScalarType dtype,
                                                             at::Device device);
  WanVaeDecoder(const WanVaeConfig& config, WanVaeDecoderModule module);

  const WanVaeConfig& config() const { return config_; }
  // Pixel frames for `latent_frames` latents: 1 + temporal factor · (F' − 1) (21 → 81).
  int64_t PixelFrames(int64_t latent_frames) const;

  // The transformer's NORMALISED latents [B, z_dim, F', H', W'] (any floating dtype; computed in the loaded dtype)
  // → pixels [B, 3, PixelFrames(F'), H'·f, W'·f] fp32 in [-1, 1], f = config.spatial_factor() (8; Wan 2.2: 16).
  // Un-normalises as WanPipeline.__call__ does (in the loaded dtype: z / (1 / latents_std) + latents_mean), then
  // DecodeRaw. InvalidArgument on bad shapes, naming the shape and the rule.
  absl::StatusOr<at::Tensor> Decode(const at::Tensor& latents);
  // The VAE's own latents (the encoder's posterior mean; what AutoencoderKLWan.decode takes), no un-normalisation.
  absl::StatusOr<at::Tensor> DecodeRaw(const at::Tensor& latents);
  // z / (1 / latents_std) + latents_mean per channel, in z's dtype (the inverse of WanVaeEncoder::Normalize).
  at::Tensor Denormalize(const at::Tensor& z) const;

 private:
  absl::Status CheckLatents(const at::Tensor& latents) const;
  absl::StatusOr<at::Tensor> Run(const at::Tensor& z);

  WanVaeConfig config_;
  WanVaeDecoderModule module_;
  at::ScalarType dtype_;
  at::Device device_;
};

}  // namespace baton

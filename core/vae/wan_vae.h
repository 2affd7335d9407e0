// The Wan VAE encoder (Wan 2.1, and Wan 2.2's TI2V-5B VAE: is_residual + patch_size 2): pixels (a clip [B, 3, F, H, W],
// F = 4k+1, or images [B, 3, H, W]) → posterior of diffusers' AutoencoderKLWan (encoder + quant_conv, chunked with the
// causal feature cache exactly as its
// `_encode`), and the latent normalisation Wan pipelines apply ((z − latents_mean) / latents_std). Loads a
// diffusers `vae/` folder, memory-mapping the safetensors and reading only encoder.* / quant_conv.*; the decoder
// is core/vae/wan_vae_decoder.h. Also writes random-weight encoder folders for tests (a whole VAE: wan_vae_random.h).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/vae/wan_vae_blocks.h"
#include "core/vae/wan_vae_config.h"

namespace baton {

// Owns the encoder module. Encode* calls only read the weights, so one instance may serve several threads.
class WanVaeEncoder {
 public:
  // `vae_dir`: a diffusers vae/ folder (config.json with _class_name AutoencoderKLWan +
  // diffusion_pytorch_model.safetensors, or shards listed in its .index.json); a pipeline folder holding vae/ is
  // accepted too. encoder.* / quant_conv.* are converted to `dtype`; decoder.* / post_quant_conv.* are never read.
  // Missing, mis-shaped and unexpected encoder tensors are reported together in one InvalidArgument; attn_scales
  // configs are Unimplemented (WanVaeConfig::Validate).
  static absl::StatusOr<std::unique_ptr<WanVaeEncoder>> Load(const std::string& vae_dir, at::ScalarType dtype,
                                                             at::Device device);
  WanVaeEncoder(const WanVaeConfig& config, WanVaeEncoderModule module);

  const WanVaeConfig& config() const { return config_; }

  // pixels [B, 3, F, H, W] (F = 4k+1) or [B, 3, H, W] (one frame) in [-1, 1], H and W positive multiples of
  // config.spatial_factor() → moments [B, 2·z_dim, F' = config.LatentFrames(F), H/f, W/f] fp32 (mean channels first,
  // then the raw log-variance). InvalidArgument on bad shapes, naming the shape and the rule.
  absl::StatusOr<at::Tensor> EncodeMoments(const at::Tensor& pixels);
  // The posterior mean [B, z_dim, F', H/f, W/f] fp32, f = config.spatial_factor() (diffusers latent_dist.mode() ==
  // .mean).
  absl::StatusOr<at::Tensor> EncodeMean(const at::Tensor& pixels);
  // (latents − latents_mean) / latents_std per channel, as WanImageToVideoPipeline.prepare_latents and the
  // diffusers Wan trainers normalise encoded latents. latents [B, z_dim, ...] fp32.
  at::Tensor Normalize(const at::Tensor& latents) const;

 private:
  WanVaeConfig config_;
  WanVaeEncoderModule module_;
  at::ScalarType dtype_;
  at::Device device_;
};

}  // namespace baton

// Wan VAE configuration: diffusers' AutoencoderKLWan `vae/config.json`, same field names and defaults (the
// Wan 2.1 VAE: base_dim 96, z_dim 16, 4 levels, time downsampling on levels 1 and 2; Wan 2.2's TI2V-5B VAE sets
// base_dim 160, z_dim 48, is_residual, patch_size 2, in_channels 12). Pure data, no libtorch.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace baton {

struct WanVaeConfig {
  int64_t base_dim = 96;
  std::optional<int64_t> decoder_base_dim;  // decoder only; kept for a faithful config.json
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<double> attn_scales = {};
  std::vector<bool> temperal_downsample = {false, true, true};  // diffusers' spelling
  double dropout = 0.0;
  std::vector<double> latents_mean;  // z_dim entries; the defaults are Wan 2.1's (set by the constructor)
  std::vector<double> latents_std;
  bool is_residual = false;  // Wan 2.2 (TI2V-5B) residual down blocks
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  std::optional<int64_t> patch_size;  // Wan 2.2: 2 (pixel patchify before the encoder)
  int64_t scale_factor_temporal = 4;
  int64_t scale_factor_spatial = 8;

  WanVaeConfig();

  // Pixel-to-latent downsampling: patch · 2^(levels − 1) spatially (8 for Wan 2.1, 16 for Wan 2.2's patch 2),
  // 2^(temporal downsamples) in time.
  int64_t patch() const { return patch_size.value_or(1); }
  int64_t spatial_factor() const { return patch() << (dim_mult.size() - 1); }
  // Channels of the pixels the caller gives: in_channels / patch² (Wan 2.2's encoder sees 2×2-patchified pixels).
  int64_t pixel_channels() const { return in_channels / (patch() * patch()); }
  int64_t temporal_factor() const;
  // Latent frames for `frames` = 4k+1 input frames: 1 + (frames − 1) / temporal_factor (diffusers' chunking).
  int64_t LatentFrames(int64_t frames) const { return 1 + (frames - 1) / temporal_factor(); }

  // Checks what this implementation supports: Wan 2.1 and Wan 2.2 (is_residual, patch_size) encoders,
  // in_channels a multiple of patch², attn_scales empty (diffusers cannot run down-block attention either),
  // temperal_downsample one entry per level transition, latents_mean/std of z_dim entries (std non-zero).
  absl::Status Validate() const;
};

// Parses diffusers config.json text (`_class_name` must be AutoencoderKLWan when present). Unknown fields are
// ignored; a field of the wrong type is an error naming it. The result is validated.
absl::StatusOr<WanVaeConfig> ParseWanVaeConfig(const std::string& json_text);
absl::StatusOr<WanVaeConfig> LoadWanVaeConfig(const std::string& config_json_path);
std::string WanVaeConfigToJson(const WanVaeConfig& config);

// The `_class_name` of a diffusers config.json ("" when absent): picks the VAE family of a vae/ folder.
absl::StatusOr<std::string> ReadConfigClassName(const std::string& config_json_path);

// True for the names the encoder path uses (encoder.*, quant_conv.*).
bool IsWanVaeEncoderKey(const std::string& name);

// A small config with the Wan 2.1 structure intact (4 levels = 8× spatial, two time downsamples = 4×, a channel
// change so resnets have a conv_shortcut, mid-block attention): base_dim 8, z_dim 4, dim_mult {1, 2, 2, 2},
// num_res_blocks 1, latents_mean/std non-trivial.
WanVaeConfig TinyWanVaeConfig();

// The vae/ folder a loader reads: `vae_or_pipeline_dir` itself, or its vae/ when it is a pipeline folder;
// InvalidArgument for a non-floating compute dtype (`dtype_name` names it).
absl::StatusOr<std::string> WanVaeFolder(const std::string& vae_or_pipeline_dir, bool floating_dtype,
                                         const std::string& dtype_name);

}  // namespace baton

// FLUX.2 VAE configuration: diffusers' AutoencoderKLFlux2 `vae/config.json`, same field names and defaults,
// plus the complete list of tensor names and shapes such a checkpoint holds (encoder, decoder, quant convs,
// latent BatchNorm). Pure data, no libtorch: the key list lets the loader and the random-weight writer agree
// with diffusers without building a model.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace baton {

struct Flux2VaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  std::vector<std::string> down_block_types = {"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D",
                                               "DownEncoderBlock2D"};
  std::vector<std::string> up_block_types = {"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D",
                                             "UpDecoderBlock2D"};
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  int64_t layers_per_block = 2;
  std::string act_fn = "silu";
  int64_t latent_channels = 32;
  int64_t norm_num_groups = 32;
  int64_t sample_size = 1024;  // tiling threshold in diffusers; unused here (no tiling)
  bool force_upcast = true;    // diffusers pipelines run this VAE in fp32
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  double batch_norm_eps = 1e-4;
  double batch_norm_momentum = 0.1;  // training-only; kept for a faithful config.json
  std::array<int64_t, 2> patch_size = {2, 2};

  // Pixel-to-latent downsampling of the encoder: 2^(levels − 1) (8 for FLUX.2).
  int64_t downsample_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }
  // Pixel height and width must be positive multiples of this: 2 · downsample_factor (16 for FLUX.2), so the latent
  // grid pairs into the transformer's 2×2 patches. The encoder and every check of its input ask this.
  int64_t pixel_multiple() const { return 2 * downsample_factor(); }
  // Channels of the patchified latent the transformer sees: latent_channels · 4 (128 for FLUX.2).
  int64_t patched_channels() const { return latent_channels * patch_size[0] * patch_size[1]; }

  // Checks what this implementation supports: DownEncoderBlock2D / UpDecoderBlock2D only, one per entry of
  // block_out_channels, SiLU activation, 2×2 patches, group counts dividing every channel count.
  absl::Status Validate() const;
};

// Parses diffusers config.json text. Bookkeeping keys (`_class_name`, `_diffusers_version`, ...) and
// unknown fields are ignored; a field of the wrong type is an error naming it. The result is validated.
absl::StatusOr<Flux2VaeConfig> ParseFlux2VaeConfig(const std::string& json_text);
absl::StatusOr<Flux2VaeConfig> LoadFlux2VaeConfig(const std::string& config_json_path);
std::string Flux2VaeConfigToJson(const Flux2VaeConfig& config);

// Every tensor of an AutoencoderKLFlux2 state dict as diffusers saves it, name → shape: encoder.*,
// decoder.*, quant_conv.*, post_quant_conv.* and bn.{running_mean, running_var, num_batches_tracked}
// (the last is an int64 scalar, shape []). The FLUX.2 config gives 251 tensors.
std::map<std::string, std::vector<int64_t>> Flux2VaeTensorShapes(const Flux2VaeConfig& config);

// True for the names the encoder path uses (encoder.*, quant_conv.*, bn.*).
bool IsFlux2VaeEncoderKey(const std::string& name);

// A small config with the FLUX.2 structure intact (32 latent channels, 4 levels = 8× downsampling, mid-block
// attention, a channel change so one resnet per path has a conv_shortcut): block_out_channels
// {16, 32, 32, 32}, layers_per_block 1, norm_num_groups 8.
Flux2VaeConfig TinyFlux2VaeConfig();

}  // namespace baton

// The building blocks of the Wan VAE decoder (2.1, and 2.2's residual up blocks) as libtorch modules, mirroring
// diffusers' autoencoder_kl_wan.py (WanResample upsample2d/upsample3d, WanUpBlock, WanResidualUpBlock with its
// DupUp3D shortcut, WanDecoder3d, and AutoencoderKLWan's `_decode`) with the same parameter names. The resnets, the
// mid block, RMS norm and the causal conv are the encoder's (wan_vae_blocks.h). Inference only (no dropout).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/vae/wan_vae_blocks.h"
#include "core/vae/wan_vae_config.h"

namespace baton {

// One layer of decoder.up_blocks: takes the feature cache and diffusers' `first_chunk` (true for latent frame 0).
class WanDecoderLayer : public torch::nn::Module {
 public:
  virtual at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache, bool first_chunk) = 0;
};

// upsample2d: per frame, nearest-exact ×2 (in fp32, back to the input dtype) then a 3×3 Conv2d (padding 1,
// `resample.1`) to `out_dim` channels. upsample3d first doubles time with `time_conv` (3×1×1 causal, dim → 2·dim,
// the two halves interleaved as frames 2t and 2t+1), exactly as diffusers' cached path: the first latent frame only
// marks the slot (diffusers' "Rep" sentinel, here a zero-frame tensor) and keeps its one frame; each later call is
// convolved after the cached frames (zeros in front of the frames that followed "Rep").
class WanUpResample : public torch::nn::Module {
 public:
  WanUpResample(int64_t dim, int64_t out_dim, bool time_upsample);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache);

  at::Tensor resample_weight, resample_bias;
  WanCausalConv3d time_conv{nullptr};  // upsample3d only
};

// Wan 2.1 (WanUpBlock): num_res_blocks + 1 resnets (the first in_dim → out_dim), then (unless the last level) an
// `upsamplers.0` WanUpResample to out_dim / 2 channels (the next block's in_dim is halved to match).
class WanUpBlock : public WanDecoderLayer {
 public:
  WanUpBlock(int64_t in, int64_t out, int64_t num_res_blocks, bool up_flag, bool time_upsample);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache, bool first_chunk) override;

 private:
  std::vector<std::shared_ptr<WanResidualBlock>> resnets_;
  std::shared_ptr<WanUpResample> upsampler_;
};

// Wan 2.2 (is_residual, WanResidualUpBlock): num_res_blocks + 1 resnets, then (up_flag) an `upsampler`
// WanUpResample keeping out_dim channels, plus the parameterless DupUp3D shortcut of the block's input (channels
// repeated, then a space/time pixel-shuffle; on the first chunk the first factor_t − 1 frames are dropped).
class WanResidualUpBlock : public WanDecoderLayer {
 public:
  WanResidualUpBlock(int64_t in, int64_t out, int64_t num_res_blocks, bool up_flag, bool time_upsample);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache, bool first_chunk) override;

 private:
  at::Tensor DupUp(const at::Tensor& x, bool first_chunk) const;

  std::vector<std::shared_ptr<WanResidualBlock>> resnets_;
  std::shared_ptr<WanUpResample> upsampler_;
  int64_t out_, factor_t_, factor_s_, repeats_;
};

// WanDecoder3d: conv_in (z_dim → top) → mid_block → up_blocks → norm_out → SiLU → conv_out (out_channels).
// Channels: decoder_base_dim (default base_dim) · [dim_mult[-1]] + reversed dim_mult.
class WanDecoder3dImpl : public torch::nn::Module {
 public:
  explicit WanDecoder3dImpl(const WanVaeConfig& config);
  at::Tensor forward(const at::Tensor& x, WanFeatCache* cache, bool first_chunk);

  WanCausalConv3d conv_in{nullptr}, conv_out{nullptr};
  WanMidBlock mid_block{nullptr};
  WanRmsNorm norm_out{nullptr};

 private:
  std::vector<std::shared_ptr<WanDecoderLayer>> layers_;
};
TORCH_MODULE(WanDecoder3d);

// The decoder half of AutoencoderKLWan: `post_quant_conv` (1×1×1) and `decoder`. `named_parameters()` equals the
// checkpoint keys (`decoder.up_blocks.0.upsamplers.0.time_conv.weight`, `post_quant_conv.weight`). forward runs
// diffusers' `_decode`: post_quant_conv, then the decoder once per latent frame with one feature cache (frame 0 with
// first_chunk), the outputs concatenated in time, unpatchified (Wan 2.2's patch_size: output channel c·p² + p·dx +
// dy is pixel (p·i + dy, p·j + dx) of channel c) and clamped to [-1, 1]. z [B, z_dim, F', H', W'] (un-normalised) →
// [B, out_channels / p², 1 + temporal_factor·(F' − 1), H'·f, W'·f], f = config.spatial_factor().
class WanVaeDecoderModuleImpl : public torch::nn::Module {
 public:
  explicit WanVaeDecoderModuleImpl(const WanVaeConfig& config);
  at::Tensor forward(const at::Tensor& z);

  WanCausalConv3d post_quant_conv{nullptr};
  WanDecoder3d decoder{nullptr};

 private:
  int64_t patch_;
};
TORCH_MODULE(WanVaeDecoderModule);

}  // namespace baton

// The building blocks of the Wan VAE encoder (2.1, and 2.2's residual down blocks) as libtorch modules, mirroring
// diffusers' autoencoder_kl_wan.py (WanCausalConv3d, WanRMS_norm, WanResidualBlock, WanAttentionBlock, WanResample
// downsample2d/3d, WanMidBlock, WanEncoder3d) with the same parameter names. Inference only (no dropout).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/vae/wan_vae_config.h"

namespace baton {

// diffusers' `_enc_feat_map` and `_enc_conv_idx`: one slot per cached convolution, visited in the same order
// for every chunk. An undefined tensor is diffusers' None. Every layer takes the feature cache diffusers threads
// through its chunked `_encode` (feat_cache / feat_idx, CACHE_T = 2), so chunk-by-chunk encoding is op for op the
// upstream one.
struct WanFeatCache {
  std::vector<at::Tensor> slots;
  size_t idx = 0;
  // The slot at idx (grown on first use); the caller advances idx.
  at::Tensor& Current();
};

// A Conv3d with causal time padding: (kt − 1) zero frames before (2·padding_t), none after, spatial padding
// symmetric. With `cache` (earlier frames), those frames replace as many leading zero frames.
class WanCausalConv3dImpl : public torch::nn::Module {
 public:
  WanCausalConv3dImpl(int64_t in, int64_t out, std::array<int64_t, 3> kernel, std::array<int64_t, 3> stride = {1, 1, 1},
                      std::array<int64_t, 3> padding = {0, 0, 0});
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cache = {});

  at::Tensor weight, bias;

 private:
  std::array<int64_t, 3> stride_, padding_;
};
TORCH_MODULE(WanCausalConv3d);

// diffusers WanRMS_norm without bias: F.normalize over channels (eps 1e-12, fp32 for half inputs) · √dim · gamma.
// `images` gives gamma shape [dim, 1, 1] (4-D input) instead of [dim, 1, 1, 1] (5-D input).
class WanRmsNormImpl : public torch::nn::Module {
 public:
  WanRmsNormImpl(int64_t dim, bool images);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor gamma;

 private:
  double scale_;
};
TORCH_MODULE(WanRmsNorm);

// One layer of encoder.down_blocks (a resnet, an attention or a resample): all take the feature cache.
class WanEncoderLayer : public torch::nn::Module {
 public:
  virtual at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache) = 0;
};

// conv1/conv2 are 3×3×3 causal convs, each fed through the cache; conv_shortcut (1×1×1) when in != out.
class WanResidualBlock : public WanEncoderLayer {
 public:
  WanResidualBlock(int64_t in, int64_t out);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache) override;

  WanRmsNorm norm1{nullptr}, norm2{nullptr};
  WanCausalConv3d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
};

// Single-head self-attention over each frame's pixels (frames independent), RMS norm first, residual added.
class WanAttentionBlock : public WanEncoderLayer {
 public:
  explicit WanAttentionBlock(int64_t dim);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache) override;

  WanRmsNorm norm{nullptr};
  at::Tensor qkv_weight, qkv_bias, proj_weight, proj_bias;  // to_qkv / proj: 1×1 Conv2d
};

// downsample2d: per frame, pad (0, 1, 0, 1) then a stride-2 3×3 Conv2d (`resample.1`). downsample3d also
// halves time with `time_conv` (3×1×1, stride 2, no padding) exactly as diffusers' cached path: the first
// chunk is only remembered, each later chunk is convolved after the previous chunk's last frame.
class WanResample : public WanEncoderLayer {
 public:
  WanResample(int64_t dim, bool time_downsample);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache) override;

  at::Tensor resample_weight, resample_bias;
  WanCausalConv3d time_conv{nullptr};  // downsample3d only
};

// Wan 2.2 (is_residual): num_res_blocks resnets, then (down_flag) a WanResample `downsampler`, plus the
// parameterless AvgDown3D shortcut of the block's input (channel groups averaged after a space/time
// pixel-unshuffle; time is zero-padded in front to a multiple of factor_t).
class WanResidualDownBlock : public WanEncoderLayer {
 public:
  WanResidualDownBlock(int64_t in, int64_t out, int64_t num_res_blocks, bool time_downsample, bool down_flag);
  at::Tensor Forward(const at::Tensor& x, WanFeatCache* cache) override;

 private:
  at::Tensor AvgDown(const at::Tensor& x) const;

  std::vector<std::shared_ptr<WanResidualBlock>> resnets_;
  std::shared_ptr<WanResample> downsampler_;
  int64_t out_, factor_t_, factor_s_;
};

// resnets[0] → attentions[0] → resnets[1].
class WanMidBlockImpl : public torch::nn::Module {
 public:
  explicit WanMidBlockImpl(int64_t dim);
  at::Tensor forward(const at::Tensor& x, WanFeatCache* cache);

 private:
  std::shared_ptr<WanResidualBlock> resnet0_, resnet1_;
  std::shared_ptr<WanAttentionBlock> attention_;
};
TORCH_MODULE(WanMidBlock);

// WanEncoder3d: conv_in → down_blocks → mid_block → norm_out → SiLU → conv_out (2·z_dim channels).
class WanEncoder3dImpl : public torch::nn::Module {
 public:
  explicit WanEncoder3dImpl(const WanVaeConfig& config);
  at::Tensor forward(const at::Tensor& x, WanFeatCache* cache);

  WanCausalConv3d conv_in{nullptr}, conv_out{nullptr};
  WanMidBlock mid_block{nullptr};
  WanRmsNorm norm_out{nullptr};

 private:
  std::vector<std::shared_ptr<WanEncoderLayer>> layers_;
};
TORCH_MODULE(WanEncoder3d);

// The encoder half of AutoencoderKLWan: `encoder` and `quant_conv` (1×1×1). `named_parameters()` equals the
// checkpoint keys (`encoder.down_blocks.0.conv1.weight`, `encoder.down_blocks.2.time_conv.weight`,
// `quant_conv.weight`). forward runs diffusers' `_encode`:
// patchify (Wan 2.2's patch_size: channel c·p² + p·dx + dy holds pixel (p·i + dy, p·j + dx) of channel c), frame 0
// alone, then chunks of 4 frames with one feature cache, concatenated, then quant_conv. pixels [B, 3, F, H, W] →
// posterior moments [B, 2·z_dim, config.LatentFrames(F), H/8, W/8] (mean first).
class WanVaeEncoderModuleImpl : public torch::nn::Module {
 public:
  explicit WanVaeEncoderModuleImpl(const WanVaeConfig& config);
  at::Tensor forward(const at::Tensor& pixels);

  WanEncoder3d encoder{nullptr};
  WanCausalConv3d quant_conv{nullptr};

 private:
  int64_t patch_;
};
TORCH_MODULE(WanVaeEncoderModule);

}  // namespace baton

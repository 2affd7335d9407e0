// The building blocks of the FLUX.2 VAE encoder as libtorch modules, mirroring diffusers' classes
// (ResnetBlock2D, Attention as UNetMidBlock2D builds it, Downsample2D, DownEncoderBlock2D, UNetMidBlock2D,
// vae.Encoder) with the same submodule names, so `named_parameters()` of AutoencoderKLFlux2Encoder equals
// the checkpoint keys (`encoder.down_blocks.0.resnets.0.norm1.weight`, `quant_conv.weight`, `bn.running_mean`).
// Inference only: no temb, no dropout, no gradient checkpointing.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

#include "core/vae/flux2_vae_config.h"

namespace baton {

torch::nn::Conv2d MakeConv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding);
torch::nn::GroupNorm MakeGroupNorm(int64_t groups, int64_t channels, double eps);

// diffusers' VAE blocks all use GroupNorm eps 1e-6 (resnet_eps) regardless of the config.
constexpr double kVaeGroupNormEps = 1e-6;

// x → norm1 → SiLU → conv1(3×3) → norm2 → SiLU → conv2(3×3), plus the input (through a 1×1 conv_shortcut
// when the channel count changes). [B, in, H, W] → [B, out, H, W].
class ResnetBlock2DImpl : public torch::nn::Module {
 public:
  ResnetBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t groups, double eps = kVaeGroupNormEps);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Conv2d conv_shortcut{nullptr};  // only when in_channels != out_channels
};
TORCH_MODULE(ResnetBlock2D);

// diffusers `Attention` over the H·W pixels of a feature map, as the VAE mid block uses it: one head of
// dim C (scale 1/√C), GroupNorm before the projections, biases everywhere, residual added, no rescale.
// [B, C, H, W] → [B, C, H, W]. Scores and softmax are computed in fp32 over query chunks of
// `query_chunk` pixels (exact: softmax is per query row) so 128×128 maps do not need a 1 GB score matrix.
class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(int64_t channels, int64_t groups, double eps = kVaeGroupNormEps);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::GroupNorm group_norm{nullptr};
  torch::nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};  // [0] = Linear(C, C); diffusers' [1] is a parameterless Dropout
  int64_t query_chunk = 4096;

 private:
  torch::nn::Linear out_proj_{nullptr};  // = to_out[0]
};
TORCH_MODULE(VaeAttention);

// Stride-2 3×3 conv with diffusers' padding=0 behaviour: zero-pad one row at the bottom and one column on
// the right (F.pad(x, (0, 1, 0, 1))), then convolve without padding. [B, C, H, W] → [B, C, H/2, W/2].
class Downsample2DImpl : public torch::nn::Module {
 public:
  explicit Downsample2DImpl(int64_t channels);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(Downsample2D);

// `num_layers` resnets then (unless last level) a Downsample2D. [B, in, H, W] → [B, out, H/2, W/2].
class DownEncoderBlock2DImpl : public torch::nn::Module {
 public:
  DownEncoderBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t num_layers, int64_t groups,
                         bool add_downsample);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::ModuleList resnets{nullptr};
  torch::nn::ModuleList downsamplers{nullptr};  // absent (null) on the last level

 private:
  std::vector<ResnetBlock2D> resnet_list_;
  Downsample2D downsample_{nullptr};
};
TORCH_MODULE(DownEncoderBlock2D);

// resnets[0] → attentions[0] (if add_attention) → resnets[1], all at `channels`.
class UNetMidBlock2DImpl : public torch::nn::Module {
 public:
  UNetMidBlock2DImpl(int64_t channels, int64_t groups, bool add_attention);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::ModuleList resnets{nullptr};
  torch::nn::ModuleList attentions{nullptr};  // empty when add_attention is false

 private:
  std::vector<ResnetBlock2D> resnet_list_;
  VaeAttention attention_{nullptr};
};
TORCH_MODULE(UNetMidBlock2D);

// diffusers vae.Encoder with double_z: conv_in → down_blocks → mid_block → GroupNorm → SiLU → conv_out.
// [B, in_channels, H, W] → [B, 2·latent_channels, H/f, W/f] (f = config.downsample_factor()).
class VaeEncoderImpl : public torch::nn::Module {
 public:
  explicit VaeEncoderImpl(const Flux2VaeConfig& config);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Conv2d conv_in{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};
  UNetMidBlock2D mid_block{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};
  torch::nn::Conv2d conv_out{nullptr};

 private:
  std::vector<DownEncoderBlock2D> block_list_;
};
TORCH_MODULE(VaeEncoder);

// The encoder half of AutoencoderKLFlux2: `encoder`, `quant_conv` (when use_quant_conv) and the latent
// BatchNorm `bn` (affine=False; buffers running_mean/running_var [4·latent_channels] and
// num_batches_tracked). forward returns the posterior moments [B, 2·latent_channels, H/f, W/f]
// (mean channels first, then log-variance).
class AutoencoderKLFlux2EncoderImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLFlux2EncoderImpl(const Flux2VaeConfig& config);
  at::Tensor forward(const at::Tensor& pixels);

  VaeEncoder encoder{nullptr};
  torch::nn::Conv2d quant_conv{nullptr};  // null when use_quant_conv is false
  torch::nn::BatchNorm2d bn{nullptr};     // only its running statistics are used
};
TORCH_MODULE(AutoencoderKLFlux2Encoder);

}  // namespace baton

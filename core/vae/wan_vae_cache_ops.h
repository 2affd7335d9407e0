// The pieces the Wan VAE's encoder and decoder blocks share (wan_vae_blocks.cc, wan_vae_decoder_blocks.cc): causal
// convs built from arrays, a conv's weight/bias child, the causal feature cache's update rule (diffusers' CACHE_T),
// and the [B, C, T, H, W] <-> [B·T, C, H, W] folds the 2-D resamplers need.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/vae/wan_vae_blocks.h"

namespace baton {

// diffusers CACHE_T: frames of a layer's input remembered for the next chunk or call.
inline constexpr int64_t kWanCacheT = 2;

// The holder built from an Impl: brace-initialised arrays do not pass through ModuleHolder's forwarding constructor.
WanCausalConv3d WanCausalConv(int64_t in, int64_t out, std::array<int64_t, 3> kernel,
                              std::array<int64_t, 3> stride = {1, 1, 1}, std::array<int64_t, 3> padding = {0, 0, 0});

// A child module holding a conv's weight and bias, so the parameters are named `<child>.weight` / `.bias`.
class WanConvParams : public torch::nn::Module {
 public:
  explicit WanConvParams(const std::vector<int64_t>& shape);
  at::Tensor weight, bias;
};

// The last min(T, CACHE_T) frames of x; when that is a single frame and the slot holds an earlier chunk, its last
// frame is put in front (diffusers: "cache last frame of last two chunk").
at::Tensor WanNextCache(const at::Tensor& x, const at::Tensor& slot);

// A causal conv through the cache (no cache: a plain forward), advancing the cache's index.
at::Tensor WanCachedConv(WanCausalConv3d& conv, const at::Tensor& x, WanFeatCache* cache);

// [B, C, T, H, W] ↔ [B·T, C, H, W]
at::Tensor WanFramesToBatch(const at::Tensor& x);
at::Tensor WanBatchToFrames(const at::Tensor& x, int64_t b, int64_t t);

}  // namespace baton

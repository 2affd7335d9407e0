#include "core/vae/wan_vae_decoder_blocks.h"

#include <ATen/ops/_upsample_nearest_exact2d.h>
#include <torch/nn/modules/container/modulelist.h>

#include <algorithm>
#include <string>

#include "core/vae/wan_vae_cache_ops.h"

namespace baton {

WanUpResample::WanUpResample(int64_t dim, int64_t out_dim, bool time_upsample) {
  auto resample = register_module("resample", std::make_shared<torch::nn::Module>());
  // resample.0 is the parameterless WanUpsample.
  auto conv = resample->register_module("1", std::make_shared<WanConvParams>(std::vector<int64_t>{out_dim, dim, 3, 3}));
  resample_weight = conv->weight;
  resample_bias = conv->bias;
  if (time_upsample) {
    time_conv = register_module("time_conv", WanCausalConv(dim, 2 * dim, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}));
  }
}

at::Tensor WanUpResample::Forward(const at::Tensor& x, WanFeatCache* cache) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(3), w = x.size(4);
  at::Tensor y = x;
  // diffusers applies time_conv only on the cached path (its `_decode` always passes a cache).
  if (time_conv && cache != nullptr) {
    at::Tensor& slot = cache->Current();
    if (!slot.defined()) {
      slot = at::empty({b, c, 0, h, w}, x.options());  // "Rep": the first call keeps its frame count
    } else {
      const bool rep = slot.size(2) == 0;
      const int64_t t = x.size(2);
      at::Tensor cache_x = x.narrow(2, std::max<int64_t>(0, t - kWanCacheT), std::min(t, kWanCacheT)).clone();
      if (cache_x.size(2) < 2) {
        cache_x = at::cat({rep ? at::zeros_like(cache_x) : slot.narrow(2, slot.size(2) - 1, 1), cache_x}, 2);
      }
      y = rep ? time_conv->forward(x) : time_conv->forward(x, slot);
      slot = cache_x;
      // [B, 2C, T, H, W] → [B, C, 2T, H, W]: the first C channels are frame 2t, the second C frame 2t + 1.
      y = y.reshape({b, 2, c, t, h, w});
      y = at::stack({y.select(1, 0), y.select(1, 1)}, 3).reshape({b, c, 2 * t, h, w});
    }
    ++cache->idx;
  }
  const int64_t t = y.size(2);
  at::Tensor frames = WanFramesToBatch(y);
  // WanUpsample: nearest-exact ×2 in fp32, back to the input dtype.
  frames = at::_upsample_nearest_exact2d(frames.to(at::kFloat), {2 * h, 2 * w}, 2.0, 2.0).to(x.scalar_type());
  frames = at::conv2d(frames, resample_weight, resample_bias, {1, 1}, {1, 1});
  return WanBatchToFrames(frames, b, t);
}

WanUpBlock::WanUpBlock(int64_t in, int64_t out, int64_t num_res_blocks, bool up_flag, bool time_upsample) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t r = 0; r <= num_res_blocks; ++r) {
    resnets_.push_back(std::make_shared<WanResidualBlock>(r == 0 ? in : out, out));
    resnets->push_back(resnets_.back());
  }
  if (up_flag) {
    auto upsamplers = register_module("upsamplers", torch::nn::ModuleList());
    upsampler_ = std::make_shared<WanUpResample>(out, out / 2, time_upsample);
    upsamplers->push_back(upsampler_);
  }
}

at::Tensor WanUpBlock::Forward(const at::Tensor& x, WanFeatCache* cache, bool /*first_chunk*/) {
  at::Tensor y = x;
  for (auto& resnet : resnets_) y = resnet->Forward(y, cache);
  return upsampler_ ? upsampler_->Forward(y, cache) : y;
}

WanResidualUpBlock::WanResidualUpBlock(int64_t in, int64_t out, int64_t num_res_blocks, bool up_flag,
                                       bool time_upsample)
    : out_(out), factor_t_(time_upsample ? 2 : 1), factor_s_(2), repeats_(0) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t r = 0; r <= num_res_blocks; ++r) {
    resnets_.push_back(std::make_shared<WanResidualBlock>(r == 0 ? in : out, out));
    resnets->push_back(resnets_.back());
  }
  if (up_flag) {
    const int64_t factor = factor_t_ * factor_s_ * factor_s_;
    TORCH_CHECK(out * factor % in == 0, "DupUp3D: ", out, " channels times the factor ", factor,
                " must be divisible by ", in);
    repeats_ = out * factor / in;
    upsampler_ = register_module("upsampler", std::make_shared<WanUpResample>(out, out, time_upsample));
  }
}

at::Tensor WanResidualUpBlock::DupUp(const at::Tensor& x0, bool first_chunk) const {
  at::Tensor x = at::repeat_interleave(x0, repeats_, 1);
  const int64_t b = x.size(0), t = x.size(2), h = x.size(3), w = x.size(4), ft = factor_t_, fs = factor_s_;
  x = x.view({b, out_, ft, fs, fs, t, h, w}).permute({0, 1, 5, 2, 6, 3, 7, 4}).contiguous();
  x = x.view({b, out_, t * ft, h * fs, w * fs});
  if (first_chunk) x = x.narrow(2, ft - 1, x.size(2) - (ft - 1));
  return x;
}

at::Tensor WanResidualUpBlock::Forward(const at::Tensor& x, WanFeatCache* cache, bool first_chunk) {
  at::Tensor y = x;
  for (auto& resnet : resnets_) y = resnet->Forward(y, cache);
  if (!upsampler_) return y;
  y = upsampler_->Forward(y, cache);
  return y + DupUp(x, first_chunk);
}

WanDecoder3dImpl::WanDecoder3dImpl(const WanVaeConfig& c) {
  const int64_t dim = c.decoder_base_dim.value_or(c.base_dim);
  std::vector<int64_t> dims = {dim * c.dim_mult.back()};
  for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it) dims.push_back(dim * *it);
  // AutoencoderKLWan: temperal_upsample = temperal_downsample[::-1] (the whole list), indexed by up level.
  const std::vector<bool> temperal_upsample(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
  conv_in = register_module("conv_in", WanCausalConv(c.z_dim, dims[0], {3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
  mid_block = register_module("mid_block", WanMidBlock(dims[0]));
  auto up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  const size_t levels = c.dim_mult.size();
  for (size_t i = 0; i < levels; ++i) {
    int64_t in = dims[i];
    const int64_t out = dims[i + 1];
    if (i > 0 && !c.is_residual) in /= 2;  // Wan 2.1: the previous upsampler halved the channels
    const bool up_flag = i != levels - 1;
    const bool time_upsample = up_flag && temperal_upsample[i];
    if (c.is_residual) {
      layers_.push_back(std::make_shared<WanResidualUpBlock>(in, out, c.num_res_blocks, up_flag, time_upsample));
    } else {
      layers_.push_back(std::make_shared<WanUpBlock>(in, out, c.num_res_blocks, up_flag, time_upsample));
    }
    up_blocks->push_back(layers_.back());
  }
  norm_out = register_module("norm_out", WanRmsNorm(dims.back(), false));
  conv_out = register_module("conv_out", WanCausalConv(dims.back(), c.out_channels, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
}

at::Tensor WanDecoder3dImpl::forward(const at::Tensor& x, WanFeatCache* cache, bool first_chunk) {
  at::Tensor y = WanCachedConv(conv_in, x, cache);
  y = mid_block->forward(y, cache);
  for (auto& layer : layers_) y = layer->Forward(y, cache, first_chunk);
  return WanCachedConv(conv_out, at::silu(norm_out->forward(y)), cache);
}

WanVaeDecoderModuleImpl::WanVaeDecoderModuleImpl(const WanVaeConfig& c) : patch_(c.patch()) {
  post_quant_conv = register_module("post_quant_conv", WanCausalConv(c.z_dim, c.z_dim, {1, 1, 1}));
  decoder = register_module("decoder", WanDecoder3d(c));
}

at::Tensor WanVaeDecoderModuleImpl::forward(const at::Tensor& z) {
  at::Tensor x = post_quant_conv->forward(z);
  // diffusers `_decode`: the decoder once per latent frame, one feature cache, frame 0 with first_chunk.
  WanFeatCache cache;
  std::vector<at::Tensor> outs;
  for (int64_t i = 0; i < x.size(2); ++i) {
    cache.idx = 0;
    outs.push_back(decoder->forward(x.narrow(2, i, 1), &cache, /*first_chunk=*/i == 0));
  }
  at::Tensor out = outs.size() == 1 ? outs[0] : at::cat(outs, 2);
  if (patch_ > 1) {  // diffusers unpatchify: [B, C·p², F, H, W] → [B, C, F, H·p, W·p]
    const int64_t b = out.size(0), c = out.size(1) / (patch_ * patch_), f = out.size(2), h = out.size(3),
                  w = out.size(4);
    out = out.view({b, c, patch_, patch_, f, h, w})
              .permute({0, 1, 4, 5, 3, 6, 2})
              .contiguous()
              .view({b, c, f, h * patch_, w * patch_});
  }
  return at::clamp(out, -1.0, 1.0);
}

}  // namespace baton

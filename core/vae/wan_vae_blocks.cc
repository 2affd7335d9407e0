#include "core/vae/wan_vae_blocks.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>

#include "core/vae/wan_vae_cache_ops.h"

namespace baton {

at::Tensor& WanFeatCache::Current() {
  if (slots.size() <= idx) slots.resize(idx + 1);
  return slots[idx];
}

WanCausalConv3dImpl::WanCausalConv3dImpl(int64_t in, int64_t out, std::array<int64_t, 3> kernel,
                                         std::array<int64_t, 3> stride, std::array<int64_t, 3> padding)
    : stride_(stride), padding_(padding) {
  weight = register_parameter("weight", at::zeros({out, in, kernel[0], kernel[1], kernel[2]}));
  bias = register_parameter("bias", at::zeros({out}));
}

at::Tensor WanCausalConv3dImpl::forward(const at::Tensor& x, const at::Tensor& cache) {
  int64_t pad_t = 2 * padding_[0];
  at::Tensor in = x;
  if (cache.defined() && pad_t > 0) {
    in = at::cat({cache.to(x.device()), x}, 2);
    pad_t -= cache.size(2);
  }
  in = at::constant_pad_nd(in, {padding_[2], padding_[2], padding_[1], padding_[1], pad_t, 0}, 0.0);
  return at::conv3d(in, weight, bias, {stride_[0], stride_[1], stride_[2]});
}

WanRmsNormImpl::WanRmsNormImpl(int64_t dim, bool images) : scale_(std::sqrt(static_cast<double>(dim))) {
  gamma = register_parameter("gamma", images ? at::ones({dim, 1, 1}) : at::ones({dim, 1, 1, 1}));
}

at::Tensor WanRmsNormImpl::forward(const at::Tensor& x) {
  // F.normalize: x / max(‖x‖₂, 1e-12) over channels; fp32 for half inputs, back to the input dtype.
  const bool upcast = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  at::Tensor xf = upcast ? x.to(at::kFloat) : x;
  at::Tensor normalized = (xf / xf.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12)).to(x.scalar_type());
  return normalized * scale_ * gamma;
}

WanResidualBlock::WanResidualBlock(int64_t in, int64_t out) {
  norm1 = register_module("norm1", WanRmsNorm(in, false));
  conv1 = register_module("conv1", WanCausalConv(in, out, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
  norm2 = register_module("norm2", WanRmsNorm(out, false));
  conv2 = register_module("conv2", WanCausalConv(out, out, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
  if (in != out) conv_shortcut = register_module("conv_shortcut", WanCausalConv(in, out, {1, 1, 1}));
}

at::Tensor WanResidualBlock::Forward(const at::Tensor& x, WanFeatCache* cache) {
  at::Tensor h = conv_shortcut ? conv_shortcut->forward(x) : x;
  at::Tensor y = WanCachedConv(conv1, at::silu(norm1->forward(x)), cache);
  y = WanCachedConv(conv2, at::silu(norm2->forward(y)), cache);
  return y + h;
}

WanAttentionBlock::WanAttentionBlock(int64_t dim) {
  norm = register_module("norm", WanRmsNorm(dim, true));
  auto qkv = register_module("to_qkv", std::make_shared<WanConvParams>(std::vector<int64_t>{3 * dim, dim, 1, 1}));
  auto proj = register_module("proj", std::make_shared<WanConvParams>(std::vector<int64_t>{dim, dim, 1, 1}));
  qkv_weight = qkv->weight;
  qkv_bias = qkv->bias;
  proj_weight = proj->weight;
  proj_bias = proj->bias;
}

at::Tensor WanAttentionBlock::Forward(const at::Tensor& x, WanFeatCache* /*cache*/) {
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  at::Tensor y = norm->forward(WanFramesToBatch(x));
  at::Tensor qkv = at::conv2d(y, qkv_weight, qkv_bias).reshape({b * t, 1, 3 * c, -1}).permute({0, 1, 3, 2});
  qkv = qkv.contiguous();
  auto parts = qkv.chunk(3, -1);
  y = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);
  y = y.squeeze(1).permute({0, 2, 1}).reshape({b * t, c, h, w});
  y = at::conv2d(y, proj_weight, proj_bias);
  return WanBatchToFrames(y, b, t) + x;
}

WanResample::WanResample(int64_t dim, bool time_downsample) {
  auto resample = register_module("resample", std::make_shared<torch::nn::Module>());
  // resample.0 is the parameterless ZeroPad2d.
  auto conv = resample->register_module("1", std::make_shared<WanConvParams>(std::vector<int64_t>{dim, dim, 3, 3}));
  resample_weight = conv->weight;
  resample_bias = conv->bias;
  if (time_downsample) time_conv = register_module("time_conv", WanCausalConv(dim, dim, {3, 1, 1}, {2, 1, 1}));
}

at::Tensor WanResample::Forward(const at::Tensor& x, WanFeatCache* cache) {
  const int64_t b = x.size(0), t = x.size(2);
  at::Tensor y = at::constant_pad_nd(WanFramesToBatch(x), {0, 1, 0, 1}, 0.0);
  y = WanBatchToFrames(at::conv2d(y, resample_weight, resample_bias, {2, 2}), b, t);
  // diffusers applies time_conv only on the cached path (its `_encode` always passes a cache).
  if (!time_conv || cache == nullptr) return y;
  at::Tensor& slot = cache->Current();
  if (!slot.defined()) {
    slot = y.clone();
  } else {
    at::Tensor cache_x = y.narrow(2, y.size(2) - 1, 1).clone();
    y = time_conv->forward(at::cat({slot.narrow(2, slot.size(2) - 1, 1), y}, 2));
    slot = cache_x;
  }
  ++cache->idx;
  return y;
}

WanResidualDownBlock::WanResidualDownBlock(int64_t in, int64_t out, int64_t num_res_blocks, bool time_downsample,
                                           bool down_flag)
    : out_(out), factor_t_(time_downsample ? 2 : 1), factor_s_(down_flag ? 2 : 1) {
  TORCH_CHECK(in * factor_t_ * factor_s_ * factor_s_ % out == 0, "AvgDown3D: ", in, " channels times the factor ",
              factor_t_ * factor_s_ * factor_s_, " must be divisible by ", out);
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t r = 0; r < num_res_blocks; ++r) {
    resnets_.push_back(std::make_shared<WanResidualBlock>(r == 0 ? in : out, out));
    resnets->push_back(resnets_.back());
  }
  if (down_flag) downsampler_ = register_module("downsampler", std::make_shared<WanResample>(out, time_downsample));
}

at::Tensor WanResidualDownBlock::AvgDown(const at::Tensor& x0) const {
  const int64_t pad_t = (factor_t_ - x0.size(2) % factor_t_) % factor_t_;
  at::Tensor x = at::constant_pad_nd(x0, {0, 0, 0, 0, pad_t, 0}, 0.0);
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2) / factor_t_, h = x.size(3) / factor_s_,
                w = x.size(4) / factor_s_, fs = factor_s_, factor = factor_t_ * fs * fs;
  x = x.view({b, c, t, factor_t_, h, fs, w, fs}).permute({0, 1, 3, 5, 7, 2, 4, 6}).contiguous();
  return x.view({b, out_, c * factor / out_, t, h, w}).mean(2);
}

at::Tensor WanResidualDownBlock::Forward(const at::Tensor& x, WanFeatCache* cache) {
  at::Tensor y = x;
  for (auto& resnet : resnets_) y = resnet->Forward(y, cache);
  if (downsampler_) y = downsampler_->Forward(y, cache);
  return y + AvgDown(x);
}

WanMidBlockImpl::WanMidBlockImpl(int64_t dim) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  auto attentions = register_module("attentions", torch::nn::ModuleList());
  resnet0_ = std::make_shared<WanResidualBlock>(dim, dim);
  attention_ = std::make_shared<WanAttentionBlock>(dim);
  resnet1_ = std::make_shared<WanResidualBlock>(dim, dim);
  resnets->push_back(resnet0_);
  resnets->push_back(resnet1_);
  attentions->push_back(attention_);
}

at::Tensor WanMidBlockImpl::forward(const at::Tensor& x, WanFeatCache* cache) {
  at::Tensor y = resnet0_->Forward(x, cache);
  y = attention_->Forward(y, cache);
  return resnet1_->Forward(y, cache);
}

WanEncoder3dImpl::WanEncoder3dImpl(const WanVaeConfig& c) {
  std::vector<int64_t> dims = {c.base_dim};
  for (int64_t m : c.dim_mult) dims.push_back(c.base_dim * m);
  conv_in = register_module("conv_in", WanCausalConv(c.in_channels, dims[0], {3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
  auto down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  double scale = 1.0;
  const size_t levels = c.dim_mult.size();
  for (size_t i = 0; i < levels; ++i) {
    int64_t in = dims[i];
    const int64_t out = dims[i + 1];
    const bool last = i == levels - 1;
    if (c.is_residual) {
      layers_.push_back(
          std::make_shared<WanResidualDownBlock>(in, out, c.num_res_blocks, !last && c.temperal_downsample[i], !last));
      continue;
    }
    for (int64_t r = 0; r < c.num_res_blocks; ++r) {
      layers_.push_back(std::make_shared<WanResidualBlock>(in, out));
      if (std::find(c.attn_scales.begin(), c.attn_scales.end(), scale) != c.attn_scales.end()) {
        layers_.push_back(std::make_shared<WanAttentionBlock>(out));
      }
      in = out;
    }
    if (!last) {
      layers_.push_back(std::make_shared<WanResample>(out, c.temperal_downsample[i]));
      scale /= 2.0;
    }
  }
  for (auto& layer : layers_) down_blocks->push_back(layer);
  const int64_t top = dims.back();
  mid_block = register_module("mid_block", WanMidBlock(top));
  norm_out = register_module("norm_out", WanRmsNorm(top, false));
  conv_out = register_module("conv_out", WanCausalConv(top, 2 * c.z_dim, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
}

at::Tensor WanEncoder3dImpl::forward(const at::Tensor& x, WanFeatCache* cache) {
  at::Tensor y = WanCachedConv(conv_in, x, cache);
  for (auto& layer : layers_) y = layer->Forward(y, cache);
  y = mid_block->forward(y, cache);
  return WanCachedConv(conv_out, at::silu(norm_out->forward(y)), cache);
}

WanVaeEncoderModuleImpl::WanVaeEncoderModuleImpl(const WanVaeConfig& c) : patch_(c.patch()) {
  encoder = register_module("encoder", WanEncoder3d(c));
  quant_conv = register_module("quant_conv", WanCausalConv(2 * c.z_dim, 2 * c.z_dim, {1, 1, 1}));
}

at::Tensor WanVaeEncoderModuleImpl::forward(const at::Tensor& input) {
  at::Tensor pixels = input;
  if (patch_ > 1) {  // diffusers patchify: [B, C, F, H, W] → [B, C·p², F, H/p, W/p]
    const int64_t b = input.size(0), c = input.size(1), f = input.size(2), h = input.size(3) / patch_,
                  w = input.size(4) / patch_;
    pixels = input.view({b, c, f, h, patch_, w, patch_})
                 .permute({0, 1, 6, 4, 2, 3, 5})
                 .contiguous()
                 .view({b, c * patch_ * patch_, f, h, w});
  }
  // diffusers `_encode`: iter_ = 1 + (F − 1) // 4 chunks, frame 0 alone, then frames [1 + 4(i−1), 1 + 4i).
  const int64_t frames = pixels.size(2);
  const int64_t chunks = 1 + (frames - 1) / 4;
  WanFeatCache cache;
  std::vector<at::Tensor> outs;
  for (int64_t i = 0; i < chunks; ++i) {
    cache.idx = 0;
    at::Tensor chunk = i == 0 ? pixels.narrow(2, 0, 1) : pixels.narrow(2, 1 + 4 * (i - 1), 4);
    outs.push_back(encoder->forward(chunk, &cache));
  }
  return quant_conv->forward(at::cat(outs, 2));
}

}  // namespace baton

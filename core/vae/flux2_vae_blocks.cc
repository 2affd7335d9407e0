#include "core/vae/flux2_vae_blocks.h"

#include <cmath>

namespace baton {

torch::nn::Conv2d MakeConv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(true));
}

torch::nn::GroupNorm MakeGroupNorm(int64_t groups, int64_t channels, double eps) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(eps).affine(true));
}

ResnetBlock2DImpl::ResnetBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t groups, double eps) {
  norm1 = register_module("norm1", MakeGroupNorm(groups, in_channels, eps));
  conv1 = register_module("conv1", MakeConv(in_channels, out_channels, 3, 1, 1));
  norm2 = register_module("norm2", MakeGroupNorm(groups, out_channels, eps));
  conv2 = register_module("conv2", MakeConv(out_channels, out_channels, 3, 1, 1));
  if (in_channels != out_channels) {
    conv_shortcut = register_module("conv_shortcut", MakeConv(in_channels, out_channels, 1, 1, 0));
  }
}

at::Tensor ResnetBlock2DImpl::forward(const at::Tensor& x) {
  at::Tensor h = conv1->forward(at::silu(norm1->forward(x)));
  h = conv2->forward(at::silu(norm2->forward(h)));
  at::Tensor skip = conv_shortcut ? conv_shortcut->forward(x) : x;
  return skip + h;  // output_scale_factor is 1 in the VAE
}

VaeAttentionImpl::VaeAttentionImpl(int64_t channels, int64_t groups, double eps) {
  group_norm = register_module("group_norm", MakeGroupNorm(groups, channels, eps));
  to_q = register_module("to_q", torch::nn::Linear(torch::nn::LinearOptions(channels, channels).bias(true)));
  to_k = register_module("to_k", torch::nn::Linear(torch::nn::LinearOptions(channels, channels).bias(true)));
  to_v = register_module("to_v", torch::nn::Linear(torch::nn::LinearOptions(channels, channels).bias(true)));
  out_proj_ = torch::nn::Linear(torch::nn::LinearOptions(channels, channels).bias(true));
  to_out = register_module("to_out", torch::nn::ModuleList(out_proj_));
}

at::Tensor VaeAttentionImpl::forward(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), n = h * w;
  // GroupNorm on [B, C, H, W] equals diffusers' GroupNorm on the [B, C, H·W] view.
  at::Tensor tokens = group_norm->forward(x).reshape({b, c, n}).transpose(1, 2);  // [B, N, C]
  at::Tensor q = to_q->forward(tokens).to(at::kFloat);                            // [B, N, C] fp32
  at::Tensor k_t = to_k->forward(tokens).to(at::kFloat).transpose(1, 2);          // [B, C, N] fp32
  at::Tensor v = to_v->forward(tokens).to(at::kFloat);                            // [B, N, C] fp32
  const double scale = 1.0 / std::sqrt(static_cast<double>(c));
  std::vector<at::Tensor> outs;
  const int64_t chunk = query_chunk > 0 ? query_chunk : n;
  for (int64_t start = 0; start < n; start += chunk) {
    at::Tensor scores = at::bmm(q.narrow(1, start, std::min(chunk, n - start)), k_t) * scale;  // [B, n_c, N]
    outs.push_back(at::bmm(at::softmax(scores, -1), v));                                       // [B, n_c, C]
  }
  at::Tensor attended = (outs.size() == 1 ? outs[0] : at::cat(outs, 1)).to(x.scalar_type());
  at::Tensor out = out_proj_->forward(attended).transpose(1, 2).reshape({b, c, h, w});
  return out + x;  // residual_connection=True, rescale_output_factor=1
}

Downsample2DImpl::Downsample2DImpl(int64_t channels) {
  conv = register_module("conv", MakeConv(channels, channels, 3, 2, 0));
}

at::Tensor Downsample2DImpl::forward(const at::Tensor& x) {
  // at::constant_pad_nd pads the last dim first: (left, right, top, bottom).
  return conv->forward(at::constant_pad_nd(x, {0, 1, 0, 1}, 0));
}

DownEncoderBlock2DImpl::DownEncoderBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t num_layers,
                                               int64_t groups, bool add_downsample) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (int64_t i = 0; i < num_layers; ++i) {
    resnet_list_.push_back(ResnetBlock2D(i == 0 ? in_channels : out_channels, out_channels, groups));
    resnets->push_back(resnet_list_.back());
  }
  if (add_downsample) {
    downsample_ = Downsample2D(out_channels);
    downsamplers = register_module("downsamplers", torch::nn::ModuleList(downsample_));
  }
}

at::Tensor DownEncoderBlock2DImpl::forward(const at::Tensor& x) {
  at::Tensor h = x;
  for (auto& r : resnet_list_) h = r->forward(h);
  if (downsample_) h = downsample_->forward(h);
  return h;
}

UNetMidBlock2DImpl::UNetMidBlock2DImpl(int64_t channels, int64_t groups, bool add_attention) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  attentions = register_module("attentions", torch::nn::ModuleList());
  for (int i = 0; i < 2; ++i) {
    resnet_list_.push_back(ResnetBlock2D(channels, channels, groups));
    resnets->push_back(resnet_list_.back());
  }
  if (add_attention) {
    attention_ = VaeAttention(channels, groups);
    attentions->push_back(attention_);
  }
}

at::Tensor UNetMidBlock2DImpl::forward(const at::Tensor& x) {
  at::Tensor h = resnet_list_[0]->forward(x);
  if (attention_) h = attention_->forward(h);
  return resnet_list_[1]->forward(h);
}

VaeEncoderImpl::VaeEncoderImpl(const Flux2VaeConfig& config) {
  const auto& ch = config.block_out_channels;
  const int64_t n = static_cast<int64_t>(ch.size());
  const int64_t groups = config.norm_num_groups;
  conv_in = register_module("conv_in", MakeConv(config.in_channels, ch[0], 3, 1, 1));
  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) {
    block_list_.push_back(DownEncoderBlock2D(ch[i > 0 ? i - 1 : 0], ch[i], config.layers_per_block, groups,
                                             /*add_downsample=*/i != n - 1));
    down_blocks->push_back(block_list_.back());
  }
  mid_block = register_module("mid_block", UNetMidBlock2D(ch[n - 1], groups, config.mid_block_add_attention));
  conv_norm_out = register_module("conv_norm_out", MakeGroupNorm(groups, ch[n - 1], kVaeGroupNormEps));
  conv_out = register_module("conv_out", MakeConv(ch[n - 1], 2 * config.latent_channels, 3, 1, 1));
}

at::Tensor VaeEncoderImpl::forward(const at::Tensor& x) {
  at::Tensor h = conv_in->forward(x);
  for (auto& block : block_list_) h = block->forward(h);
  h = mid_block->forward(h);
  return conv_out->forward(at::silu(conv_norm_out->forward(h)));
}

AutoencoderKLFlux2EncoderImpl::AutoencoderKLFlux2EncoderImpl(const Flux2VaeConfig& config) {
  encoder = register_module("encoder", VaeEncoder(config));
  if (config.use_quant_conv) {
    const int64_t c = 2 * config.latent_channels;
    quant_conv = register_module("quant_conv", MakeConv(c, c, 1, 1, 0));
  }
  bn = register_module("bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(config.patched_channels())
                                                        .eps(config.batch_norm_eps)
                                                        .momentum(config.batch_norm_momentum)
                                                        .affine(false)
                                                        .track_running_stats(true)));
}

at::Tensor AutoencoderKLFlux2EncoderImpl::forward(const at::Tensor& pixels) {
  at::Tensor moments = encoder->forward(pixels);
  return quant_conv ? quant_conv->forward(moments) : moments;
}

}  // namespace baton

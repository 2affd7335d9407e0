// FLUX.2 transformer blocks. Submodule names mirror diffusers' Flux2TransformerBlock and
// Flux2SingleTransformerBlock so parameter names match checkpoints and LoRA files key for key.
// Blocks hold no modulation weights: the shared modulation vectors arrive as one flat tensor per stream.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <utility>

#include "core/lora/lora_linear.h"
#include "core/model/flux2_config.h"

namespace baton {

// A module holding one learned vector "weight" (the per-head RMSNorm scales norm_q, norm_k, ...).
class RmsNormWeightImpl : public torch::nn::Module {
 public:
  RmsNormWeightImpl(int64_t dim, const at::TensorOptions& options);
  at::Tensor weight;  // [Dh]
};
TORCH_MODULE(RmsNormWeight);

// Flux2FeedForward: linear_in D→2M, SwiGLU, linear_out M→D.
class Flux2FeedForwardImpl : public torch::nn::Module {
 public:
  Flux2FeedForwardImpl(int64_t dim, int64_t hidden, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  LoraLinear linear_in{nullptr}, linear_out{nullptr};
};
TORCH_MODULE(Flux2FeedForward);

// The double-stream block's joint attention: separate img (to_q/k/v, to_out.0) and txt (add_*_proj,
// to_add_out) projections, per-head RMSNorm on q/k, attention over [txt, img].
class Flux2AttentionImpl : public torch::nn::Module {
 public:
  Flux2AttentionImpl(const Flux2Config& c, const at::TensorOptions& options);
  // img [B, Si, D], txt [B, St, D], cos/sin [St+Si, Dh] → (img_out [B, Si, D], txt_out [B, St, D]).
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& img, const at::Tensor& txt, const at::Tensor& cos,
                                            const at::Tensor& sin);
  LoraLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, add_q_proj{nullptr}, add_k_proj{nullptr}, add_v_proj{nullptr},
      to_add_out{nullptr};
  torch::nn::ModuleList to_out;  // [0] = LoraLinear (diffusers keeps Dropout at [1]; it has no weights)
  RmsNormWeight norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};

 private:
  int64_t heads_;
  double eps_;
};
TORCH_MODULE(Flux2Attention);

class Flux2TransformerBlockImpl : public torch::nn::Module {
 public:
  Flux2TransformerBlockImpl(const Flux2Config& c, const at::TensorOptions& options);
  // img [B, Si, D], txt [B, St, D], mod_img / mod_txt [B, 6D] (shift, scale, gate)×(attn, mlp),
  // cos/sin [St+Si, Dh] → (img, txt).
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& img, const at::Tensor& txt, const at::Tensor& mod_img,
                                            const at::Tensor& mod_txt, const at::Tensor& cos, const at::Tensor& sin);
  Flux2Attention attn{nullptr};
  Flux2FeedForward ff{nullptr}, ff_context{nullptr};

 private:
  double eps_;
};
TORCH_MODULE(Flux2TransformerBlock);

// Flux2ParallelSelfAttention: fused to_qkv_mlp_proj D→3D+2M, attention ∥ SwiGLU, fused to_out (D+M)→D.
class Flux2ParallelSelfAttentionImpl : public torch::nn::Module {
 public:
  Flux2ParallelSelfAttentionImpl(const Flux2Config& c, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  LoraLinear to_qkv_mlp_proj{nullptr}, to_out{nullptr};
  RmsNormWeight norm_q{nullptr}, norm_k{nullptr};

 private:
  int64_t heads_, inner_dim_, mlp_hidden_;
  double eps_;
};
TORCH_MODULE(Flux2ParallelSelfAttention);

class Flux2SingleTransformerBlockImpl : public torch::nn::Module {
 public:
  Flux2SingleTransformerBlockImpl(const Flux2Config& c, const at::TensorOptions& options);
  // x [B, St+Si, D] (txt first), mod [B, 3D] (shift, scale, gate), cos/sin [St+Si, Dh] → x.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mod, const at::Tensor& cos, const at::Tensor& sin);
  Flux2ParallelSelfAttention attn{nullptr};

 private:
  double eps_;
};
TORCH_MODULE(Flux2SingleTransformerBlock);

// fp16 activations are clipped to ±65504 after each block, as diffusers does.
at::Tensor ClipFp16(const at::Tensor& x);

}  // namespace baton

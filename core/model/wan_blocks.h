// Wan 2.x transformer blocks. Submodule names mirror diffusers' WanTransformerBlock / WanAttention so parameter
// names match checkpoints and LoRA files key for key (blocks.N.attn1.to_q, blocks.N.ffn.net.0.proj, ...).
// Every Linear is a LoraLinear (so core/lora attaches adapters by diffusers name) with its bias registered on
// it as "bias". Where diffusers keeps fp32 (_keep_in_fp32_modules: scale_shift_table, norm1/2/3), so do we.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "core/lora/lora_linear.h"
#include "core/model/flux2_blocks.h"
#include "core/model/wan_config.h"

namespace baton {

// Registers `child` under a dotted path of plain holder modules below `root`, creating them as needed, so names
// read like diffusers' ("condition_embedder.time_embedder.linear_1").
torch::nn::Module& WanHolder(torch::nn::Module& root, const std::vector<std::string>& path);

// A diffusers nn.Linear (with bias) as a LoraLinear named `path` under `root`: weight [out, in] and bias [out].
struct WanLinear {
  LoraLinear linear{nullptr};
  at::Tensor bias;
  WanLinear() = default;
  WanLinear(torch::nn::Module& root, const std::vector<std::string>& path, int64_t in, int64_t out,
            const at::TensorOptions& options);
  at::Tensor operator()(const at::Tensor& x) { return linear(x) + bias; }
};

// An affine LayerNorm (diffusers FP32LayerNorm): weight and bias fp32, computed in fp32, returned in x's dtype.
struct WanLayerNorm {
  at::Tensor weight, bias;
  double eps = 1e-5;
  WanLayerNorm() = default;
  WanLayerNorm(torch::nn::Module& root, const std::vector<std::string>& path, int64_t dim, double eps,
               const at::TensorOptions& options);
  at::Tensor operator()(const at::Tensor& x) const;
};

// WanAttention with WanAttnProcessor: q/k/v/out with bias, RMSNorm across all heads on q and k, RoPE on
// self-attention, and for Wan 2.1 I2V the image keys/values (add_k_proj, add_v_proj, norm_added_k).
class WanAttentionImpl : public torch::nn::Module {
 public:
  WanAttentionImpl(const WanConfig& c, bool cross, const at::TensorOptions& options);
  // Self-attention: x [B, S, D], cos/sin [S, Dh] fp32. Cross-attention: context [B, L, D] (I2V: image tokens
  // first, the last 512 being text, exactly as diffusers splits it).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& cos, const at::Tensor& sin);

 private:
  WanLinear to_q_, to_k_, to_v_, to_out_, add_k_proj_, add_v_proj_;
  RmsNormWeight norm_q_{nullptr}, norm_k_{nullptr}, norm_added_k_{nullptr};
  int64_t heads_;
  double eps_;
  bool image_kv_;
};
TORCH_MODULE(WanAttention);

class WanTransformerBlockImpl : public torch::nn::Module {
 public:
  WanTransformerBlockImpl(const WanConfig& c, const at::TensorOptions& options);
  // x [B, S, D]; context [B, L, D]; timestep_proj [B, 6, D] or, per token (TI2V), [B, S, 6, D];
  // cos/sin [S, Dh] fp32.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& timestep_proj,
                     const at::Tensor& cos, const at::Tensor& sin);

 private:
  WanAttention attn1_{nullptr}, attn2_{nullptr};
  WanLayerNorm norm2_;  // undefined weight: cross_attn_norm false (Identity)
  WanLinear ffn_in_, ffn_out_;
  at::Tensor scale_shift_table_;  // [1, 6, D] fp32
  double eps_;
  bool cross_attn_norm_;
};
TORCH_MODULE(WanTransformerBlock);

// (1 + scale) · LayerNorm(x.float()) + shift, in fp32 (the caller casts back), scale/shift broadcastable.
at::Tensor WanModulatedNorm(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift, double eps);

}  // namespace baton

#include "core/model/flux2_blocks.h"

#include "core/model/flux2_ops.h"

namespace baton {

at::Tensor ClipFp16(const at::Tensor& x) { return x.scalar_type() == at::kHalf ? x.clamp(-65504, 65504) : x; }

RmsNormWeightImpl::RmsNormWeightImpl(int64_t dim, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({dim}, options), /*requires_grad=*/false);
}

Flux2FeedForwardImpl::Flux2FeedForwardImpl(int64_t dim, int64_t hidden, const at::TensorOptions& options) {
  linear_in = register_module("linear_in", LoraLinear(dim, 2 * hidden, options));
  linear_out = register_module("linear_out", LoraLinear(hidden, dim, options));
}

at::Tensor Flux2FeedForwardImpl::forward(const at::Tensor& x) { return linear_out(SwiGlu(linear_in(x))); }

Flux2AttentionImpl::Flux2AttentionImpl(const Flux2Config& c, const at::TensorOptions& options)
    : heads_(c.num_attention_heads), eps_(c.eps) {
  const int64_t d = c.inner_dim(), h = c.attention_head_dim;
  to_q = register_module("to_q", LoraLinear(d, d, options));
  to_k = register_module("to_k", LoraLinear(d, d, options));
  to_v = register_module("to_v", LoraLinear(d, d, options));
  norm_q = register_module("norm_q", RmsNormWeight(h, options));
  norm_k = register_module("norm_k", RmsNormWeight(h, options));
  to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(LoraLinear(d, d, options));
  norm_added_q = register_module("norm_added_q", RmsNormWeight(h, options));
  norm_added_k = register_module("norm_added_k", RmsNormWeight(h, options));
  add_q_proj = register_module("add_q_proj", LoraLinear(d, d, options));
  add_k_proj = register_module("add_k_proj", LoraLinear(d, d, options));
  add_v_proj = register_module("add_v_proj", LoraLinear(d, d, options));
  to_add_out = register_module("to_add_out", LoraLinear(d, d, options));
}

std::pair<at::Tensor, at::Tensor> Flux2AttentionImpl::forward(const at::Tensor& img, const at::Tensor& txt,
                                                              const at::Tensor& cos, const at::Tensor& sin) {
  auto heads = [&](const at::Tensor& x) { return x.unflatten(-1, {heads_, -1}); };
  at::Tensor q = RmsNorm(heads(to_q(img)), norm_q->weight, eps_);
  at::Tensor k = RmsNorm(heads(to_k(img)), norm_k->weight, eps_);
  at::Tensor v = heads(to_v(img));
  at::Tensor tq = RmsNorm(heads(add_q_proj(txt)), norm_added_q->weight, eps_);
  at::Tensor tk = RmsNorm(heads(add_k_proj(txt)), norm_added_k->weight, eps_);
  at::Tensor tv = heads(add_v_proj(txt));
  q = ApplyRope(at::cat({tq, q}, 1), cos, sin);
  k = ApplyRope(at::cat({tk, k}, 1), cos, sin);
  v = at::cat({tv, v}, 1);
  at::Tensor out = Attention(q, k, v);
  const int64_t st = txt.size(1);
  at::Tensor txt_out = to_add_out(out.narrow(1, 0, st));
  at::Tensor img_out = to_out[0]->as<LoraLinear>()->forward(out.narrow(1, st, out.size(1) - st));
  return {img_out, txt_out};
}

Flux2TransformerBlockImpl::Flux2TransformerBlockImpl(const Flux2Config& c, const at::TensorOptions& options)
    : eps_(c.eps) {
  attn = register_module("attn", Flux2Attention(c, options));
  ff = register_module("ff", Flux2FeedForward(c.inner_dim(), c.mlp_hidden_dim(), options));
  ff_context = register_module("ff_context", Flux2FeedForward(c.inner_dim(), c.mlp_hidden_dim(), options));
}

std::pair<at::Tensor, at::Tensor> Flux2TransformerBlockImpl::forward(const at::Tensor& img, const at::Tensor& txt,
                                                                     const at::Tensor& mod_img,
                                                                     const at::Tensor& mod_txt, const at::Tensor& cos,
                                                                     const at::Tensor& sin) {
  auto m = SplitModulation(mod_img, 6);  // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  auto c = SplitModulation(mod_txt, 6);
  at::Tensor norm_img = ModulatedLayerNorm(img, m[1], m[0], eps_);
  at::Tensor norm_txt = ModulatedLayerNorm(txt, c[1], c[0], eps_);
  auto [attn_img, attn_txt] = attn(norm_img, norm_txt, cos, sin);

  // Residual + gate · branch as one addcmul kernel (forward) instead of a multiply and an add.
  at::Tensor h = at::addcmul(img, m[2], attn_img);
  h = at::addcmul(h, m[5], ff(ModulatedLayerNorm(h, m[4], m[3], eps_)));

  at::Tensor e = at::addcmul(txt, c[2], attn_txt);
  e = at::addcmul(e, c[5], ff_context(ModulatedLayerNorm(e, c[4], c[3], eps_)));
  return {h, ClipFp16(e)};
}

Flux2ParallelSelfAttentionImpl::Flux2ParallelSelfAttentionImpl(const Flux2Config& c, const at::TensorOptions& options)
    : heads_(c.num_attention_heads), inner_dim_(c.inner_dim()), mlp_hidden_(c.mlp_hidden_dim()), eps_(c.eps) {
  to_qkv_mlp_proj =
      register_module("to_qkv_mlp_proj", LoraLinear(inner_dim_, 3 * inner_dim_ + 2 * mlp_hidden_, options));
  norm_q = register_module("norm_q", RmsNormWeight(c.attention_head_dim, options));
  norm_k = register_module("norm_k", RmsNormWeight(c.attention_head_dim, options));
  to_out = register_module("to_out", LoraLinear(inner_dim_ + mlp_hidden_, inner_dim_, options));
}

at::Tensor Flux2ParallelSelfAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  at::Tensor proj = to_qkv_mlp_proj(x);
  at::Tensor qkv = proj.narrow(-1, 0, 3 * inner_dim_);
  at::Tensor mlp = proj.narrow(-1, 3 * inner_dim_, 2 * mlp_hidden_);
  auto parts = qkv.chunk(3, -1);
  auto heads = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };
  at::Tensor q = ApplyRope(RmsNorm(heads(parts[0]), norm_q->weight, eps_), cos, sin);
  at::Tensor k = ApplyRope(RmsNorm(heads(parts[1]), norm_k->weight, eps_), cos, sin);
  at::Tensor attn_out = Attention(q, k, heads(parts[2]));
  return to_out(at::cat({attn_out, SwiGlu(mlp)}, -1));
}

Flux2SingleTransformerBlockImpl::Flux2SingleTransformerBlockImpl(const Flux2Config& c, const at::TensorOptions& options)
    : eps_(c.eps) {
  attn = register_module("attn", Flux2ParallelSelfAttention(c, options));
}

at::Tensor Flux2SingleTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& mod, const at::Tensor& cos,
                                                    const at::Tensor& sin) {
  auto m = SplitModulation(mod, 3);  // shift, scale, gate
  return ClipFp16(at::addcmul(x, m[2], attn(ModulatedLayerNorm(x, m[1], m[0], eps_), cos, sin)));
}

}  // namespace baton

#include "core/model/wan_blocks.h"

#include "core/model/flux2_ops.h"

namespace baton {

// diffusers hard-codes the text context length of I2V cross-attention (WanAttnProcessor: "512 is the context
// length of the text encoder"): the tokens before the last 512 are the image's.
constexpr int64_t kWanTextContextLength = 512;

torch::nn::Module& WanHolder(torch::nn::Module& root, const std::vector<std::string>& path) {
  torch::nn::Module* parent = &root;
  for (const std::string& name : path) {
    auto children = parent->named_children();
    if (auto* found = children.find(name)) {
      parent = found->get();
    } else {
      parent = parent->register_module(name, std::make_shared<torch::nn::Module>()).get();
    }
  }
  return *parent;
}

WanLinear::WanLinear(torch::nn::Module& root, const std::vector<std::string>& path, int64_t in, int64_t out,
                     const at::TensorOptions& options) {
  std::vector<std::string> parent(path.begin(), path.end() - 1);
  linear = WanHolder(root, parent).register_module(path.back(), LoraLinear(in, out, options));
  bias = linear->register_parameter("bias", at::empty({out}, options), /*requires_grad=*/false);
}

WanLayerNorm::WanLayerNorm(torch::nn::Module& root, const std::vector<std::string>& path, int64_t dim, double e,
                           const at::TensorOptions& options)
    : eps(e) {
  torch::nn::Module& holder = WanHolder(root, path);
  const auto f32 = options.dtype(at::kFloat);
  weight = holder.register_parameter("weight", at::empty({dim}, f32), /*requires_grad=*/false);
  bias = holder.register_parameter("bias", at::empty({dim}, f32), /*requires_grad=*/false);
}

at::Tensor WanLayerNorm::operator()(const at::Tensor& x) const {
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, weight, bias, eps).to(x.scalar_type());
}

at::Tensor WanModulatedNorm(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  return LayerNormNoAffine(xf, eps) * (1 + scale) + shift;
}

WanAttentionImpl::WanAttentionImpl(const WanConfig& c, bool cross, const at::TensorOptions& options)
    : heads_(c.num_attention_heads), eps_(c.eps), image_kv_(cross && c.added_kv_proj_dim > 0) {
  const int64_t d = c.inner_dim();
  to_q_ = WanLinear(*this, {"to_q"}, d, d, options);
  to_k_ = WanLinear(*this, {"to_k"}, d, d, options);
  to_v_ = WanLinear(*this, {"to_v"}, d, d, options);
  to_out_ = WanLinear(*this, {"to_out", "0"}, d, d, options);
  norm_q_ = register_module("norm_q", RmsNormWeight(d, options));
  norm_k_ = register_module("norm_k", RmsNormWeight(d, options));
  if (image_kv_) {
    add_k_proj_ = WanLinear(*this, {"add_k_proj"}, c.added_kv_proj_dim, d, options);
    add_v_proj_ = WanLinear(*this, {"add_v_proj"}, c.added_kv_proj_dim, d, options);
    norm_added_k_ = register_module("norm_added_k", RmsNormWeight(d, options));
  }
}

at::Tensor WanAttentionImpl::forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& cos,
                                     const at::Tensor& sin) {
  auto heads = [&](const at::Tensor& t) { return t.unflatten(2, {heads_, -1}); };
  at::Tensor text = context.defined() ? context : x;
  at::Tensor image;
  if (image_kv_) {
    const int64_t image_len = context.size(1) - kWanTextContextLength;
    TORCH_CHECK(image_len >= 0,
                "Wan I2V cross-attention needs 512 text tokens after the image tokens (diffusers "
                "splits the context there); got a context of ",
                context.size(1));
    image = context.narrow(1, 0, image_len);
    text = context.narrow(1, image_len, kWanTextContextLength);
  }
  at::Tensor q = heads(RmsNorm(to_q_(x), norm_q_->weight, eps_));
  at::Tensor k = heads(RmsNorm(to_k_(text), norm_k_->weight, eps_));
  at::Tensor v = heads(to_v_(text));
  if (cos.defined()) {
    q = ApplyRope(q, cos, sin);
    k = ApplyRope(k, cos, sin);
  }
  at::Tensor out;
  if (image_kv_) {
    at::Tensor k_img = heads(RmsNorm(add_k_proj_(image), norm_added_k_->weight, eps_));
    at::Tensor v_img = heads(add_v_proj_(image));
    at::Tensor image_out = Attention(q, k_img, v_img).to(q.scalar_type());
    out = Attention(q, k, v).to(q.scalar_type()) + image_out;
  } else {
    out = Attention(q, k, v).to(q.scalar_type());
  }
  return to_out_(out);
}

WanTransformerBlockImpl::WanTransformerBlockImpl(const WanConfig& c, const at::TensorOptions& options)
    : eps_(c.eps), cross_attn_norm_(c.cross_attn_norm) {
  const int64_t d = c.inner_dim();
  attn1_ = register_module("attn1", WanAttention(c, /*cross=*/false, options));
  attn2_ = register_module("attn2", WanAttention(c, /*cross=*/true, options));
  if (cross_attn_norm_) norm2_ = WanLayerNorm(*this, {"norm2"}, d, c.eps, options);
  ffn_in_ = WanLinear(*this, {"ffn", "net", "0", "proj"}, d, c.ffn_dim, options);
  ffn_out_ = WanLinear(*this, {"ffn", "net", "2"}, c.ffn_dim, d, options);
  scale_shift_table_ =
      register_parameter("scale_shift_table", at::empty({1, 6, d}, options.dtype(at::kFloat)), /*requires_grad=*/false);
}

at::Tensor WanTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                            const at::Tensor& timestep_proj, const at::Tensor& cos,
                                            const at::Tensor& sin) {
  // The modulation is split here, inside the block (a tuple crossing a checkpoint breaks recompute, diffusers
  // #12776). [B, 6, D] -> six [B, 1, D]; per token [B, S, 6, D] -> six [B, S, D].
  std::vector<at::Tensor> mod;
  if (timestep_proj.dim() == 4) {
    for (const at::Tensor& m : (scale_shift_table_.unsqueeze(0) + timestep_proj.to(at::kFloat)).chunk(6, 2)) {
      mod.push_back(m.squeeze(2));
    }
  } else {
    mod = (scale_shift_table_ + timestep_proj.to(at::kFloat)).chunk(6, 1);
  }
  const at::ScalarType dtype = x.scalar_type();
  at::Tensor h = WanModulatedNorm(x, mod[1], mod[0], eps_).to(dtype);
  at::Tensor attn = attn1_(h, at::Tensor(), cos, sin);
  at::Tensor y = (x.to(at::kFloat) + attn * mod[2]).to(dtype);
  h = cross_attn_norm_ ? norm2_(y.to(at::kFloat)).to(dtype) : y;
  y = y + attn2_(h, context, at::Tensor(), at::Tensor());
  h = WanModulatedNorm(y, mod[4], mod[3], eps_).to(dtype);
  at::Tensor ff = ffn_out_(at::gelu(ffn_in_(h), "tanh"));
  return (y.to(at::kFloat) + ff.to(at::kFloat) * mod[5]).to(dtype);
}

}  // namespace baton

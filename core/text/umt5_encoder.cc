#include "core/text/umt5_encoder.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/tensor/torch_call.h"
#include "core/text/umt5_checkpoint.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

struct Umt5Block {
  at::Tensor attn_norm, rel_bias, ff_norm;  // [d_model], [buckets, heads], [d_model]
  TextWeight q, k, v, o;                    // [inner, d_model] x3, [d_model, inner]
  TextWeight wi_0, wi_1, wo;                // [d_ff, d_model] x2, [d_model, d_ff]; wi_1 unused when not gated
};

Umt5Block MakeBlock(const Umt5Config& c, std::vector<TextWeight> t) {
  Umt5Block b;
  size_t i = 0;
  b.attn_norm = std::move(t[i++].full);
  for (TextWeight* dst : {&b.q, &b.k, &b.v, &b.o}) *dst = std::move(t[i++]);
  b.rel_bias = std::move(t[i++].full);
  b.ff_norm = std::move(t[i++].full);
  b.wi_0 = std::move(t[i++]);
  if (c.gated()) b.wi_1 = std::move(t[i++]);
  b.wo = std::move(t[i++]);
  return b;
}

// UMT5LayerNorm: x * rsqrt(mean(x²) + eps) with the variance in fp32; cast to the weight's dtype when that is
// half precision, then scaled. (x in fp32 stays fp32 against an fp32 weight.)
at::Tensor LayerNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor var = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor y = x * at::rsqrt(var + eps);
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) y = y.to(weight.scalar_type());
  return weight * y;
}

at::Tensor Activate(Umt5Activation act, const at::Tensor& x) {
  switch (act) {
    case Umt5Activation::kGeluTanh:
      return at::gelu(x, "tanh");
    case Umt5Activation::kGeluErf:
      return at::gelu(x);
    case Umt5Activation::kRelu:
      return at::relu(x);
    case Umt5Activation::kSilu:
      return at::silu(x);
  }
  return x;
}

// key_bias [B, 1, 1, L]: 0 for tokens, the score dtype's lowest value for padding (added, as eager attention).
at::Tensor Attention(const Umt5Config& c, const Umt5Block& w, const at::Tensor& x, const at::Tensor& buckets,
                     const at::Tensor& key_bias) {
  const int64_t b = x.size(0), l = x.size(1), heads = c.num_heads, d = c.d_kv;
  auto split = [&](const TextWeight& proj) { return TextLinear(x, proj).view({b, l, heads, d}).transpose(1, 2); };
  at::Tensor q = split(w.q), k = split(w.k), v = split(w.v);
  at::Tensor position_bias = w.rel_bias.index_select(0, buckets.reshape({-1})).view({l, l, heads}).permute({2, 0, 1});
  at::Tensor scores = at::matmul(q, k.transpose(-1, -2)).to(at::kFloat);  // no 1/sqrt(d): umT5 folds it in
  scores = scores + position_bias.unsqueeze(0).to(at::kFloat) + key_bias;
  at::Tensor probs = at::softmax(scores, -1).to(v.scalar_type());
  at::Tensor out = at::matmul(probs, v).transpose(1, 2).reshape({b, l, heads * d});
  return TextLinear(out, w.o);
}

at::Tensor FeedForward(const Umt5Config& c, Umt5Activation act, const Umt5Block& w, const at::Tensor& x,
                       at::ScalarType wo_dtype) {
  at::Tensor h = Activate(act, TextLinear(x, w.wi_0));
  if (c.gated()) h = h * TextLinear(x, w.wi_1);
  // transformers keeps wo in fp32 and casts the hidden state to it (an 8-bit wo dequantizes to fp32 likewise).
  return TextLinear(h.to(wo_dtype), w.wo);
}

}  // namespace

at::Tensor Umt5RelativePositionBuckets(int64_t length, int64_t num_buckets, int64_t max_distance, at::Device device) {
  at::Tensor pos = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
  at::Tensor rel = pos.view({1, length}) - pos.view({length, 1});  // memory - context
  const int64_t half = num_buckets / 2;
  at::Tensor buckets = rel.gt(0).to(at::kLong) * half;
  rel = rel.abs();
  const int64_t max_exact = half / 2;
  at::Tensor is_small = rel.lt(max_exact);
  at::Tensor log_ratio = at::log(rel.to(at::kFloat) / static_cast<double>(max_exact)) /
                         std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact));
  log_ratio = log_ratio * static_cast<double>(half - max_exact);
  at::Tensor large = at::clamp_max(max_exact + log_ratio.to(at::kLong), half - 1);
  return buckets + at::where(is_small, rel, large);
}

absl::StatusOr<std::unique_ptr<Umt5Encoder>> Umt5Encoder::Open(const std::string& dir, at::ScalarType dtype,
                                                               at::Device device, WeightQuant quantize) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf && dtype != at::kDouble) {
    return absl::InvalidArgumentError(absl::StrCat("umT5 compute dtype must be floating, got ", c10::toString(dtype)));
  }
  std::unique_ptr<Umt5Encoder> enc(new Umt5Encoder());
  enc->dtype_ = dtype;
  enc->device_ = device;
  ASSIGN_OR_RETURN(enc->config_, LoadUmt5Config(JoinPath(dir, "config.json")));
  ASSIGN_OR_RETURN(enc->activation_, enc->config_.activation());
  ASSIGN_OR_RETURN(enc->checkpoint_, OpenUmt5Checkpoint(dir, &enc->embedding_name_));
  enc->weights_ = std::make_unique<TextWeights>(enc->checkpoint_.get(), quantize, device);
  std::vector<TextEncoderTensorSpec> early = Umt5BlockSpecs(enc->config_, 0);
  early.push_back(Umt5EmbeddingSpec(enc->config_, enc->embedding_name_));
  early.push_back(Umt5FinalNormSpec(enc->config_));
  RETURN_IF_ERROR(enc->checkpoint_->CheckShapes(early));
  return enc;
}

absl::StatusOr<at::Tensor> Umt5Encoder::Encode(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  const Umt5Config& c = config_;
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.size(0) < 1 || input_ids.size(1) < 1 ||
      (input_ids.scalar_type() != at::kLong && input_ids.scalar_type() != at::kInt)) {
    return absl::InvalidArgumentError("umT5 Encode: input_ids must be a non-empty [B, L] int64 tensor");
  }
  const int64_t b = input_ids.size(0), l = input_ids.size(1);
  at::Tensor ids = input_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t min_id = ids.min().item<int64_t>(), max_id = ids.max().item<int64_t>();
  if (min_id < 0 || max_id >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("umT5 Encode: token id ", min_id < 0 ? min_id : max_id,
                                                   " outside the vocabulary [0, ", c.vocab_size, ")"));
  }
  at::Tensor mask = attention_mask.defined() ? attention_mask.to(at::kCPU, at::kLong) : at::ones({b, l}, at::kLong);
  if (mask.sizes() != ids.sizes() || mask.lt(0).logical_or(mask.gt(1)).any().item<bool>()) {
    return absl::InvalidArgumentError("umT5 Encode: attention_mask must be 0/1 with input_ids' shape");
  }
  at::NoGradGuard no_grad;
  std::vector<int64_t> rows(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + b * l);
  ASSIGN_OR_RETURN(at::Tensor h, checkpoint_->GatherRows(Umt5EmbeddingSpec(c, embedding_name_), rows, dtype_));
  at::Tensor buckets, key_bias;
  RETURN_IF_ERROR(TorchCall("umT5 embeddings", [&] {
    h = h.to(device_).view({b, l, c.d_model});
    buckets =
        Umt5RelativePositionBuckets(l, c.relative_attention_num_buckets, c.relative_attention_max_distance, device_);
    const double lowest = std::numeric_limits<float>::lowest();
    key_bias = (1 - mask).to(at::kFloat).mul(lowest).view({b, 1, 1, l}).to(device_);
  }));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    ASSIGN_OR_RETURN(std::vector<TextWeight> tensors, weights_->Load(Umt5BlockSpecs(c, i), dtype_));
    const std::string context = absl::StrCat("umT5 block ", i);
    RETURN_IF_ERROR(TorchCall(context.c_str(), [&] {
      for (auto& t : tensors) {
        if (t.full.defined()) t.full = t.full.to(device_);
      }
      Umt5Block w = MakeBlock(c, std::move(tensors));
      const bool half = dtype_ == at::kHalf || dtype_ == at::kBFloat16;
      if (half && w.wo.full.defined()) w.wo.full = w.wo.full.to(at::kFloat);
      h = h + Attention(c, w, LayerNorm(h, w.attn_norm, c.layer_norm_epsilon).to(dtype_), buckets, key_bias);
      h = h + FeedForward(c, activation_, w, LayerNorm(h, w.ff_norm, c.layer_norm_epsilon).to(dtype_),
                          half ? at::kFloat : dtype_);
    }));
  }
  ASSIGN_OR_RETURN(std::vector<at::Tensor> norm, checkpoint_->Load({Umt5FinalNormSpec(c)}, dtype_));
  at::Tensor out;
  RETURN_IF_ERROR(TorchCall("umT5 final layer norm",
                            [&] { out = LayerNorm(h, norm[0].to(device_), c.layer_norm_epsilon).to(at::kFloat); }));
  return out;
}

}  // namespace baton

#include "core/text/text_encoder.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// One decoder layer's weights in the compute dtype, named as in transformers.
struct DecoderLayer {
  at::Tensor input_layernorm;                 // [H]
  TextWeight q_proj, k_proj, v_proj;          // [heads*head_dim, H], [kv_heads*head_dim, H] ×2
  TextWeight o_proj;                          // [H, heads*head_dim]
  at::Tensor q_bias, k_bias, v_bias, o_bias;  // undefined unless attention_bias
  at::Tensor q_norm, k_norm;                  // [head_dim], Qwen3 only
  at::Tensor post_attention_layernorm;        // [H]
  TextWeight gate_proj, up_proj;              // [I, H]
  TextWeight down_proj;                       // [H, I]
};

// Assigns the tensors loaded in TextEncoderLayerSpecs order.
DecoderLayer MakeLayer(const TextEncoderConfig& c, std::vector<TextWeight> t) {
  DecoderLayer l;
  size_t i = 0;
  l.input_layernorm = std::move(t[i++].full);
  for (TextWeight* dst : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj}) *dst = std::move(t[i++]);
  if (c.attention_bias) {
    for (at::Tensor* dst : {&l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias}) *dst = std::move(t[i++].full);
  }
  if (c.qk_norm) {
    l.q_norm = std::move(t[i++].full);
    l.k_norm = std::move(t[i++].full);
  }
  l.post_attention_layernorm = std::move(t[i++].full);
  for (TextWeight* dst : {&l.gate_proj, &l.up_proj, &l.down_proj}) *dst = std::move(t[i++]);
  return l;
}

// RMSNorm over the last dim, computed in fp32 and cast back before the weight (transformers' order).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor var = x32.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x32 * at::rsqrt(var + eps)).to(x.scalar_type());
}

// [x1, x2] → [-x2, x1] over the last dim (the non-interleaved "rotate_half" RoPE).
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

struct Rope {
  at::Tensor cos, sin;  // [L, head_dim] in the compute dtype
};

// Tables for positions start..start+L-1: inv_freq = 1/θ^(2i/d) and the angles in fp32, duplicated over
// both halves (transformers' default RoPE, computed in fp32 and cast to the compute dtype).
Rope MakeRope(int64_t start, int64_t length, int64_t head_dim, double theta, at::ScalarType dtype, at::Device device) {
  at::Tensor exponent = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(theta, exponent);                                                 // [d/2]
  at::Tensor freqs = at::outer(at::arange(start, start + length, at::kLong).to(at::kFloat), inv_freq);  // [L, d/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(device, dtype), emb.sin().to(device, dtype)};
}

// Which keys each query may not see, built once per Encode.
struct AttentionMask {
  at::Tensor blocked;  // [B, 1, L, L] bool: key k hidden from query q (k > q, padding, or outside the window)
  at::Tensor empty;    // [B, 1, L, 1] bool: query q sees no key at all
};

AttentionMask MakeAttentionMask(const at::Tensor& key_mask, int64_t sliding_window) {
  const int64_t b = key_mask.size(0), l = key_mask.size(1);
  at::Tensor q = at::arange(l, key_mask.options().dtype(at::kLong)).view({l, 1});
  at::Tensor k = at::arange(l, key_mask.options().dtype(at::kLong)).view({1, l});
  at::Tensor allowed = k <= q;
  if (sliding_window > 0) allowed = allowed.logical_and(q - k < sliding_window);
  allowed = allowed.view({1, 1, l, l}).logical_and(key_mask.view({b, 1, 1, l}));
  return {allowed.logical_not(), allowed.any(-1, /*keepdim=*/true).logical_not()};
}

at::Tensor Attention(const TextEncoderConfig& c, const DecoderLayer& w, const at::Tensor& x, const Rope& rope,
                     const AttentionMask& mask) {
  const int64_t b = x.size(0), l = x.size(1), heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const int64_t d = c.head_dim;
  at::Tensor q = TextLinear(x, w.q_proj, w.q_bias).view({b, l, heads, d});
  at::Tensor k = TextLinear(x, w.k_proj, w.k_bias).view({b, l, kv_heads, d});
  at::Tensor v = TextLinear(x, w.v_proj, w.v_bias).view({b, l, kv_heads, d});
  if (c.qk_norm) {
    q = RmsNorm(q, w.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, w.k_norm, c.rms_norm_eps);
  }
  q = q.transpose(1, 2);  // [B, heads, L, d]
  k = k.transpose(1, 2);  // [B, kv_heads, L, d]
  v = v.transpose(1, 2);
  q = q * rope.cos + RotateHalf(q) * rope.sin;
  k = k * rope.cos + RotateHalf(k) * rope.sin;
  const int64_t rep = heads / kv_heads;
  if (rep > 1) {  // GQA: query head h reads key/value head h / rep
    k = k.unsqueeze(2).expand({b, kv_heads, rep, l, d}).reshape({b, heads, l, d});
    v = v.unsqueeze(2).expand({b, kv_heads, rep, l, d}).reshape({b, heads, l, d});
  }
  at::Tensor scores = at::matmul(q, k.transpose(-1, -2)).to(at::kFloat) * (1.0 / std::sqrt(static_cast<double>(d)));
  scores.masked_fill_(mask.blocked, -std::numeric_limits<float>::infinity());
  // A fully masked row softmaxes to NaN; torch ≥ 2.5 SDPA (transformers' default) returns zeros there.
  at::Tensor probs = at::softmax(scores, -1).masked_fill_(mask.empty, 0.0);
  at::Tensor out = at::matmul(probs.to(x.scalar_type()), v);  // [B, heads, L, d]
  out = out.transpose(1, 2).reshape({b, l, heads * d});
  return TextLinear(out, w.o_proj, w.o_bias);
}

at::Tensor MlpResidual(const TextEncoderConfig& c, const DecoderLayer& w, const at::Tensor& x) {
  at::Tensor y = RmsNorm(x, w.post_attention_layernorm, c.rms_norm_eps);
  return x + TextLinear(at::silu(TextLinear(y, w.gate_proj)) * TextLinear(y, w.up_proj), w.down_proj);
}

at::Tensor DecoderLayerForward(const TextEncoderConfig& c, const DecoderLayer& w, const at::Tensor& h, const Rope& rope,
                               const AttentionMask& mask) {
  return MlpResidual(c, w, h + Attention(c, w, RmsNorm(h, w.input_layernorm, c.rms_norm_eps), rope, mask));
}

// The same layer for positions that see no key: their attention output is o_proj(0) = o_bias (or 0).
at::Tensor BlindLayerForward(const TextEncoderConfig& c, const DecoderLayer& w, const at::Tensor& h) {
  return MlpResidual(c, w, w.o_bias.defined() ? h + w.o_bias : h);
}

// Left padding: the first `prefix` positions of every row come before all of that row's tokens, so they
// see no key and no query sees them. Their hidden states depend on their own token only ("blind"
// positions): they are computed once per distinct token id and copied; attention runs on the rest.
struct PaddingLayout {
  int64_t prefix = 0;                // leading blind positions (the minimum over rows)
  std::vector<int64_t> rows;         // embedding rows to gather: live positions row-major, then blind tokens
  std::vector<int64_t> blind_index;  // [B*prefix] row of the blind block for each blind position
  int64_t blind = 0;                 // distinct tokens among the blind positions
};

PaddingLayout MakePaddingLayout(const at::Tensor& ids, const at::Tensor& key_mask) {
  const int64_t b = ids.size(0), l = ids.size(1);
  auto id_acc = ids.accessor<int64_t, 2>();
  auto mask_acc = key_mask.accessor<bool, 2>();
  PaddingLayout out;
  out.prefix = l;
  for (int64_t r = 0; r < b; ++r) {
    int64_t first = 0;
    while (first < l && !mask_acc[r][first]) ++first;
    out.prefix = std::min(out.prefix, first);
  }
  std::map<int64_t, int64_t> slot_of;  // token id → row of the blind block
  std::vector<int64_t> blind_tokens;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t p = 0; p < l; ++p) {
      const int64_t id = id_acc[r][p];
      if (p >= out.prefix) {
        out.rows.push_back(id);
        continue;
      }
      auto [it, inserted] = slot_of.emplace(id, static_cast<int64_t>(blind_tokens.size()));
      if (inserted) blind_tokens.push_back(id);
      out.blind_index.push_back(it->second);
    }
  }
  out.rows.insert(out.rows.end(), blind_tokens.begin(), blind_tokens.end());
  out.blind = static_cast<int64_t>(blind_tokens.size());
  return out;
}

int64_t Bytes(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += static_cast<int64_t>(t.nbytes());
  return n;
}

// Full-precision bytes streamed for a layer (8-bit weights are resident: TextEncoder::resident_weight_bytes).
int64_t Bytes(const std::vector<TextWeight>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.full.defined() ? static_cast<int64_t>(t.full.nbytes()) : 0;
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TextEncoder>> TextEncoder::Open(const std::string& text_encoder_dir,
                                                               at::ScalarType dtype, at::Device device,
                                                               WeightQuant quantize) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf && dtype != at::kDouble) {
    return absl::InvalidArgumentError(
        absl::StrCat("text encoder compute dtype must be floating, got ", c10::toString(dtype)));
  }
  std::unique_ptr<TextEncoder> enc(new TextEncoder());
  enc->dtype_ = dtype;
  enc->device_ = device;
  ASSIGN_OR_RETURN(enc->config_, LoadTextEncoderConfig(JoinPath(text_encoder_dir, "config.json")));
  ASSIGN_OR_RETURN(enc->checkpoint_, TextEncoderCheckpoint::Open(text_encoder_dir));
  enc->weights_ = std::make_unique<TextWeights>(enc->checkpoint_.get(), quantize, device);
  std::vector<TextEncoderTensorSpec> early = TextEncoderLayerSpecs(enc->config_, 0);
  early.push_back({"embed_tokens.weight", {enc->config_.vocab_size, enc->config_.hidden_size}});
  RETURN_IF_ERROR(enc->checkpoint_->CheckShapes(early));
  return enc;
}

absl::StatusOr<at::Tensor> TextEncoder::Encode(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                               const std::vector<int64_t>& layers) {
  const TextEncoderConfig& c = config_;
  if (layers.empty()) return absl::InvalidArgumentError("Encode: no hidden-state layers requested");
  for (int64_t k : layers) {
    if (k < 0 || k > c.num_hidden_layers) {
      return absl::InvalidArgumentError(absl::StrCat("Encode: hidden-state layer ", k, " outside [0, ",
                                                     c.num_hidden_layers, "] (num_hidden_layers)"));
    }
  }
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.size(0) < 1 || input_ids.size(1) < 1 ||
      (input_ids.scalar_type() != at::kLong && input_ids.scalar_type() != at::kInt)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Encode: input_ids must be a non-empty [B, L] int64 tensor, got ",
                     input_ids.defined() ? absl::StrCat(input_ids.dim(), "-D ", c10::toString(input_ids.scalar_type()))
                                         : std::string("undefined")));
  }
  const int64_t b = input_ids.size(0), l = input_ids.size(1);
  at::Tensor ids = input_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t min_id = ids.min().item<int64_t>(), max_id = ids.max().item<int64_t>();
  if (min_id < 0 || max_id >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("Encode: token id ", min_id < 0 ? min_id : max_id,
                                                   " outside the vocabulary [0, ", c.vocab_size, ")"));
  }
  at::Tensor key_mask;  // [B, L] bool
  if (!attention_mask.defined()) {
    key_mask = at::ones({b, l}, at::kBool);
  } else {
    if (attention_mask.sizes() != input_ids.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("Encode: attention_mask shape ", c10::str(attention_mask.sizes()),
                                                     " differs from input_ids ", c10::str(input_ids.sizes())));
    }
    at::Tensor m = attention_mask.to(at::kCPU, at::kLong);
    if (m.lt(0).logical_or(m.gt(1)).any().item<bool>()) {
      return absl::InvalidArgumentError("Encode: attention_mask values must be 0 or 1");
    }
    key_mask = m.to(at::kBool);
  }

  at::NoGradGuard no_grad;
  const int64_t deepest = *std::max_element(layers.begin(), layers.end());
  const std::set<int64_t> wanted(layers.begin(), layers.end());

  const PaddingLayout layout = MakePaddingLayout(ids, key_mask);
  const int64_t prefix = layout.prefix, live = l - prefix, blind = layout.blind;

  ASSIGN_OR_RETURN(at::Tensor embedded, checkpoint_->GatherRows({"embed_tokens.weight", {c.vocab_size, c.hidden_size}},
                                                                layout.rows, dtype_));
  int64_t peak = static_cast<int64_t>(embedded.nbytes());
  at::Tensor h, h_blind, blind_map;  // [B, live, H], [U, H], [B*prefix] int64
  AttentionMask mask;
  Rope rope;
  std::map<int64_t, at::Tensor> captured;  // hidden_states[k], fp32 [B, L, H]
  // Reassembles [B, L, H] fp32 from the blind and live parts.
  auto assemble = [&](const at::Tensor& live_h, const at::Tensor& blind_h) {
    std::vector<at::Tensor> parts;
    if (prefix > 0) parts.push_back(blind_h.index_select(0, blind_map).view({b, prefix, c.hidden_size}));
    if (live > 0) parts.push_back(live_h);
    return at::cat(parts, 1).to(at::kFloat);
  };
  RETURN_IF_ERROR(TorchCall("text encoder embeddings", [&] {
    embedded = embedded.to(device_);
    h = embedded.narrow(0, 0, b * live).view({b, live, c.hidden_size});
    h_blind = embedded.narrow(0, b * live, blind);
    blind_map = at::tensor(layout.blind_index, at::kLong).to(device_);
    rope = MakeRope(prefix, live, c.head_dim, c.rope_theta, dtype_, device_);
    mask = MakeAttentionMask(key_mask.narrow(1, prefix, live).to(device_), c.sliding_window);
    if (wanted.count(0)) captured[0] = assemble(h, h_blind);
  }));
  embedded = at::Tensor();

  for (int64_t i = 0; i < std::min(deepest, c.num_hidden_layers); ++i) {
    ASSIGN_OR_RETURN(std::vector<TextWeight> tensors, weights_->Load(TextEncoderLayerSpecs(c, i), dtype_));
    peak = std::max(peak, Bytes(tensors));
    const std::string context = absl::StrCat("text encoder layer ", i);
    RETURN_IF_ERROR(TorchCall(context.c_str(), [&] {
      for (auto& t : tensors) {
        if (t.full.defined()) t.full = t.full.to(device_);
      }
      const DecoderLayer w = MakeLayer(c, std::move(tensors));
      if (live > 0) h = DecoderLayerForward(c, w, h, rope, mask);
      if (blind > 0) h_blind = BlindLayerForward(c, w, h_blind);
      if (i + 1 < c.num_hidden_layers && wanted.count(i + 1)) captured[i + 1] = assemble(h, h_blind);
    }));  // the layer's weights are released here, before the next one loads
  }
  if (deepest == c.num_hidden_layers) {  // the last entry of hidden_states is after the final norm
    ASSIGN_OR_RETURN(std::vector<at::Tensor> norm, checkpoint_->Load({{"norm.weight", {c.hidden_size}}}, dtype_));
    peak = std::max(peak, Bytes(norm));
    RETURN_IF_ERROR(TorchCall("text encoder final norm", [&] {
      const at::Tensor w = norm[0].to(device_);
      captured[deepest] = assemble(RmsNorm(h, w, c.rms_norm_eps), RmsNorm(h_blind, w, c.rms_norm_eps));
    }));
  }
  at::Tensor out;
  RETURN_IF_ERROR(TorchCall("text encoder output", [&] {
    std::vector<at::Tensor> parts;
    for (int64_t k : layers) parts.push_back(captured.at(k));
    out = at::cat(parts, -1);  // per token: [layer a | layer b | ...]
  }));
  last_peak_weight_bytes_ = peak;
  return out;
}

}  // namespace baton

// Numerics of the text encoder against an independent double-precision reference written with other
// torch ops: per-head loops, key/value head chosen by hand (h / group), RoPE as explicit pair rotations
// at angle p·θ^(-2i/d), the causal/padding mask and softmax as loops. Tolerance 1e-4: the encoder runs in
// fp32 (weights are bf16-exact), so only fp32 rounding through two layers separates the two.
#include "core/text/text_encoder.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/tensor/safetensors.h"
#include "core/util/files.h"

namespace baton {
namespace {

using Weights = std::map<std::string, at::Tensor>;  // decoder-relative name → double tensor

std::string FreshEncoderDir(const std::string& name) {
  std::string dir = JoinPath(::testing::TempDir(), absl::StrCat("text_encoder_test_", name, "_", getpid()));
  EXPECT_TRUE(RemoveAll(dir).ok());
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

Weights ReadDecoderWeights(const std::string& dir, const std::string& prefix) {
  auto all = LoadAllSafetensors(JoinPath(dir, "model.safetensors"));
  EXPECT_TRUE(all.ok()) << all.status();
  Weights w;
  for (const auto& [key, t] : *all) {
    if (key.rfind(prefix, 0) == 0) w[key.substr(prefix.size())] = t.to(at::kDouble);
  }
  return w;
}

at::Tensor RefRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / ((x * x).mean(-1, true) + eps).sqrt() * w;
}

// Rotates the pairs (i, i + d/2) of a head vector at position `pos`.
void RotatePairs(at::Tensor row, int64_t pos, double theta) {
  auto a = row.accessor<double, 1>();
  const int64_t d = row.size(0), half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * i / d);
    const double x1 = a[i], x2 = a[i + half];
    a[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
    a[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
  }
}

// One decoder layer for one sequence: h [L, H] double, mask[k] = 1 for tokens.
at::Tensor RefLayer(const TextEncoderConfig& c, const Weights& w, int64_t layer, const at::Tensor& h,
                    const std::vector<int64_t>& mask) {
  auto W = [&](const std::string& n) { return w.at(absl::StrCat("layers.", layer, ".", n)); };
  auto Bias = [&](const std::string& n, int64_t start, int64_t size) {  // zeros without attention_bias
    auto it = w.find(absl::StrCat("layers.", layer, ".", n));
    return it == w.end() ? at::zeros({size}, at::kDouble) : it->second.narrow(0, start, size);
  };
  const int64_t len = h.size(0), d = c.head_dim, group = c.num_attention_heads / c.num_key_value_heads;
  at::Tensor x = RefRmsNorm(h, W("input_layernorm.weight"), c.rms_norm_eps);
  std::vector<at::Tensor> heads;
  for (int64_t hq = 0; hq < c.num_attention_heads; ++hq) {
    const int64_t hk = hq / group;
    at::Tensor q = at::mm(x, W("self_attn.q_proj.weight").narrow(0, hq * d, d).t()) +
                   Bias("self_attn.q_proj.bias", hq * d, d);  // [L, d]
    at::Tensor k =
        at::mm(x, W("self_attn.k_proj.weight").narrow(0, hk * d, d).t()) + Bias("self_attn.k_proj.bias", hk * d, d);
    at::Tensor v =
        at::mm(x, W("self_attn.v_proj.weight").narrow(0, hk * d, d).t()) + Bias("self_attn.v_proj.bias", hk * d, d);
    if (c.qk_norm) {
      q = RefRmsNorm(q, W("self_attn.q_norm.weight"), c.rms_norm_eps).contiguous();
      k = RefRmsNorm(k, W("self_attn.k_norm.weight"), c.rms_norm_eps).contiguous();
    }
    for (int64_t p = 0; p < len; ++p) {
      RotatePairs(q[p], p, c.rope_theta);
      RotatePairs(k[p], p, c.rope_theta);
    }
    at::Tensor o = at::zeros({len, d}, at::kDouble);
    for (int64_t qi = 0; qi < len; ++qi) {
      std::vector<int64_t> keys;
      for (int64_t ki = 0; ki <= qi; ++ki) {
        if (mask[ki] != 0) keys.push_back(ki);
      }
      if (keys.empty()) continue;  // nothing to attend to: zero output
      std::vector<double> s;
      double top = -INFINITY;
      for (int64_t ki : keys) {
        s.push_back((q[qi] * k[ki]).sum().item<double>() / std::sqrt(static_cast<double>(d)));
        top = std::max(top, s.back());
      }
      double total = 0;
      for (double& e : s) total += (e = std::exp(e - top));
      for (size_t j = 0; j < keys.size(); ++j) o[qi] += (s[j] / total) * v[keys[j]];
    }
    heads.push_back(o);
  }
  at::Tensor h1 =
      h + at::mm(at::cat(heads, 1), W("self_attn.o_proj.weight").t()) + Bias("self_attn.o_proj.bias", 0, c.hidden_size);
  at::Tensor y = RefRmsNorm(h1, W("post_attention_layernorm.weight"), c.rms_norm_eps);
  at::Tensor g = at::mm(y, W("mlp.gate_proj.weight").t());
  at::Tensor act = g / (1.0 + at::exp(-g));
  return h1 + at::mm(act * at::mm(y, W("mlp.up_proj.weight").t()), W("mlp.down_proj.weight").t());
}

// hidden_states[0..n] of one sequence by the reference.
std::vector<at::Tensor> RefHiddenStates(const TextEncoderConfig& c, const Weights& w, const at::Tensor& ids,
                                        const std::vector<int64_t>& mask, int64_t n) {
  std::vector<at::Tensor> hs = {w.at("embed_tokens.weight").index_select(0, ids)};
  for (int64_t i = 0; i < n; ++i) hs.push_back(RefLayer(c, w, i, hs.back(), mask));
  return hs;
}

std::vector<int64_t> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
  EXPECT_LT(err, 1e-4) << what << ": max |diff| " << err << " (values up to " << want.abs().max().item<double>() << ")";
}

std::unique_ptr<TextEncoder> OpenOrDie(const std::string& dir) {
  auto enc = TextEncoder::Open(dir, at::kFloat, at::kCPU);
  EXPECT_TRUE(enc.ok()) << enc.status();
  return enc.ok() ? std::move(*enc) : nullptr;
}

TEST(TextEncoderTest, MistralLayersMatchHandComputationWithLeftPadding) {
  const TextEncoderConfig c = TinyMistral3TextConfig();
  const std::string dir = FreshEncoderDir("mistral_ref");
  ASSERT_TRUE(WriteRandomTextEncoder(c, dir, /*seed=*/7).ok());
  auto enc = OpenOrDie(dir);
  ASSERT_NE(enc, nullptr);
  const Weights w = ReadDecoderWeights(dir, "model.language_model.");

  // Row 0 left-padded (pad id 11 at the first two positions), row 1 full.
  at::Tensor ids = at::tensor({11, 11, 301, 17, 500, 42, 999, 5, 77, 1000, 3, 250, 18, 600}, at::kLong).view({2, 7});
  at::Tensor mask = at::tensor({0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, at::kLong).view({2, 7});
  const std::vector<int64_t> layers = {0, 2, 1};  // stacked in this order
  auto out = enc->Encode(ids, mask, layers);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sizes(), (at::IntArrayRef{2, 7, 3 * c.hidden_size}));
  EXPECT_EQ(out->scalar_type(), at::kFloat);
  // Row 0 alone takes the other path for its leading pads (computed once per distinct token, as
  // positions that see no key); pad rows included, both paths must agree with the reference.
  auto alone = enc->Encode(ids.narrow(0, 0, 1), mask.narrow(0, 0, 1), layers);
  ASSERT_TRUE(alone.ok()) << alone.status();
  for (int64_t b = 0; b < 2; ++b) {
    auto ref = RefHiddenStates(c, w, ids[b], ToVector(mask[b]), 2);
    for (size_t j = 0; j < layers.size(); ++j) {
      ExpectClose((*out)[b].narrow(1, j * c.hidden_size, c.hidden_size), ref[layers[j]],
                  absl::StrCat("row ", b, " hidden_states[", layers[j], "]"));
      if (b == 0) {
        ExpectClose((*alone)[0].narrow(1, j * c.hidden_size, c.hidden_size), ref[layers[j]],
                    absl::StrCat("row 0 alone, hidden_states[", layers[j], "]"));
      }
    }
  }
}

TEST(TextEncoderTest, Qwen3QkNormLayersMatchHandComputationWithRightPadding) {
  const TextEncoderConfig c = TinyQwen3TextConfig();
  const std::string dir = FreshEncoderDir("qwen3_ref");
  ASSERT_TRUE(WriteRandomTextEncoder(c, dir, /*seed=*/8).ok());
  auto enc = OpenOrDie(dir);
  ASSERT_NE(enc, nullptr);
  const Weights w = ReadDecoderWeights(dir, "model.");
  ASSERT_EQ(w.count("layers.0.self_attn.q_norm.weight"), 1u);

  at::Tensor ids = at::tensor({7, 300, 12, 650, 1023, 2, 2}, at::kLong).view({1, 7});
  at::Tensor mask = at::tensor({1, 1, 1, 1, 1, 0, 0}, at::kLong).view({1, 7});
  auto out = enc->Encode(ids, mask, {2});
  ASSERT_TRUE(out.ok()) << out.status();
  auto ref = RefHiddenStates(c, w, ids[0], ToVector(mask[0]), 2);
  ExpectClose((*out)[0], ref[2], "qwen3 hidden_states[2]");
}

// attention_bias: q/k/v/o biases; a left-padded row also checks that positions seeing no key get o_bias.
TEST(TextEncoderTest, AttentionBiasesMatchHandComputation) {
  TextEncoderConfig c = TinyQwen3TextConfig();
  c.attention_bias = true;
  const std::string dir = FreshEncoderDir("bias");
  ASSERT_TRUE(WriteRandomTextEncoder(c, dir, /*seed=*/12).ok());
  auto enc = OpenOrDie(dir);
  ASSERT_NE(enc, nullptr);
  const Weights w = ReadDecoderWeights(dir, "model.");
  ASSERT_EQ(w.count("layers.1.self_attn.o_proj.bias"), 1u);
  at::Tensor ids = at::tensor({2, 2, 2, 40, 41, 42, 43}, at::kLong).view({1, 7});
  at::Tensor mask = at::tensor({0, 0, 0, 1, 1, 1, 1}, at::kLong).view({1, 7});
  auto out = enc->Encode(ids, mask, {2});
  ASSERT_TRUE(out.ok()) << out.status();
  auto ref = RefHiddenStates(c, w, ids[0], ToVector(mask[0]), 2);
  ExpectClose((*out)[0], ref[2], "hidden_states[2] with attention biases");
}

TEST(TextEncoderTest, LastHiddenStateIsAfterTheFinalNorm) {
  TextEncoderConfig c = TinyMistral3TextConfig();
  c.num_hidden_layers = 2;
  const std::string dir = FreshEncoderDir("final_norm");
  ASSERT_TRUE(WriteRandomTextEncoder(c, dir, /*seed=*/9).ok());
  auto enc = OpenOrDie(dir);
  ASSERT_NE(enc, nullptr);
  const Weights w = ReadDecoderWeights(dir, "model.language_model.");
  at::Tensor ids = at::tensor({1, 17, 400, 401, 18}, at::kLong).view({1, 5});
  auto out = enc->Encode(ids, at::Tensor(), {1, 2});
  ASSERT_TRUE(out.ok()) << out.status();
  auto ref = RefHiddenStates(c, w, ids[0], {1, 1, 1, 1, 1}, 2);
  ExpectClose((*out)[0].narrow(1, 0, c.hidden_size), ref[1], "hidden_states[1] (not normed)");
  ExpectClose((*out)[0].narrow(1, c.hidden_size, c.hidden_size),
              RefRmsNorm(ref[2], w.at("norm.weight"), c.rms_norm_eps), "hidden_states[2] = norm(layer 2)");
}

TEST(TextEncoderTest, StacksRequestedLayersInGivenOrder) {
  const std::string dir = FreshEncoderDir("order");
  ASSERT_TRUE(WriteRandomTextEncoder(TinyMistral3TextConfig(), dir, /*seed=*/3).ok());
  auto enc = OpenOrDie(dir);
  ASSERT_NE(enc, nullptr);
  at::Tensor ids = at::tensor({1, 17, 250, 260, 270, 18, 3}, at::kLong).view({1, 7});
  auto a = enc->Encode(ids, at::Tensor(), {20});
  auto b = enc->Encode(ids, at::Tensor(), {10});
  auto both = enc->Encode(ids, at::Tensor(), {20, 10});
  ASSERT_TRUE(a.ok() && b.ok() && both.ok());
  EXPECT_TRUE(at::equal(*both, at::cat({*a, *b}, -1)));
  EXPECT_FALSE(at::allclose(*a, *b));  // the layers really differ
}

// Real tokens of a padded sequence get the hidden states of the unpadded one: with right padding by
// causality; with left padding because pads are masked and RoPE depends only on position differences.
TEST(TextEncoderTest, PaddedSequencesMatchUnpaddedOnRealTokens) {
  for (const TextEncoderConfig& c : {TinyMistral3TextConfig(), TinyQwen3TextConfig()}) {
    const std::string dir = FreshEncoderDir("padding_" + c.model_type);
    ASSERT_TRUE(WriteRandomTextEncoder(c, dir, /*seed=*/11).ok());
    auto enc = OpenOrDie(dir);
    ASSERT_NE(enc, nullptr);
    const std::vector<int64_t> layers = {1, 9, 30};
    at::Tensor real = at::tensor({1, 17, 320, 330, 340, 18, 3, 4}, at::kLong);
    const int64_t n = real.numel(), pad = 5;
    auto plain = enc->Encode(real.view({1, n}), at::Tensor(), layers);
    ASSERT_TRUE(plain.ok()) << plain.status();

    at::Tensor pads = at::full({pad}, 11, at::kLong);
    at::Tensor left_ids = at::cat({pads, real}).view({1, n + pad});
    at::Tensor right_ids = at::cat({real, pads}).view({1, n + pad});
    at::Tensor left_mask = at::cat({at::zeros({pad}, at::kLong), at::ones({n}, at::kLong)}).view({1, n + pad});
    at::Tensor right_mask = left_mask.flip({1});
    // Both rows in one batch: per-row masks must not leak into each other.
    auto batch = enc->Encode(at::cat({left_ids, right_ids}), at::cat({left_mask, right_mask}), layers);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const double tol = 1e-4 * std::max(1.0, plain->abs().max().item<double>());
    EXPECT_TRUE(at::allclose((*batch)[0].narrow(0, pad, n), (*plain)[0], 0, tol)) << c.model_type << " left";
    EXPECT_TRUE(at::allclose((*batch)[1].narrow(0, 0, n), (*plain)[0], 0, tol)) << c.model_type << " right";
    EXPECT_TRUE(at::isfinite(*batch).all().item<bool>()) << "fully masked rows must not produce NaN";
  }
}

TEST(TextEncoderTest, RejectsBadLayersIdsAndMasks) {
  const TextEncoderConfig c = TinyMistral3TextConfig();
  const std::string dir = FreshEncoderDir("errors");
  ASSERT_TRUE(WriteRandomTextEncoder(c, dir, /*seed=*/1).ok());
  auto enc = OpenOrDie(dir);
  ASSERT_NE(enc, nullptr);
  at::Tensor ids = at::tensor({1, 2, 3}, at::kLong).view({1, 3});
  auto too_deep = enc->Encode(ids, at::Tensor(), {c.num_hidden_layers + 1});
  EXPECT_EQ(too_deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_deep.status().message().find("41"), std::string::npos) << too_deep.status();
  EXPECT_EQ(enc->Encode(ids, at::Tensor(), {-1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(enc->Encode(ids, at::Tensor(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  auto oov = enc->Encode(at::tensor({int64_t{1}, c.vocab_size}, at::kLong).view({1, 2}), at::Tensor(), {1});
  EXPECT_EQ(oov.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(oov.status().message().find("1024"), std::string::npos) << oov.status();
  EXPECT_EQ(enc->Encode(ids, at::ones({1, 4}, at::kLong), {1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(enc->Encode(ids, at::full({1, 3}, 2, at::kLong), {1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(enc->Encode(at::ones({3}, at::kLong), at::Tensor(), {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TextEncoder::Open(JoinPath(dir, "missing"), at::kFloat, at::kCPU).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(TextEncoder::Open(dir, at::kLong, at::kCPU).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextEncoderTest, Bf16ComputeStaysCloseToFp32) {
  const std::string dir = FreshEncoderDir("bf16");
  ASSERT_TRUE(WriteRandomTextEncoder(TinyMistral3TextConfig(), dir, /*seed=*/5).ok());
  auto f32 = TextEncoder::Open(dir, at::kFloat, at::kCPU);
  auto bf16 = TextEncoder::Open(dir, at::kBFloat16, at::kCPU);
  ASSERT_TRUE(f32.ok() && bf16.ok());
  at::Tensor ids = at::tensor({1, 17, 250, 260, 270, 18, 3}, at::kLong).view({1, 7});
  auto a = (*f32)->Encode(ids, at::Tensor(), {10});
  auto b = (*bf16)->Encode(ids, at::Tensor(), {10});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->scalar_type(), at::kFloat);
  // bf16 keeps ~3 significant digits; over 10 layers the relative error stays at the percent level.
  const double rel = ((*a - *b).norm() / a->norm()).item<double>();
  EXPECT_LT(rel, 0.05);
  EXPECT_GT(rel, 0.0);  // it really ran in bf16
  EXPECT_EQ((*bf16)->last_peak_weight_bytes() * 2, (*f32)->last_peak_weight_bytes());
}

}  // namespace
}  // namespace baton

// The adapter types (adapter_type.h): peft's factorization, each type's parameters under PEFT's names and shapes, an
// adapter that starts as the identity (peft's init), and each forward against its formula written out with ΔW built.
// The referees against peft and lycoris-lora themselves are tests/upstream/test_lora_variants.py.
#include "core/lora/adapter_type.h"

#include <gtest/gtest.h>

#include "core/lora/lora_linear.h"

namespace baton {
namespace {

using Factors = std::pair<int64_t, int64_t>;

TEST(AdapterTypeTest, LokrFactorizationIsPeftsOnItsDocumentedCases) {
  EXPECT_EQ(LokrFactorization(256, -1), Factors(16, 16));
  EXPECT_EQ(LokrFactorization(128, -1), Factors(8, 16));
  EXPECT_EQ(LokrFactorization(127, -1), Factors(1, 127));
  EXPECT_EQ(LokrFactorization(128, 4), Factors(4, 32));
  EXPECT_EQ(LokrFactorization(3072, -1), Factors(48, 64));
  // peft decomposes w2 when r < max(out_k, in_n) / 2: 128 → (8, 16), so rank 7 splits and rank 8 does not.
  EXPECT_FALSE(LokrShapeFor(128, 128, 7, -1).full_w2);
  EXPECT_TRUE(LokrShapeFor(128, 128, 8, -1).full_w2);
}

TEST(AdapterTypeTest, ParsesTheFourTypesAndNamesTheOthers) {
  for (const char* name : {"lora", "dora", "loha", "lokr"}) {
    auto t = ParseAdapterType(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_STREQ(AdapterTypeName(*t), name);
  }
  auto bad = ParseAdapterType("locon");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("want lora, dora, loha or lokr"), std::string::npos);
}

LoraLinear RandomLinear(int64_t in, int64_t out) {
  LoraLinear linear(in, out, at::TensorOptions().dtype(at::kDouble));
  linear->weight.copy_(at::randn({out, in}, at::kDouble));
  return linear;
}

// Every parameter random (the init makes ΔW zero) so the formula is tested, not the zeros.
void Randomize(LoraLinearImpl& linear) {
  at::NoGradGuard no_grad;
  for (auto& [name, t] : linear.adapter_parameters()) t.copy_(at::randn_like(t));
}

TEST(AdapterTypeTest, EachTypeHasPeftsParametersStartsAsTheBaseAndFollowsItsFormula) {
  at::manual_seed(3);
  const int64_t in = 12, out = 8, rank = 2;
  const double alpha = 6, s = alpha / rank;
  const at::Tensor x = at::randn({3, 5, in}, at::kDouble);
  for (AdapterType type : {AdapterType::kDora, AdapterType::kLoha, AdapterType::kLokr}) {
    SCOPED_TRACE(AdapterTypeName(type));
    LoraLinear linear = RandomLinear(in, out);
    const at::Tensor w = linear->weight.clone();
    linear->AttachAdapter(type, rank, alpha, 0.0, -1, 7);
    const auto shapes = AdapterParameterShapes(type, in, out, rank, -1);
    ASSERT_EQ(linear->adapter_parameters().size(), shapes.size());
    int64_t count = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(linear->adapter_parameters()[i].first, shapes[i].first);
      EXPECT_EQ(linear->adapter_parameters()[i].second.sizes().vec(), shapes[i].second);
      count += linear->adapter_parameters()[i].second.numel();
    }
    EXPECT_EQ(count, AdapterParameterCount(type, in, out, rank, -1));
    for (auto& [name, t] : linear->adapter_parameters()) t.set_data(t.to(at::kDouble));
    const at::Tensor base = at::matmul(x, w.t());
    // (DoRA: the magnitude is the fp32 row norm, so m/‖W‖ is 1 to fp32 precision)
    EXPECT_TRUE(at::allclose(linear->forward(x), base, 1e-6, 1e-6)) << "the new adapter changes the output";
    Randomize(*linear);
    auto p = [&](const std::string& n) {
      for (const auto& [name, t] : linear->adapter_parameters()) {
        if (name == n) return t;
      }
      return at::Tensor();
    };
    at::Tensor want;
    if (type == AdapterType::kDora) {
      const at::Tensor merged = w + s * at::matmul(p("lora_B.weight"), p("lora_A.weight"));
      want = at::matmul(
          x, (merged * (p("lora_magnitude_vector") / at::linalg_vector_norm(merged, 2, {1})).unsqueeze(1)).t());
    } else if (type == AdapterType::kLoha) {
      const at::Tensor dw = at::matmul(p("hada_w1_a"), p("hada_w1_b")) * at::matmul(p("hada_w2_a"), p("hada_w2_b"));
      want = base + s * at::matmul(x, dw.t());
    } else {
      const at::Tensor w2 = p("lokr_w2").defined() ? p("lokr_w2") : at::matmul(p("lokr_w2_a"), p("lokr_w2_b"));
      want = base + s * at::matmul(x, at::kron(p("lokr_w1"), w2).t());
    }
    EXPECT_TRUE(at::allclose(linear->forward(x), want, 1e-10, 1e-10));
  }
}

TEST(AdapterTypeTest, AdapterParameterNamesAreRecognised) {
  for (const char* name : {"a.to_q.lora_A.weight", "a.to_q.lora_magnitude_vector", "a.to_q.hada_w2_b", "a.to_q.lokr_w1",
                           "a.to_q.lokr_w2_a"}) {
    EXPECT_TRUE(IsAdapterParameterName(name)) << name;
  }
  EXPECT_FALSE(IsAdapterParameterName("a.to_q.weight"));
  EXPECT_EQ(AdapterModuleOf("a.to_q.lora_B.weight"), "a.to_q");
  EXPECT_EQ(AdapterModuleOf("a.to_q.hada_w1_a"), "a.to_q");
}

}  // namespace
}  // namespace baton

#include "core/train/grad_norm.h"

#include <gtest/gtest.h>

#include <cmath>

namespace baton {
namespace {

// Each squared norm is the double sum of squares (to double rounding), one entry per gradient in the given order.
TEST(GradNormTest, SquaredNormsAreDoubleSumsInOrder) {
  const at::Tensor a = at::randn({257, 31});
  const at::Tensor b = at::tensor({3.0f, 4.0f});
  const at::Tensor sq = SquaredNorms({a, b});
  ASSERT_EQ(sq.scalar_type(), at::kDouble);
  ASSERT_EQ(sq.numel(), 2);
  EXPECT_NEAR(sq[0].item<double>(), a.to(at::kDouble).pow(2).sum().item<double>(), 1e-9);
  EXPECT_DOUBLE_EQ(sq[1].item<double>(), 25.0);
  EXPECT_EQ(SquaredNorms({}).numel(), 0);
}

// The global norm adds by name; the factor clips only above the limit; scaling is in place.
TEST(GradNormTest, ClipsOnlyAboveTheLimitByTheSameFactorEverywhere) {
  EXPECT_DOUBLE_EQ(GlobalNorm({{"b", 16.0}, {"a", 9.0}}), 5.0);
  EXPECT_EQ(ClipFactor(5.0, 10.0), 1.0);
  EXPECT_EQ(ClipFactor(5.0, 0.0), 1.0);  // clipping off
  EXPECT_DOUBLE_EQ(ClipFactor(5.0, 1.0), 1.0 / (5.0 + 1e-6));
  std::map<std::string, at::Tensor> grads = {{"a", at::tensor({3.0f})}, {"b", at::tensor({4.0f})}};
  const at::Tensor a = grads["a"];
  EXPECT_NEAR(ClipGradNorm(grads, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(a.item<double>(), 0.6, 1e-6);  // the same tensor, scaled in place
  EXPECT_NEAR(grads["b"].item<double>(), 0.8, 1e-6);
  // A stage's own measure of its part adds up to the whole's, to the bit.
  const auto first = SquaredNormsByName({{"a", at::tensor({3.0f})}});
  const auto second = SquaredNormsByName({{"b", at::tensor({4.0f})}});
  std::map<std::string, double> merged = first;
  merged.insert(second.begin(), second.end());
  EXPECT_EQ(GlobalNorm(merged), GlobalNorm(SquaredNormsByName({{"a", at::tensor({3.0f})}, {"b", at::tensor({4.0f})}})));
}

}  // namespace
}  // namespace baton

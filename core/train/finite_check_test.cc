#include "core/train/finite_check.h"

#include <gtest/gtest.h>

#include <limits>

#include "core/train/grad_norm.h"

namespace baton {
namespace {

// The squared norms of two gradients, the second filled with `value`, as the trainers measure them.
std::map<std::string, double> Grads(float value) {
  return SquaredNormsByName({{"a.lora_A.weight", at::ones({2, 3})}, {"b.lora_B.weight", at::full({3, 2}, value)}});
}

TEST(FiniteCheckTest, FiniteStepPasses) {
  EXPECT_TRUE(CheckStepFinite(4, 1e-3, {0.5, 0.7}, 1, {Grads(1.0f), Grads(-2.0f)}).ok());
}

TEST(FiniteCheckTest, NonFiniteLossNamesStepMicroBatchAndStage) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  absl::Status s = CheckStepFinite(7, 1e30, {0.5, 0.6, nan}, 1, {Grads(1.0f), Grads(1.0f)});
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  const std::string m(s.message());
  EXPECT_NE(m.find("step 7: the loss of micro-batch 2 is nan (computed on stage 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("not applied"), std::string::npos) << m;
  EXPECT_NE(m.find("1e+30"), std::string::npos) << m;
}

TEST(FiniteCheckTest, NonFiniteGradientNamesStageAndParameter) {
  const float inf = std::numeric_limits<float>::infinity();
  absl::Status s = CheckStepFinite(3, 1e-3, {0.5}, 1, {Grads(1.0f), Grads(inf)});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("step 3: stage 1 sent a non-finite gradient for b.lora_B.weight"), std::string::npos) << s;
  // One process: no stage to name.
  s = CheckStepFinite(3, 1e-3, {0.5}, 0, {Grads(-inf)});
  EXPECT_NE(s.message().find("the model sent a non-finite gradient"), std::string::npos) << s;
  // A NaN among finite values, and the largest finite values squared and summed: the norm tells them apart.
  at::Tensor mixed = at::ones({4});
  mixed[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(CheckStepFinite(3, 1e-3, {0.5}, 0, {SquaredNormsByName({{"m", mixed}})}).ok());
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(CheckStepFinite(3, 1e-3, {0.5}, 0, {SquaredNormsByName({{"m", at::full({1 << 16}, big)}})}).ok());
}

}  // namespace
}  // namespace baton

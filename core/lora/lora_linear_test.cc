// LoRA dropout masks: on the CPU exactly the masks every CPU run drew before (mt19937 over an fp32 tensor of the
// keep probability), a pure function of the seed (a recompute, a redo and a resume redraw them); elsewhere drawn on
// the activation's own device, never on the host and copied.
#include "core/lora/lora_linear.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "core/util/seed.h"

namespace baton {
namespace {

TEST(DropoutKeepMaskTest, CpuMasksAreTheSeededBernoulliDrawBitwise) {
  const at::Tensor like = at::randn({3, 5, 7}, at::kDouble);
  const uint64_t seed = MixSeed(11, 4);
  auto gen = at::detail::createCPUGenerator(seed);
  const at::Tensor before = at::bernoulli(at::full({3, 5, 7}, 0.75, at::kFloat), gen).to(at::kDouble);
  const at::Tensor mask = DropoutKeepMask(like, 0.75, seed);
  EXPECT_EQ(mask.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(mask, before));
  EXPECT_TRUE(at::equal(mask, DropoutKeepMask(like, 0.75, seed)));
  EXPECT_FALSE(at::equal(mask, DropoutKeepMask(like, 0.75, seed + 1)));
  const double kept = mask.mean().item<double>();
  EXPECT_GT(kept, 0.5);
  EXPECT_LT(kept, 0.95);
}

TEST(DropoutKeepMaskTest, DeviceMasksAreMadeOnTheDevice) {
  const at::Tensor like = at::empty({4, 6}, at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta));
  const at::Tensor mask = DropoutKeepMask(like, 0.9, 3);
  EXPECT_TRUE(mask.is_meta());
  EXPECT_EQ(mask.scalar_type(), at::kBFloat16);
  EXPECT_EQ(mask.sizes(), like.sizes());
}

// A LoraLinear in training mode with dropout draws its mask where the input lives: on meta nothing touches the host.
TEST(DropoutKeepMaskTest, LoraForwardWithDropoutRunsOnTheDevice) {
  LoraLinear linear(8, 4, at::TensorOptions().device(at::kMeta));
  linear->AttachLora(2, 2.0, 0.5, 1);
  linear->set_dropout_seed(5);
  linear->train();
  const at::Tensor x = at::randn({2, 3, 8}, at::TensorOptions().device(at::kMeta));
  const at::Tensor y = linear(x);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 4}));
}

}  // namespace
}  // namespace baton

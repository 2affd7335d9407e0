// LoRA dropout masks: on the CPU exactly the masks every CPU run drew before (mt19937 over an fp32 tensor of the
// keep probability), a pure function of the seed (a recompute, a redo and a resume redraw them); elsewhere drawn on
// the activation's own device, never on the host and copied.
#include "core/lora/lora_linear.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "core/lora/cpu_linear.h"
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

namespace baton {
namespace {

// math_dtype bf16 (the job's lora_dtype on a bf16 base): the adapter's projections run in bf16 exactly as PEFT's
// bf16 adapters compute them, while the adapters and their gradients stay fp32 and the gradients of two micro-batches
// sum in fp32. With fp32 math (the default) the input is promoted and the math is fp32, as before.
TEST(LoraMathDtypeTest, Bf16MathCastsTheAdaptersAndKeepsFp32Gradients) {
  const CpuLinearBackend was = GetCpuLinearBackend();
  SetCpuLinearBackend(CpuLinearBackend::kAten);  // at::matmul, as the reference below (oneDNN fuses the add)
  for (at::ScalarType math : {at::kBFloat16, at::kFloat}) {
    LoraLinear linear(16, 8, at::TensorOptions().dtype(at::kBFloat16));
    linear->weight.copy_(at::randn({8, 16}) * 0.1);
    linear->AttachLora(4, 8.0, 0.0, 5);
    linear->lora_B().detach().copy_(at::randn({8, 4}) * 0.1);  // nonzero, so A gets a gradient too
    linear->set_math_dtype(math);
    const at::Tensor x = at::randn({3, 16}).to(at::kBFloat16);
    const at::Tensor y = linear->forward(x);
    ASSERT_EQ(y.scalar_type(), at::kBFloat16);
    // The reference: what PEFT computes with adapters of that dtype (x and the adapters in it), added to the base.
    const at::Tensor a = linear->lora_A().detach().to(math), b = linear->lora_B().detach().to(math);
    const at::Tensor base = at::matmul(x, linear->weight.t());
    const at::Tensor delta = at::matmul(at::matmul(x.to(math), a.t()), b.t()) * 2.0;
    EXPECT_TRUE(at::equal(y, base + delta.to(at::kBFloat16))) << "math " << math;
    y.sum().backward();
    const at::Tensor once = linear->lora_A().grad().clone();
    linear->forward(x).sum().backward();
    for (at::Tensor* p : {&linear->lora_A(), &linear->lora_B()}) {
      EXPECT_EQ(p->scalar_type(), at::kFloat);
      ASSERT_TRUE(p->grad().defined());
      EXPECT_EQ(p->grad().scalar_type(), at::kFloat);
    }
    // Summed in fp32: twice the same micro-batch is exactly twice its gradient (a bf16 sum would round).
    EXPECT_TRUE(at::equal(linear->lora_A().grad(), once * 2)) << "math " << math;
    EXPECT_GT(once.abs().max().item<double>(), 0.0);
  }
  SetCpuLinearBackend(was);
}

}  // namespace
}  // namespace baton

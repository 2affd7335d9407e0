// Issue 27 on a GPU, the parts the meta device cannot show (core/model/device_placement_test.cc holds the rest on the
// CPU): an 8-bit Wan stage never holds its block weights in full precision on the device while it is built (defect 2),
// and LoRA dropout masks are drawn on the device as a pure function of their seed (defect 5). Every test SKIPS
// without a CUDA device.
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <gtest/gtest.h>

#include <string>

#include "core/device/device.h"
#include "core/lora/lora.h"
#include "core/lora/lora_linear.h"
#include "core/model/model_family.h"
#include "core/model/quantize_module.h"
#include "core/model/wan_weights.h"
#include "core/testing/tiny_flux2.h"

namespace baton {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class CudaStageBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << BuildAndDeviceSummary() << ")";
  }
};

// The caching allocator's allocated bytes on cuda:0 (all pools): now or the peak since resetPeakStats.
int64_t AllocatedBytes(bool peak) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const auto& allocated = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return peak ? allocated.peak : allocated.current;
}

// Block linears of 4 x (8·512² + 2·512·2048) = 16.8 M parameters: 33.6 MB in bf16, 16.8 MB in int8. Built on the
// device (the old Wan path) the peak would hold the bf16 weights; built on the CPU and moved it is the stage as held.
TEST_F(CudaStageBuildTest, Int8WanStageNeverHoldsItsBf16WeightsOnTheDevice) {
  WanConfig c;
  c.num_attention_heads = 4;
  c.attention_head_dim = 128;
  c.in_channels = 4;
  c.out_channels = 4;
  c.text_dim = 64;
  c.ffn_dim = 2048;
  c.num_layers = 4;
  c.rope_max_seq_len = 32;
  const std::string dir = test_util::MakeTempDir("cuda_wan_int8");
  ASSERT_TRUE(WriteRandomWanWeights(c, dir, 3).ok());
  auto model = OpenModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  at::empty({1}, at::TensorOptions().device(kCuda));  // initialises the allocator before the baseline
  const int64_t before = AllocatedBytes(/*peak=*/false);
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  auto stage = (*model)->BuildStage((*model)->FullRange(), at::kBFloat16, kCuda, nullptr, true, WeightQuant::kInt8);
  ASSERT_TRUE(stage.ok()) << stage.status();
  const int64_t held = FrozenBytes((*stage)->module());
  const int64_t block_bf16 = 2 * c.num_layers * c.BlockLinearParams();
  EXPECT_LT(held, block_bf16) << "the int8 stage as held";
  // Moving tensor by tensor allocates exactly what the stage holds (plus the caching allocator's rounding).
  const int64_t peak = AllocatedBytes(/*peak=*/true) - before;
  EXPECT_LE(peak, held + (int64_t{1} << 20)) << "peak while building " << peak << " bytes, stage holds " << held
                                             << ", its block weights in bf16 are " << block_bf16;
}

// The same seed draws the same mask on the device (a recompute, a redo and a resume see it), another seed another;
// the keep rate is the asked one; drawing leaves the device's default generator alone.
TEST_F(CudaStageBuildTest, DropoutMasksAreDrawnOnTheDeviceFromTheirSeed) {
  const at::Tensor like = at::empty({64, 1024}, at::TensorOptions().device(kCuda));
  const uint64_t default_seed = at::globalContext().defaultGenerator(kCuda).current_seed();
  const at::Tensor a = DropoutKeepMask(like, 0.9, 7);
  EXPECT_TRUE(a.is_cuda());
  EXPECT_TRUE(at::equal(a, DropoutKeepMask(like, 0.9, 7)));
  EXPECT_FALSE(at::equal(a, DropoutKeepMask(like, 0.9, 8)));
  EXPECT_TRUE(at::equal(a, a.clamp(0, 1).round()));  // zeros and ones only
  EXPECT_NEAR(a.mean().item<double>(), 0.9, 0.01);   // 65536 draws: sd 0.0012
  EXPECT_EQ(at::globalContext().defaultGenerator(kCuda).current_seed(), default_seed);

  LoraLinear linear(1024, 256, at::TensorOptions().device(kCuda));
  linear->weight.normal_();
  linear->AttachLora(4, 4.0, 0.5, 1);
  linear->lora_B().data().normal_();
  linear->train();
  linear->set_dropout_seed(11);
  const at::Tensor x = at::randn({8, 1024}, at::TensorOptions().device(kCuda));
  const at::Tensor y = linear(x);
  EXPECT_TRUE(at::equal(y, linear(x)));  // the recompute of a micro-batch
  linear->set_dropout_seed(12);
  EXPECT_FALSE(at::equal(y, linear(x)));
}

}  // namespace
}  // namespace baton

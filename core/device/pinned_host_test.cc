#include "core/device/pinned_host.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/device/device.h"

namespace baton {
namespace {

TEST(PinnedHostTest, WithoutAGpuNothingIsHeldAndNothingTrimmed) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  // Ordinary CPU tensors never touch the pinned allocator.
  const at::Tensor t = at::ones({1024}, at::kFloat);
  const PinnedHostBytes held = PinnedHostMemory();
  EXPECT_EQ(held.in_use, 0);
  EXPECT_EQ(held.cached, 0);
  EXPECT_FALSE(TrimPinnedHostCache(0));
  EXPECT_FALSE(TrimPinnedHostCache(-1));
  EXPECT_EQ(t.sum().item<float>(), 1024.0f);
}

TEST(PinnedHostTest, FreedBlocksAreCachedUntilTrimmedOverBudget) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "needs a CUDA device (pinned memory)";
  constexpr int64_t kBytes = 4 << 20;
  const PinnedHostBytes before = PinnedHostMemory();
  {
    const at::Tensor pinned = at::empty({kBytes}, at::TensorOptions(at::kByte).pinned_memory(true));
    ASSERT_TRUE(pinned.is_pinned());
    EXPECT_GE(PinnedHostMemory().in_use, before.in_use + kBytes);
  }
  const PinnedHostBytes after_free = PinnedHostMemory();
  EXPECT_GE(after_free.cached, kBytes) << "a freed pinned block stays cached for reuse";
  EXPECT_FALSE(TrimPinnedHostCache(after_free.in_use + after_free.cached)) << "within budget: kept";
  EXPECT_TRUE(TrimPinnedHostCache(0));
  EXPECT_EQ(PinnedHostMemory().cached, 0);
}

}  // namespace
}  // namespace baton

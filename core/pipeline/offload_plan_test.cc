// The planner with block swap (offload): FLUX.2-dev on one 24 GB card and on two 16 GB cards with 8-bit block
// weights, each with at least 1 GB to spare; the swapped blocks' terms as partition.h documents them; and the
// options it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/pipeline/partition.h"
#include "core/testing/paths.h"
#include "core/util/files.h"

namespace baton {
namespace {

constexpr int64_t kOffloadGB = 1000'000'000;

Flux2Config OffloadDev() {
  auto config = LoadFlux2Config(JoinPath(test_util::SourceDir(), "configs/models/flux2-dev.json"));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Flux2Config{};
}

PartitionOptions OffloadOptions(int stages, int64_t budget, int64_t offload) {
  PartitionOptions o;
  o.stages = stages;
  if (budget > 0) o.memory_budget_bytes = {budget};  // 0: unlimited
  o.quantize = WeightQuant::kInt8;
  o.recompute = RecomputePolicy::kAuto;
  o.offload_blocks = offload;
  return o;
}

// The users the issue names: one 24 GB card, or two 16 GB cards (in two PCs), FLUX.2-dev at 8 bits.
TEST(OffloadPlanTest, DevFitsOne24GBCardAndTwo16GBCardsWithAGigabyteToSpare) {
  const Flux2Config dev = OffloadDev();
  for (const auto& [stages, budget] : {std::pair{1, 24 * kOffloadGB}, std::pair{2, 16 * kOffloadGB}}) {
    auto without = PartitionFlux2(dev, OffloadOptions(stages, budget, 0));
    ASSERT_TRUE(without.ok()) << without.status();
    EXPECT_FALSE(without->fits) << stages << " stages";
    EXPECT_NE(without->message.find("with offload: auto"), std::string::npos) << without->message;
    auto plan = PartitionFlux2(dev, OffloadOptions(stages, budget, PartitionOptions::kOffloadAuto));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->fits) << plan->message;
    int64_t host = 0;
    for (const StageSpec& s : plan->stages) {
      EXPECT_LE(s.est_memory_bytes + kOffloadGB, budget) << stages << " stages, stage " << s.index;
      EXPECT_GT(s.offload_blocks, 2) << "stage " << s.index;
      EXPECT_GE(s.recompute_blocks, s.offload_blocks) << "swapped blocks are recomputed";
      host += s.host_bytes;
    }
    // The frozen weights (~32 GB at 8 bits) are on the cards or in host memory, no byte in neither.
    EXPECT_GT(host, 8 * kOffloadGB);
    EXPECT_NE(RenderPlan(dev, *plan).find(" host"), std::string::npos);
  }
}

// Swapping s blocks takes their bytes off the device and puts back two buffers of the largest (partition.h);
// auto takes the fewest that leave its headroom, so one block fewer would not.
TEST(OffloadPlanTest, SwappedBlocksLeaveTwoBuffersAndAutoTakesTheFewest) {
  const Flux2Config dev = OffloadDev();
  auto none = PartitionFlux2(dev, OffloadOptions(2, 0, 0));
  auto ten = PartitionFlux2(dev, OffloadOptions(2, 0, 10));
  ASSERT_TRUE(none.ok() && ten.ok()) << none.status() << ten.status();
  const FrozenSizes sizes = ComputeFrozenSizes(dev, WeightQuant::kInt8, 2);
  for (size_t k = 0; k < 2; ++k) {
    const StageSpec &a = none->stages[k], &b = ten->stages[k];
    ASSERT_EQ(a.block_begin, b.block_begin);  // the cut is by compute, the same with or without the swap
    int64_t swapped = 0, largest = 0;
    for (int64_t i = b.block_begin; i < b.block_begin + 10; ++i) {
      swapped += sizes.block_bytes[static_cast<size_t>(i)];
      largest = std::max(largest, sizes.block_bytes[static_cast<size_t>(i)]);
    }
    EXPECT_EQ(b.offload_blocks, 10);
    EXPECT_EQ(b.host_bytes, swapped);
    EXPECT_EQ(b.param_bytes, a.param_bytes - swapped + 2 * largest);
  }
  auto one = PartitionFlux2(dev, OffloadOptions(1, 24 * kOffloadGB, PartitionOptions::kOffloadAuto));
  ASSERT_TRUE(one.ok() && one->fits) << one->message;
  const int64_t s = one->stages[0].offload_blocks;
  auto fewer = PartitionFlux2(dev, OffloadOptions(1, 24 * kOffloadGB, s - 1));
  ASSERT_TRUE(fewer.ok());
  EXPECT_LE(one->stages[0].est_memory_bytes, 24 * kOffloadGB - kOffloadHeadroomBytes);
  EXPECT_GT(fewer->stages[0].est_memory_bytes, 24 * kOffloadGB - kOffloadHeadroomBytes) << s - 1 << " swapped blocks";
}

TEST(OffloadPlanTest, RefusesANegativeCountAndOffloadWithoutRecompute) {
  const Flux2Config dev = OffloadDev();
  PartitionOptions o = OffloadOptions(2, 24 * kOffloadGB, -2);
  EXPECT_EQ(PartitionFlux2(dev, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.offload_blocks = 4;
  o.recompute = RecomputePolicy::kNone;
  auto refused = PartitionFlux2(dev, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("needs recompute"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace baton

#include "core/pipeline/chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/pipeline/stage_memory.h"
#include "core/testing/paths.h"
#include "core/util/files.h"

namespace baton {
namespace {

Flux2Config LoadModel(const std::string& name) {
  auto config = LoadFlux2Config(JoinPath(test_util::SourceDir(), "configs/models/" + name + ".json"));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Flux2Config{};
}

// bench_pipeline's default shape: 2 double + 4 single blocks.
Flux2Config SixBlocks() {
  Flux2Config c;
  c.in_channels = 128;
  c.num_layers = 2;
  c.num_single_layers = 4;
  c.attention_head_dim = 64;
  c.num_attention_heads = 6;
  c.joint_attention_dim = 256;
  c.axes_dims_rope = {16, 16, 16, 16};
  return c;
}

PartitionOptions Workers(int p, std::vector<int64_t> budgets = {}) {
  PartitionOptions o;
  o.stages = p;
  o.micro_batches = 8;
  o.tokens_per_micro_batch = 320;
  o.text_tokens_per_micro_batch = 64;
  o.memory_budget_bytes = std::move(budgets);
  return o;
}

double BusiestWorker(const Flux2Config& c, const PartitionOptions& o, int p, const std::vector<int64_t>& bounds) {
  const int k = static_cast<int>(bounds.size()) - 1;
  std::vector<double> worker(p, 0);
  for (int u = 0; u < k; ++u) worker[u % p] += StageComputeCost(c, o, bounds[u], bounds[u + 1], u == 0, u == k - 1);
  return *std::max_element(worker.begin(), worker.end());
}

TEST(ChunksTest, WorkerHoldsEveryPthVirtualStage) {
  EXPECT_EQ(WorkerVirtualStages(2, 2, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(WorkerVirtualStages(2, 2, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(WorkerVirtualStages(3, 3, 2), (std::vector<int>{2, 5, 8}));
}

TEST(ChunksTest, SplitCoversTheModelAndBalancesWorkersAsWellAsAnySplit) {
  const Flux2Config c = SixBlocks();
  const PartitionOptions o = Workers(2);
  auto plan = PartitionFlux2Chunks(c, o, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->virtual_stages.size(), 4u);
  EXPECT_TRUE(plan->exhaustive);
  EXPECT_TRUE(plan->fits);
  std::vector<int64_t> bounds = {0};
  for (const StageSpec& s : plan->virtual_stages) {
    EXPECT_EQ(s.block_begin, bounds.back());
    EXPECT_LT(s.block_begin, s.block_end);
    EXPECT_EQ(s.has_embedders, s.index == 0);
    EXPECT_EQ(s.has_head, s.index == 3);
    bounds.push_back(s.block_end);
  }
  EXPECT_EQ(bounds.back(), c.num_blocks());
  const double best = BusiestWorker(c, o, 2, bounds);
  EXPECT_DOUBLE_EQ(best, *std::max_element(plan->worker_cost.begin(), plan->worker_cost.end()));
  // Brute force over all 10 ways to cut 6 blocks into 4 chunks.
  for (int64_t a = 1; a < 6; ++a) {
    for (int64_t b = a + 1; b < 6; ++b) {
      for (int64_t d = b + 1; d < 6; ++d) EXPECT_LE(best, BusiestWorker(c, o, 2, {0, a, b, d, 6}) * (1 + 1e-12));
    }
  }
}

TEST(ChunksTest, LargeModelsFallBackToChunksBalancedAmongThemselves) {
  const Flux2Config c = LoadModel("flux2-dev");  // 56 blocks into 8 chunks: C(55, 7) splits
  PartitionOptions o = Workers(4);
  o.bytes_per_param = 2;
  auto plan = PartitionFlux2Chunks(c, o, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->exhaustive);
  PartitionOptions per_chunk = o;
  per_chunk.stages = 8;
  auto balanced = PartitionFlux2(c, per_chunk);
  ASSERT_TRUE(balanced.ok());
  for (int u = 0; u < 8; ++u) EXPECT_EQ(plan->virtual_stages[u].block_end, balanced->stages[u].block_end) << u;
  EXPECT_EQ(plan->worker_cost.size(), 4u);
}

TEST(ChunksTest, MemoryIsPerWorkerAndChecksTheBudget) {
  const Flux2Config c = SixBlocks();
  auto roomy = PartitionFlux2Chunks(c, Workers(2, {int64_t{1} << 40}), 2);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  EXPECT_TRUE(roomy->fits);
  // Each worker holds the frozen weights of both its chunks and pays the device's fixed overhead once.
  const int64_t overhead = DeviceProcessBytes(Workers(2).device);
  for (int w = 0; w < 2; ++w) {
    int64_t frozen = 0;
    for (int u : WorkerVirtualStages(2, 2, w)) frozen += roomy->virtual_stages[u].param_bytes;
    EXPECT_GT(roomy->worker_memory_bytes[w], frozen + overhead);
    EXPECT_LT(roomy->worker_memory_bytes[w], frozen + 2 * overhead);
  }
  auto tight = PartitionFlux2Chunks(c, Workers(2, {roomy->worker_memory_bytes[0] - 1, int64_t{1} << 40}), 2);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_FALSE(tight->fits);
  EXPECT_NE(tight->message.find("worker 0"), std::string::npos) << tight->message;
  EXPECT_NE(RenderChunkPlan(c, *tight).find("does not fit"), std::string::npos);
}

TEST(ChunksTest, RejectsBadOptions) {
  const Flux2Config c = SixBlocks();
  EXPECT_FALSE(PartitionFlux2Chunks(c, Workers(2), 1).ok());
  auto too_many = PartitionFlux2Chunks(c, Workers(4), 2);  // 8 chunks of 6 blocks
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("only 6 blocks"), std::string::npos) << too_many.status();
  EXPECT_FALSE(PartitionFlux2Chunks(c, Workers(2, {1, 2, 3}), 2).ok());
}

TEST(ChunksTest, RenderNamesEachWorkersChunks) {
  auto plan = PartitionFlux2Chunks(SixBlocks(), Workers(2), 2);
  ASSERT_TRUE(plan.ok());
  const std::string text = RenderChunkPlan(SixBlocks(), *plan);
  EXPECT_NE(text.find("stage 0: embedders + double"), std::string::npos) << text;
  EXPECT_NE(text.find("+ head"), std::string::npos) << text;
}

}  // namespace
}  // namespace baton

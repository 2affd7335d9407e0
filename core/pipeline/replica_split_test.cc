#include "core/pipeline/replica_split.h"

#include <gtest/gtest.h>

#include <numeric>

namespace baton {
namespace {

TEST(ReplicaSplitTest, UnmeasuredReplicasShareEqually) {
  EXPECT_EQ(SplitBySpeed(4, {0.0, 0.0}), (std::vector<int>{2, 2}));
  EXPECT_EQ(SplitBySpeed(5, {0.0, 0.0}), (std::vector<int>{3, 2}));  // ties to the lower index
  EXPECT_EQ(SplitBySpeed(3, {0.0, 0.0, 0.0}), (std::vector<int>{1, 1, 1}));
}

TEST(ReplicaSplitTest, AReplicaTwiceAsFastGetsTwiceTheMicroBatches) {
  EXPECT_EQ(SplitBySpeed(6, {1.0, 2.0}), (std::vector<int>{4, 2}));
  EXPECT_EQ(SplitBySpeed(6, {2.0, 1.0}), (std::vector<int>{2, 4}));
  // The slowest replica's time is the least any split gives: 4 on the fast one (4 s), 2 on the slow one (4 s).
}

TEST(ReplicaSplitTest, AnUnmeasuredReplicaCountsAsTheMeanOfTheMeasuredOnes) {
  EXPECT_EQ(SplitBySpeed(4, {1.0, 0.0}), (std::vector<int>{2, 2}));
  EXPECT_EQ(SplitBySpeed(6, {1.0, 3.0, 0.0}), (std::vector<int>{4, 1, 1}));  // the third at 2 s
}

TEST(ReplicaSplitTest, AVerySlowReplicaGetsNone) { EXPECT_EQ(SplitBySpeed(4, {1.0, 10.0}), (std::vector<int>{4, 0})); }

TEST(ReplicaSplitTest, SplitsAlwaysSumToTheMicroBatches) {
  for (int m = 1; m <= 9; ++m) {
    for (const auto& speeds : std::vector<std::vector<double>>{{1.0, 1.3}, {0.2, 0.0, 0.7}, {5.0}}) {
      const std::vector<int> split = SplitBySpeed(m, speeds);
      EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), m);
    }
  }
}

TEST(ReplicaSplitTest, EvenSplitsAndFirstMicroBatches) {
  EXPECT_EQ(SplitEvenly(5, 2), (std::vector<int>{3, 2}));
  EXPECT_EQ(SplitEvenly(4, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(FirstMicroBatches({3, 0, 2}), (std::vector<int>{0, 3, 3}));
}

TEST(ReplicaSplitTest, SpeedsAreSmoothedPerMicroBatch) {
  ReplicaSpeeds speeds(2);
  speeds.Record(0, 2, 4.0);  // 2 s per micro-batch
  EXPECT_DOUBLE_EQ(speeds.seconds_per_micro_batch()[0], 2.0);
  EXPECT_DOUBLE_EQ(speeds.seconds_per_micro_batch()[1], 0.0);
  speeds.Record(0, 1, 1.0);  // half of 2 and half of 1
  EXPECT_DOUBLE_EQ(speeds.seconds_per_micro_batch()[0], 1.5);
  speeds.Record(1, 0, 3.0);  // ran nothing: nothing learned
  EXPECT_DOUBLE_EQ(speeds.seconds_per_micro_batch()[1], 0.0);
}

TEST(ReplicaSplitTest, ThePlanShowsTheLoraExchangeOnTheCoordinatorsLink) {
  Plan plan;
  plan.stages.resize(2);
  plan.stages[0].lora_params = 30'000'000;
  plan.stages[1].lora_params = 47'000'000;  // FLUX.2-dev's rank-16 all-linear adapters: ~77 M
  const std::string text = RenderReplicaLoad(plan, {2, 2});
  EXPECT_NE(text.find("replicas: 2 copies of this plan (4 workers)"), std::string::npos) << text;
  const std::string unequal = RenderReplicaLoad(plan, {1, 2});
  EXPECT_NE(unequal.find("replicas: 2 of 1+2 stages (3 workers)"), std::string::npos) << unequal;
  EXPECT_NE(unequal.find("carries 616.0 MB each way"), std::string::npos) << unequal;
  EXPECT_NE(text.find("send 308.0 MB of fp32 LoRA gradients"), std::string::npos) << text;
  EXPECT_NE(text.find("carries 616.0 MB each way per step (4.93 s at 1 Gbit/s, 0.493 s at 10 Gbit/s)"),
            std::string::npos)
      << text;
}

// With the stage-local optimizer each stage's link carries its own gradients through the ring allreduce: 2 (R - 1) / R
// of them each way, the busiest stage's figure shown.
TEST(ReplicaSplitTest, TheAllreduceExchangeShowsTheBusiestStagesLink) {
  Plan plan;
  plan.stages.resize(2);
  plan.stages[0].lora_params = 30'000'000;
  plan.stages[1].lora_params = 47'000'000;
  const std::string two = RenderReplicaLoad(plan, {2, 2}, /*allreduce=*/true);
  EXPECT_NE(two.find("busiest stage's link carries 188.0 MB each way per step (1.50 s at 1 Gbit/s"), std::string::npos)
      << two;
  const std::string four = RenderReplicaLoad(plan, {2, 2, 2, 2}, /*allreduce=*/true);
  EXPECT_NE(four.find("carries 282.0 MB each way"), std::string::npos) << four;
}

}  // namespace
}  // namespace baton

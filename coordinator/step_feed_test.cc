// The step feed over fake replicas (coordinator/testing/fake_replicas.h), without a process: a step's inputs
// prepared ahead are pushed to each replica's stages once and not fed again with the step; a step taken that was
// not the one prepared ahead (a rollback went back) is prepared again; nothing ahead, prepared now.
#include "coordinator/step_feed.h"

#include <gtest/gtest.h>

#include <vector>

#include "coordinator/testing/fake_replicas.h"
#include "stage_driver/testing/fake_pipeline.h"

namespace baton {
namespace {

constexpr int kFeedMicroBatches = 4;

int FeedInputsSent(FakeStageWorker& w) {
  int n = 0;
  for (const ReceivedEnvelope& e : w.pushes()) n += e.header.kind() == v1::EnvelopeHeader::INPUTS;
  return n;
}

struct FeedRig {
  std::unique_ptr<FakeReplicas> replicas;
  std::vector<int64_t> prepared;  // the steps prepare() was asked for, in order (the feed's thread or the caller's)
  absl::Mutex mu;

  StepFeed::Prepare Preparer() {
    return [this](int64_t step) -> absl::StatusOr<StepInputs> {
      absl::MutexLock lock(&mu);
      prepared.push_back(step);
      return FakePipeline::Inputs(kFeedMicroBatches);
    };
  }
  std::vector<int64_t> Prepared() {
    absl::MutexLock lock(&mu);
    return prepared;
  }
};

TEST(StepFeedTest, AStepPreparedAheadIsPushedToEachReplicaOnceAndNotFedAgain) {
  FeedRig f;
  auto started = FakeReplicas::Start(2, 2, kFeedMicroBatches, false);
  ASSERT_TRUE(started.ok()) << started.status();
  f.replicas = std::move(*started);
  StepFeed feed(f.Preparer(), f.replicas->set(), absl::Seconds(5));
  feed.Ahead(1);
  auto inputs = feed.Take(1);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(FeedInputsSent(f.replicas->worker(0)), 2) << "replica 0's stage 0: its 2 micro-batches, pushed ahead";
  EXPECT_EQ(FeedInputsSent(f.replicas->worker(2)), 2) << "replica 1's stage 0";
  auto out = f.replicas->set().Run(1, *inputs, f.replicas->Master());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(FeedInputsSent(f.replicas->worker(0)), 2) << "not fed again with the step";
  EXPECT_EQ(FeedInputsSent(f.replicas->worker(2)), 2);
  EXPECT_EQ(f.Prepared(), std::vector<int64_t>({1}));
}

TEST(StepFeedTest, AStepOtherThanTheOneAheadIsPreparedAgainAndFedWithTheStep) {
  FeedRig f;
  auto started = FakeReplicas::Start(1, 2, kFeedMicroBatches, false);
  ASSERT_TRUE(started.ok()) << started.status();
  f.replicas = std::move(*started);
  StepFeed feed(f.Preparer(), f.replicas->set(), absl::Seconds(5));
  auto first = feed.Take(0);  // nothing ahead: prepared now, pushed by nobody
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(FeedInputsSent(f.replicas->worker(0)), 0);
  feed.Ahead(5);
  auto inputs = feed.Take(3);  // a rollback went back to step 3
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(f.Prepared(), std::vector<int64_t>({0, 5, 3}));
  ASSERT_TRUE(f.replicas->set().Run(3, *inputs, f.replicas->Master()).ok());
  EXPECT_EQ(FeedInputsSent(f.replicas->worker(0)), kFeedMicroBatches + kFeedMicroBatches)
      << "step 5's early push, then step 3's data with the step";
}

}  // namespace
}  // namespace baton

// The coordinator's replica logic (ReplicaSet) over fake remote stage workers, in the test's process: a step dealt out
// to the replicas and summed as one pipeline's; a replica lost before, during or after its slice, its micro-batches
// dealt to the others and the replica back at a later step; every replica lost at once; a deterministic error; and
// the stage-local optimizer's restart of a step. tests/replicas_test.cc runs the same over real stage workers.
#include "coordinator/replica_set.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "coordinator/testing/fake_replicas.h"

namespace baton {
namespace {

// One pipeline's outputs of step `step` over `micro_batches`, by the fake's rule: each element of a stage's i-th
// gradient (step + 1 + i) per micro-batch, and micro-batch k's loss 0.5 + k.
void ExpectOnePipelines(const StepOutputs& out, int64_t step, int micro_batches, int stages) {
  ASSERT_EQ(static_cast<int>(out.grads.size()), stages);
  for (int s = 0; s < stages; ++s) {
    for (int i = 0; i < 2; ++i) {
      const std::string name = absl::StrCat("s", s, i == 0 ? ".a" : ".b");
      EXPECT_TRUE(at::equal(out.grads[s].at(name), at::full({4}, static_cast<float>((step + 1 + i) * micro_batches))))
          << name << ": " << out.grads[s].at(name);
    }
  }
  const auto& losses = out.summaries.back().losses();
  ASSERT_EQ(losses.size(), micro_batches);
  for (int k = 0; k < micro_batches; ++k) EXPECT_EQ(losses[k], 0.5f + static_cast<float>(k)) << "in step order";
}

// The plans worker `w` was given, as (first micro-batch, micro-batches, gradients).
std::vector<std::tuple<int, int, int>> Slices(FakeStageWorker& w) {
  std::vector<std::tuple<int, int, int>> out;
  for (const v1::StepPlan& plan : w.plans()) {
    out.emplace_back(plan.first_micro_batch(), static_cast<int>(plan.micro_batches()),
                     static_cast<int>(plan.gradients()));
  }
  return out;
}

TEST(ReplicaSetTest, TwoReplicasSplitAStepAndTheirGradientsSumToOnePipelines) {
  auto started = FakeReplicas::Start(2, 2, 4, false);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  auto out = f->Run(0, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectOnePipelines(*out, 0, 4, 2);
  EXPECT_EQ(out->replica_micro_batches, (std::vector<int>{2, 2}));
  for (int w = 0; w < 4; ++w) {
    const int first = w < 2 ? 0 : 2;
    EXPECT_EQ(Slices(f->worker(w)), (std::vector<std::tuple<int, int, int>>{{first, 2, v1::StepPlan::STREAM}}))
        << "worker " << w << ": its replica's slice, numbered step-wide for the dropout masks";
  }
  EXPECT_TRUE(f->recoveries().empty());
}

TEST(ReplicaSetTest, AReplicaLostBeforeItsSliceLeavesItToTheOtherAndRejoinsOnceBack) {
  auto started = FakeReplicas::Start(2, 2, 4, false);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  ASSERT_TRUE(f->Run(0, 4).ok());
  f->worker(2).ClearRecords();
  f->worker(2).Kill();  // replica 1's stage 0, between steps
  auto out = f->Run(1, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectOnePipelines(*out, 1, 4, 2);
  EXPECT_EQ(out->replica_micro_batches, (std::vector<int>{4, 0})) << "replica 0 ran replica 1's slice too";
  ASSERT_EQ(f->recoveries().size(), 1u);
  EXPECT_EQ(f->recoveries()[0].first, 2) << "step 2, 1-based";
  EXPECT_FALSE(f->set().Ready(1)) << "waited for at its address";
  EXPECT_EQ(f->set().Losses(1), 1);

  ASSERT_TRUE(f->worker(2).Restart().ok());
  f->set().SettleReplica(1);
  EXPECT_TRUE(f->set().Ready(1));
  const auto configures = f->worker(2).configures();  // since step 1
  ASSERT_EQ(configures.size(), 1u) << "configured by its recovery";
  EXPECT_EQ(configures[0].job_id(), "fake-pipeline");
  out = f->Run(2, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectOnePipelines(*out, 2, 4, 2);
  EXPECT_EQ(out->replica_micro_batches, (std::vector<int>{2, 2})) << "back in the split at the next step";
  EXPECT_EQ(Slices(f->worker(2)), (std::vector<std::tuple<int, int, int>>{{2, 2, 0}}));
}

TEST(ReplicaSetTest, AReplicaKilledDuringItsSliceIsLeftAndItsSliceRunByTheOther) {
  auto started = FakeReplicas::Start(2, 2, 4, false);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  f->worker(3).Play(FakeRun::kStallSilently);  // replica 1's last stage holds its slice in flight ...
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    f->worker(3).Kill();  // ... and dies with it
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto out = f->Run(0, 4);
  killer.join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
      << "not the 30 s RPC deadline";
  ExpectOnePipelines(*out, 0, 4, 2);
  EXPECT_EQ(out->replica_micro_batches, (std::vector<int>{4, 0}));
  ASSERT_EQ(f->recoveries().size(), 1u);
  EXPECT_EQ(f->recoveries()[0].first, 1);
  // Replica 0 ran the step's first half, then (reconfigured for a new generation) the lost half.
  EXPECT_EQ(Slices(f->worker(0)), (std::vector<std::tuple<int, int, int>>{{0, 2, 0}, {2, 2, 0}}));
  const auto configures = f->worker(0).configures();
  ASSERT_EQ(configures.size(), 2u);
  EXPECT_GT(configures[1].generation(), configures[0].generation());
  ASSERT_TRUE(f->worker(3).Restart().ok());
  f->set().SettleReplica(1);
  EXPECT_TRUE(f->set().Ready(1));
}

TEST(ReplicaSetTest, ADeterministicErrorFailsTheStepInsteadOfMovingIt) {
  auto started = FakeReplicas::Start(2, 2, 4, false);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  f->worker(1).Fail(absl::InvalidArgumentError("shape mismatch in block 3"));
  auto out = f->Run(0, 4);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_NE(out.status().message().find("shape mismatch in block 3"), std::string::npos) << out.status();
  EXPECT_TRUE(f->recoveries().empty()) << "another replica would fail the same way";
}

TEST(ReplicaSetTest, EveryReplicaLostAtOnceIsWaitedForAndTheStepRedone) {
  auto started = FakeReplicas::Start(2, 2, 4, false);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  f->worker(1).Kill();
  f->worker(3).Kill();
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(f->worker(1).Restart().ok());
    EXPECT_TRUE(f->worker(3).Restart().ok());
  });
  auto out = f->Run(0, 4);
  restart.join();
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectOnePipelines(*out, 0, 4, 2);
  EXPECT_EQ(f->recoveries().size(), 2u);
}

// The stage-local optimizer: the stages hold their sums (HOLD_NEW), and a replica given a lost slice after its own
// adds to its sum (HOLD_ADD).
TEST(ReplicaSetTest, UnderTheStageLocalOptimizerALostSliceIsAddedToTheHeldSumOfTheReplicaThatTakesIt) {
  auto started = FakeReplicas::Start(2, 2, 4, true);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  f->worker(1).Kill();  // replica 0's last stage: its recovery waits for it to answer again
  auto out = f->Run(0, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->replica_micro_batches, (std::vector<int>{0, 4}));
  for (int w : {2, 3}) {
    EXPECT_EQ(Slices(f->worker(w)),
              (std::vector<std::tuple<int, int, int>>{{2, 2, v1::StepPlan::HOLD_NEW}, {0, 2, v1::StepPlan::HOLD_ADD}}))
        << "worker " << w;
  }
}

// The allreduce exchange's restart (PeerExchange::Apply when a replica is lost in the reduction, after its slice
// counted): the replica is taken out, the step starts over on the others with a new held sum.
TEST(ReplicaSetTest, AStepRestartedAfterAReplicaWasLostInTheReductionStartsNewSumsOnTheOthers) {
  auto started = FakeReplicas::Start(2, 2, 4, true);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  ASSERT_TRUE(f->Run(0, 4).ok());
  f->worker(3).Kill();
  ASSERT_TRUE(f->set().TakeOut(1, 0, absl::UnavailableError("Reduce: connection reset")).ok());
  EXPECT_EQ(f->set().Losses(1), 1);
  ASSERT_TRUE(f->set().RestartStep(0).ok());
  auto out = f->Run(0, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->replica_micro_batches, (std::vector<int>{4, 0}));
  const auto slices = Slices(f->worker(0));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[1], (std::tuple<int, int, int>{0, 4, v1::StepPlan::HOLD_NEW})) << "a new sum, not added to";
  const auto configures = f->worker(0).configures();
  ASSERT_EQ(configures.size(), 2u) << "reconfigured for a new generation by the restart";
  EXPECT_GT(configures[1].generation(), configures[0].generation());
  EXPECT_EQ(f->recoveries(), (std::vector<std::pair<int64_t, int>>{{1, -1}}));
}

// With one replica a lost stage has no other replica to take its micro-batches: the warnings say the step runs again
// once the worker is back, and that it starts over -- not "the other replicas", not "1 replica(s)".
TEST(ReplicaSetTest, WithOneReplicaTheWarningsSayTheStepRunsAgain) {
  auto started = FakeReplicas::Start(1, 2, 4, true);
  ASSERT_TRUE(started.ok()) << started.status();
  FakeReplicas* f = started->get();
  ASSERT_TRUE(f->Run(0, 4).ok());
  f->worker(1).Kill();
  testing::internal::CaptureStderr();
  ASSERT_TRUE(f->set().TakeOut(0, 0, absl::UnavailableError("Reduce: connection reset")).ok());
  ASSERT_TRUE(f->worker(1).Restart().ok());
  ASSERT_TRUE(f->set().RestartStep(0).ok());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("step 1: Reduce: connection reset; the step runs again once its worker is back"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("step 1: starting over\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("other replicas"), std::string::npos) << log;
  EXPECT_EQ(log.find("replica(s)"), std::string::npos) << log;
}

}  // namespace
}  // namespace baton

// The pipeline over fake remote stage workers, without a process: its one recovery engine (for steps, passes and
// the work between them): a lost stage is waited for at its address, every stage is reconfigured for a new
// generation and the work redone with the same inputs; deterministic errors are not retried; the retries are
// bounded. And the early push it owns: used once, forgotten by a recovery or a reconfiguration.
#include "stage_driver/stage_pipeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "stage_driver/testing/fake_pipeline.h"

namespace baton {
namespace {

std::unique_ptr<FakePipeline> RecoveringPipeline(int retries = 3) {
  StageDriverOptions options = FakeDriverOptions();
  options.step_retries = retries;
  auto p = FakePipeline::Start(2, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(StagePipelineTest, RetryableFailuresAreTheOnesARecoveryCanMend) {
  EXPECT_TRUE(RetryableStepFailure(absl::UnavailableError("gone"), false));
  EXPECT_TRUE(RetryableStepFailure(absl::CancelledError("peer died"), false));
  EXPECT_TRUE(RetryableStepFailure(absl::DeadlineExceededError("stall"), false));
  EXPECT_TRUE(RetryableStepFailure(absl::AbortedError("a replica left"), false));
  EXPECT_TRUE(RetryableStepFailure(absl::FailedPreconditionError("RunStep before Configure"), false));
  EXPECT_FALSE(RetryableStepFailure(absl::FailedPreconditionError("another job"), false));
  EXPECT_FALSE(RetryableStepFailure(absl::InvalidArgumentError("bad shape"), false));
  EXPECT_FALSE(RetryableStepFailure(absl::DataLossError("state lost"), false));
  EXPECT_TRUE(RetryableStepFailure(absl::InvalidArgumentError("anything"), /*stage_died=*/true));
}

TEST(StagePipelineTest, AStageLostOnceIsReconfiguredAndTheStepRedoneWithItsData) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  const uint64_t generation = p->pipeline().generation();
  p->worker(1).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->pipeline().Prefetch(3, 0, in).ok());  // pushed early, while the step before ran
  auto out = p->pipeline().RunStep(3, p->Slice(2), in, p->Master());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(p->recoveries(), (std::vector<std::pair<int64_t, int>>{{4, -1}})) << "step 4 (1-based), no stage dead";
  EXPECT_EQ(p->pipeline().generation(), generation + 1);
  for (int i = 0; i < 2; ++i) {
    const auto configures = p->worker(i).configures();
    ASSERT_EQ(configures.size(), 2u) << "configured at the start and again by the recovery";
    EXPECT_EQ(configures[1].generation(), generation + 1);
    EXPECT_EQ(configures[1].job_id(), "fake-pipeline");
  }
  // The failing stage ran the step twice. The other's first RunStep may be cancelled by the abort before it arrives
  // (a loaded machine); its last one is the redo's either way.
  EXPECT_EQ(p->worker(1).plans().size(), 2u) << "the step ran twice";
  const auto healthy = p->worker(0).plans();
  ASSERT_FALSE(healthy.empty());
  EXPECT_LE(healthy.size(), 2u);
  EXPECT_EQ(healthy.back().step(), 3);
  // The redo sent the data again (the recovery emptied the stages' inboxes): the early push and the redo's.
  int inputs = 0;
  for (const ReceivedEnvelope& e : p->worker(0).pushes()) inputs += e.header.kind() == v1::EnvelopeHeader::INPUTS;
  EXPECT_EQ(inputs, 4);
  EXPECT_TRUE(at::equal(out->grads[1].at("s1.a"), at::full({4}, 4.0f * 2))) << "step 4's, over its 2 micro-batches";
}

TEST(StagePipelineTest, ADeterministicErrorIsNotRetried) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  p->worker(0).Fail(absl::InvalidArgumentError("TARGET has the wrong shape"));
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->pipeline().RunStep(0, p->Slice(2), in, p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
  EXPECT_TRUE(p->recoveries().empty());
  EXPECT_EQ(p->worker(0).configures().size(), 1u) << "no recovery reconfigured it";
}

TEST(StagePipelineTest, TheRetriesAreBoundedAndTheErrorSaysSo) {
  auto p = RecoveringPipeline(/*retries=*/2);
  ASSERT_NE(p, nullptr);
  p->worker(1).Fail(absl::UnavailableError("connection reset"), 5);
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->pipeline().RunStep(0, p->Slice(2), in, p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("step 1 failed 3 times, giving up (--step_retries 2)"), std::string::npos)
      << out.status();
  EXPECT_EQ(p->recoveries().size(), 2u);
}

TEST(StagePipelineTest, NoRetriesWithStepRetriesZero) {
  auto p = RecoveringPipeline(/*retries=*/0);
  ASSERT_NE(p, nullptr);
  p->worker(1).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->pipeline().RunStep(0, p->Slice(2), in, p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("recovery is off: --step_retries 0"), std::string::npos) << out.status();
}

TEST(StagePipelineTest, AStageKilledAndRestartedAtItsAddressIsWaitedForAndTheStepRedone) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  p->worker(1).Play(FakeRun::kStallSilently);  // the step is under way when the worker dies
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    p->worker(1).Kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // systemd's restart delay
    ASSERT_TRUE(p->worker(1).Restart().ok());
  });
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->pipeline().RunStep(0, p->Slice(2), in, p->Master());
  killer.join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(p->recoveries().size(), 1u);
  EXPECT_EQ(p->worker(1).configures().back().generation(), p->pipeline().generation());
}

TEST(StagePipelineTest, AStageThatNeverComesBackFailsTheStepNamingIt) {
  StageDriverOptions options;
  options.stall_timeout = absl::Seconds(1);
  options.worker_restart_timeout = absl::Seconds(2);
  auto p = FakePipeline::Start(2, options);
  ASSERT_TRUE(p.ok()) << p.status();
  (*p)->worker(1).Kill();
  StepInputs in = FakePipeline::Inputs(2);
  auto out = (*p)->pipeline().RunStep(0, (*p)->Slice(2), in, (*p)->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  EXPECT_NE(out.status().message().find("did not come back within 2s"), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find((*p)->worker(1).address()), std::string::npos) << out.status();
}

TEST(StagePipelineTest, AForwardPassIsRecoveredAndRedoneAsAStepIs) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  p->worker(0).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  auto outputs = p->pipeline().RunForwardPass(5, 2, in.shell, p->Master());
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->size(), 2u);
  EXPECT_EQ(p->recoveries(), (std::vector<std::pair<int64_t, int>>{{5, -1}})) << "the step the pass follows";
}

TEST(StagePipelineTest, WorkBetweenStepsIsRedoneAfterARecoveryUntilItFailsForGood) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  int calls = 0;
  absl::Status done = p->pipeline().RunBetweenSteps(4, "read-back (after step 4)", [&]() -> absl::Status {
    return ++calls == 1 ? absl::UnavailableError("stage 1: GetLora: connection reset") : absl::OkStatus();
  });
  EXPECT_TRUE(done.ok()) << done;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(p->recoveries().size(), 1u);
  // What a recovery cannot mend (the state lost with a restarted stage) ends the retries at once.
  calls = 0;
  done = p->pipeline().RunBetweenSteps(4, "read-back (after step 4)", [&]() -> absl::Status {
    return ++calls == 1 ? absl::UnavailableError("gone") : absl::DataLossError("the state is lost");
  });
  EXPECT_TRUE(absl::IsDataLoss(done)) << done;
  EXPECT_EQ(calls, 2);
}

// A guard that passes `ok` attempts, then fails with DATA_LOSS.
class CountingGuard : public SliceGuard {
 public:
  explicit CountingGuard(int ok) : ok_(ok) {}
  absl::Status BeforeSlice(int replica) override {
    replicas_.push_back(replica);
    return static_cast<int>(replicas_.size()) <= ok_ ? absl::OkStatus() : absl::DataLossError("lost");
  }
  const std::vector<int>& replicas() const { return replicas_; }

 private:
  int ok_;
  std::vector<int> replicas_;
};

TEST(StagePipelineTest, TheGuardRunsBeforeEveryAttemptAndItsFailureEndsTheStep) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  CountingGuard guard(2);
  p->worker(1).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->pipeline().RunStep(0, p->Slice(2), in, p->Master(), &guard).ok());
  EXPECT_EQ(guard.replicas(), std::vector<int>({0, 0})) << "the first attempt and its redo, on replica 0";
  StepInputs again = FakePipeline::Inputs(2);
  auto out = p->pipeline().RunStep(1, p->Slice(2), again, p->Master(), &guard);
  EXPECT_TRUE(absl::IsDataLoss(out.status())) << out.status();
}

int Sent(const FakeStageWorker& w, v1::EnvelopeHeader::Kind kind) {
  int n = 0;
  for (const ReceivedEnvelope& e : w.pushes()) n += e.header.kind() == kind;
  return n;
}

TEST(StagePipelineTest, AnEarlyPushFeedsItsStepOnceAndOnlyTheSliceItWas) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->pipeline().Prefetch(0, 0, in).ok());
  ASSERT_TRUE(p->pipeline().RunStep(0, p->Slice(2), in, p->Master()).ok());
  EXPECT_EQ(Sent(p->worker(0), v1::EnvelopeHeader::INPUTS), 2) << "the step's data went once, early";
  EXPECT_EQ(Sent(p->worker(1), v1::EnvelopeHeader::TARGET), 2);
  // Pushed as another slice of its step (micro-batches from 4): step 1 as micro-batches 0.. is fed with it.
  ASSERT_TRUE(p->pipeline().Prefetch(1, 4, in).ok());
  ASSERT_TRUE(p->pipeline().RunStep(1, p->Slice(2), in, p->Master()).ok());
  EXPECT_EQ(Sent(p->worker(0), v1::EnvelopeHeader::INPUTS), 2 + 2 + 2);
  // A step that was not pushed early is fed with its data.
  ASSERT_TRUE(p->pipeline().RunStep(2, p->Slice(2), in, p->Master()).ok());
  EXPECT_EQ(Sent(p->worker(0), v1::EnvelopeHeader::INPUTS), 6 + 2);
}

TEST(StagePipelineTest, AReconfigurationForgetsTheEarlyPushAndTheStepFeedsItsDataAgain) {
  auto p = RecoveringPipeline();
  ASSERT_NE(p, nullptr);
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->pipeline().Prefetch(0, 0, in).ok());
  const int losses = p->pipeline().Losses();
  ASSERT_TRUE(p->pipeline().Reconfigure().ok());  // empties the inboxes
  auto out = p->pipeline().RunStep(0, p->Slice(2), in, p->Master());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Sent(p->worker(0), v1::EnvelopeHeader::INPUTS), 4) << "pushed early, then again with the step";
  EXPECT_EQ(p->pipeline().Losses(), losses) << "a reconfiguration is no loss";
}

}  // namespace
}  // namespace baton

// The one recovery engine (StepExecutor::WithRecovery, for steps, passes and the work between them) over fake
// remote stage workers, without a process: a lost stage is waited for at its address, every stage is reconfigured
// for a new generation and the work redone with the same inputs; deterministic errors are not retried; the retries
// are bounded.
#include "stage_driver/step_executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "stage_driver/testing/fake_pipeline.h"

namespace baton {
namespace {

std::unique_ptr<FakePipeline> ExecutorPipeline(int retries = 3) {
  StageDriverOptions options = FakeDriverOptions();
  options.step_retries = retries;
  auto p = FakePipeline::Start(2, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(StepExecutorTest, RetryableFailuresAreTheOnesARecoveryCanMend) {
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

TEST(StepExecutorTest, AStageLostOnceIsReconfiguredAndTheStepRedoneWithItsData) {
  auto p = ExecutorPipeline();
  ASSERT_NE(p, nullptr);
  const uint64_t generation = p->fleet().generation;
  p->worker(1).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->fleet().PushData(3, in).ok());  // pushed early, while the step before ran
  in.data_pushed = true;
  int aborts = 0;
  auto out = p->executor().Run(3, p->Slice(2), in, p->Master(), nullptr, [&] { ++aborts; });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(aborts, 1);
  EXPECT_EQ(p->recoveries(), (std::vector<std::pair<int64_t, int>>{{4, -1}})) << "step 4 (1-based), no stage dead";
  EXPECT_EQ(p->fleet().generation, generation + 1);
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
  EXPECT_FALSE(in.data_pushed);
  EXPECT_TRUE(at::equal(out->grads[1].at("s1.a"), at::full({4}, 4.0f * 2))) << "step 4's, over its 2 micro-batches";
}

TEST(StepExecutorTest, ADeterministicErrorIsNotRetried) {
  auto p = ExecutorPipeline();
  ASSERT_NE(p, nullptr);
  p->worker(0).Fail(absl::InvalidArgumentError("TARGET has the wrong shape"));
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->executor().Run(0, p->Slice(2), in, p->Master(), nullptr, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
  EXPECT_TRUE(p->recoveries().empty());
  EXPECT_EQ(p->worker(0).configures().size(), 1u) << "no recovery reconfigured it";
}

TEST(StepExecutorTest, TheRetriesAreBoundedAndTheErrorSaysSo) {
  auto p = ExecutorPipeline(/*retries=*/2);
  ASSERT_NE(p, nullptr);
  p->worker(1).Fail(absl::UnavailableError("connection reset"), 5);
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->executor().Run(0, p->Slice(2), in, p->Master(), nullptr, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("step 1 failed 3 times, giving up (--step_retries 2)"), std::string::npos)
      << out.status();
  EXPECT_EQ(p->recoveries().size(), 2u);
}

TEST(StepExecutorTest, NoRetriesWithStepRetriesZero) {
  auto p = ExecutorPipeline(/*retries=*/0);
  ASSERT_NE(p, nullptr);
  p->worker(1).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->executor().Run(0, p->Slice(2), in, p->Master(), nullptr, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("recovery is off: --step_retries 0"), std::string::npos) << out.status();
}

TEST(StepExecutorTest, AStageKilledAndRestartedAtItsAddressIsWaitedForAndTheStepRedone) {
  auto p = ExecutorPipeline();
  ASSERT_NE(p, nullptr);
  p->worker(1).Play(FakeRun::kStallSilently);  // the step is under way when the worker dies
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    p->worker(1).Kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // systemd's restart delay
    ASSERT_TRUE(p->worker(1).Restart().ok());
  });
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->executor().Run(0, p->Slice(2), in, p->Master(), nullptr, nullptr);
  killer.join();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(p->recoveries().size(), 1u);
  EXPECT_EQ(p->worker(1).configures().back().generation(), p->fleet().generation);
}

TEST(StepExecutorTest, AStageThatNeverComesBackFailsTheStepNamingIt) {
  StageDriverOptions options;
  options.stall_timeout = absl::Seconds(1);
  options.worker_restart_timeout = absl::Seconds(2);
  auto p = FakePipeline::Start(2, options);
  ASSERT_TRUE(p.ok()) << p.status();
  (*p)->worker(1).Kill();
  StepInputs in = FakePipeline::Inputs(2);
  auto out = (*p)->executor().Run(0, (*p)->Slice(2), in, (*p)->Master(), nullptr, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  EXPECT_NE(out.status().message().find("did not come back within 2s"), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find((*p)->worker(1).address()), std::string::npos) << out.status();
}

TEST(StepExecutorTest, AForwardPassIsRecoveredAndRedoneAsAStepIs) {
  auto p = ExecutorPipeline();
  ASSERT_NE(p, nullptr);
  p->worker(0).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  auto outputs = p->executor().RunForwardPass(5, 2, in.shell, p->Master());
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->size(), 2u);
  EXPECT_EQ(p->recoveries(), (std::vector<std::pair<int64_t, int>>{{5, -1}})) << "the step the pass follows";
}

TEST(StepExecutorTest, WorkBetweenStepsIsRedoneAfterARecoveryUntilItFailsForGood) {
  auto p = ExecutorPipeline();
  ASSERT_NE(p, nullptr);
  int calls = 0;
  absl::Status done = p->executor().RunBetweenSteps(4, "read-back (after step 4)", [&]() -> absl::Status {
    return ++calls == 1 ? absl::UnavailableError("stage 1: GetLora: connection reset") : absl::OkStatus();
  });
  EXPECT_TRUE(done.ok()) << done;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(p->recoveries().size(), 1u);
  // What a recovery cannot mend (the state lost with a restarted stage) ends the retries at once.
  calls = 0;
  done = p->executor().RunBetweenSteps(4, "read-back (after step 4)", [&]() -> absl::Status {
    return ++calls == 1 ? absl::UnavailableError("gone") : absl::DataLossError("the state is lost");
  });
  EXPECT_TRUE(absl::IsDataLoss(done)) << done;
  EXPECT_EQ(calls, 2);
}

TEST(StepExecutorTest, BeforeAttemptRunsBeforeEveryAttemptAndItsFailureEndsTheStep) {
  auto p = ExecutorPipeline();
  ASSERT_NE(p, nullptr);
  int attempts = 0;
  p->executor().set_before_attempt([&] { return ++attempts < 3 ? absl::OkStatus() : absl::DataLossError("lost"); });
  p->worker(1).Fail(absl::UnavailableError("connection reset"));
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->executor().Run(0, p->Slice(2), in, p->Master(), nullptr, nullptr).ok());
  EXPECT_EQ(attempts, 2) << "the first attempt and its redo";
  StepInputs again = FakePipeline::Inputs(2);
  auto out = p->executor().Run(1, p->Slice(2), again, p->Master(), nullptr, nullptr);
  EXPECT_TRUE(absl::IsDataLoss(out.status())) << out.status();
}

}  // namespace
}  // namespace baton

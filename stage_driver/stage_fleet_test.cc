// The fleet's step and pass over fake stage workers (no process): what each stage is sent and in which order, the
// step's slice in its plan, and each way a stage can fail a step -- an error, silence, waiting for data it was sent,
// a reply without a summary, a gradient that does not assemble -- named within the stall timeout.
#include "stage_driver/stage_fleet.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "stage_driver/testing/fake_pipeline.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = v1::EnvelopeHeader;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::unique_ptr<FakePipeline> FleetPipeline(int stages, absl::Duration stall = absl::Seconds(15),
                                            FleetSettings settings = {}) {
  StageDriverOptions options;
  options.stall_timeout = stall;
  options.rpc_timeout = absl::Seconds(30);
  auto p = FakePipeline::Start(stages, options, std::move(settings));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

std::vector<int> Kinds(const FakeStageWorker& w) {
  std::vector<int> kinds;
  for (const ReceivedEnvelope& e : w.pushes()) kinds.push_back(e.header.kind());
  return kinds;
}

int Count(const std::vector<int>& kinds, int kind) {
  return static_cast<int>(std::count(kinds.begin(), kinds.end(), kind));
}

TEST(StageFleetTest, AStepSendsEachStageWhatItNeedsAndReturnsEveryStagesGradients) {
  auto p = FleetPipeline(2);
  ASSERT_NE(p, nullptr);
  StepInputs in = FakePipeline::Inputs(2);
  auto out = p->fleet().RunStep(4, p->Slice(2), in, p->Master());
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 2; ++i) {
    const std::vector<int> kinds = Kinds(p->worker(i));
    // The RoPE tables (one key for both micro-batches) before the adapters: a stage looks them up only after.
    ASSERT_FALSE(kinds.empty());
    EXPECT_EQ(kinds.front(), Kind::ROPE) << "stage " << i;
    EXPECT_EQ(Count(kinds, Kind::ROPE), 1) << "one key, sent once";
    EXPECT_EQ(Count(kinds, Kind::LORA_WEIGHTS), 1);
    EXPECT_EQ(Count(kinds, Kind::CONSTANTS), 2) << "one per micro-batch";
    EXPECT_EQ(Count(kinds, Kind::INPUTS), i == 0 ? 2 : 0) << "inputs go to stage 0 only";
    EXPECT_EQ(Count(kinds, Kind::TARGET), i == 1 ? 2 : 0) << "targets go to the last stage only";
    for (const ReceivedEnvelope& e : p->worker(i).pushes()) {
      EXPECT_EQ(e.header.job_id(), "fake-pipeline");
      EXPECT_EQ(e.header.sender(), "stage_driver") << "the driving process names itself";
      EXPECT_EQ(e.header.generation(), p->fleet().generation());
    }
    // Gradients: each of its names, every element (step + 1 + the name's index) x 2 micro-batches (the fake's rule).
    EXPECT_EQ(out->grads[i].size(), 2u);
    EXPECT_TRUE(at::equal(out->grads[i].at(absl::StrCat("s", i, ".b")), at::full({4}, (4 + 1 + 1.0f) * 2)));
  }
  EXPECT_EQ(out->summaries[1].losses_size(), 2);
}

TEST(StageFleetTest, ThePlanCarriesTheSliceItWasGiven) {
  FleetSettings settings;
  settings.loss_scale = 0.125f;
  auto p = FleetPipeline(2, absl::Seconds(15), settings);
  ASSERT_NE(p, nullptr);
  StepSlice slice = p->Slice(3);
  slice.first_micro_batch = 5;
  slice.gradients = v1::StepPlan::HOLD_ADD;
  slice.reduce_when_held = true;
  ASSERT_TRUE(p->fleet().RunStep(7, slice, FakePipeline::Inputs(3), p->Master()).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(p->worker(i).plans().size(), 1u);
    const v1::StepPlan plan = p->worker(i).plans()[0];
    EXPECT_EQ(plan.step(), 7);
    EXPECT_EQ(plan.job_id(), "fake-pipeline");
    EXPECT_EQ(plan.micro_batches(), 3);
    EXPECT_EQ(plan.first_micro_batch(), 5);
    EXPECT_EQ(plan.gradients(), v1::StepPlan::HOLD_ADD);
    EXPECT_TRUE(plan.reduce_when_held());
    EXPECT_FLOAT_EQ(plan.loss_scale(), 0.125f);
    ASSERT_EQ(plan.actions_size(), static_cast<int>(slice.schedule.per_stage[i].size()));
    for (int k = 0; k < plan.actions_size(); ++k) {
      EXPECT_EQ(plan.actions(k).micro_batch(), slice.schedule.per_stage[i][k].micro_batch);
    }
  }
}

TEST(StageFleetTest, DataPushedEarlyIsNotSentAgainAndTablesTravelOncePerKey) {
  auto p = FleetPipeline(2);
  ASSERT_NE(p, nullptr);
  StepInputs in = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->fleet().RunStep(0, p->Slice(2), in, p->Master()).ok());
  p->worker(0).ClearRecords();
  StepInputs next = FakePipeline::Inputs(2);
  ASSERT_TRUE(p->fleet().PushData(1, next).ok());
  ASSERT_TRUE(p->fleet().RunStep(1, p->Slice(2), next, p->Master(), /*feed_data=*/false).ok());
  const std::vector<int> kinds = Kinds(p->worker(0));
  EXPECT_EQ(Count(kinds, Kind::CONSTANTS), 2) << "pushed early once, not again at the step";
  EXPECT_EQ(Count(kinds, Kind::INPUTS), 2);
  EXPECT_EQ(Count(kinds, Kind::ROPE), 0) << "the stage holds this key's tables from step 0";
  EXPECT_EQ(Count(kinds, Kind::LORA_WEIGHTS), 1) << "the adapters travel at every step";
}

TEST(StageFleetTest, StagesThatOwnTheirAdaptersAreSentNone) {
  FleetSettings settings;
  settings.own_adapters = true;
  auto p = FleetPipeline(2, absl::Seconds(15), settings);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->fleet().RunStep(0, p->Slice(2), FakePipeline::Inputs(2), {}).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Count(Kinds(p->worker(i)), Kind::LORA_WEIGHTS), 0);
    EXPECT_TRUE(p->worker(i).plans()[0].own_adapters());
  }
}

TEST(StageFleetTest, AStageThatFailsFailsTheStepNamingItAndTheOthersAreCancelled) {
  auto p = FleetPipeline(2);
  ASSERT_NE(p, nullptr);
  p->worker(0).Play(FakeRun::kStallSilently);  // would hang the step if nobody cancelled it
  p->worker(1).Fail(absl::InternalError("the stage's own error"));
  const auto t0 = Clock::now();
  auto out = p->fleet().RunStep(2, p->Slice(2), FakePipeline::Inputs(2), p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_LT(SecondsSince(t0), 5.0);
  EXPECT_NE(out.status().message().find("stage 1"), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find("the stage's own error"), std::string::npos) << out.status();
  // Stage 0's step, if the failure did not stop it before it began, was cancelled: nothing is left hanging.
  auto hanging = [&] { return static_cast<int>(p->worker(0).plans().size()) - p->worker(0).cancelled_runs(); };
  for (int i = 0; i < 150 && hanging() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(hanging(), 0) << "stage 0's step was cancelled";
}

TEST(StageFleetTest, ASilentStageIsAStallNamedWithinTheStallTimeout) {
  auto p = FleetPipeline(2, absl::Seconds(1));
  ASSERT_NE(p, nullptr);
  p->worker(1).Play(FakeRun::kStallSilently);
  const auto t0 = Clock::now();
  auto out = p->fleet().RunStep(0, p->Slice(2), FakePipeline::Inputs(2), p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_LT(SecondsSince(t0), 6.0) << "a 1 s stall timeout, not the 30 s RPC deadline";
  EXPECT_EQ(p->fleet().last_stall().stage, 1);
  EXPECT_NE(p->fleet().last_stall().message.find("no progress heartbeat"), std::string::npos)
      << p->fleet().last_stall().message;
}

TEST(StageFleetTest, AStageWaitingForDataItWasSentIsAStallNotAWaitForTheDeadline) {
  auto p = FleetPipeline(2, absl::Seconds(1));
  ASSERT_NE(p, nullptr);
  p->worker(0).Play(FakeRun::kWaitForData);
  const auto t0 = Clock::now();
  auto out = p->fleet().RunStep(0, p->Slice(2), FakePipeline::Inputs(2), p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_LT(SecondsSince(t0), 6.0);
  EXPECT_NE(p->fleet().last_stall().message.find("though the stage_driver sent it everything: the data was lost"),
            std::string::npos)
      << p->fleet().last_stall().message;
}

TEST(StageFleetTest, AReplyWithoutASummaryOrWithAGradientThatDoesNotAssembleFailsTheStep) {
  auto p = FleetPipeline(2);
  ASSERT_NE(p, nullptr);
  p->worker(1).Play(FakeRun::kNoSummary);
  auto out = p->fleet().RunStep(0, p->Slice(2), FakePipeline::Inputs(2), p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("without a summary"), std::string::npos) << out.status();
  // Worker 1 again: its step-0 reply has been read, so this fault is the next step's. (Worker 0's step-0 RunStep may
  // reach it only after the cancelled step returned, and would take a fault queued now.)
  p->worker(1).Play(FakeRun::kBadChunk);
  out = p->fleet().RunStep(1, p->Slice(2), FakePipeline::Inputs(2), p->Master());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(out.status()) || absl::IsDataLoss(out.status())) << out.status();
  // The stages answer again: the next step runs.
  EXPECT_TRUE(p->fleet().RunStep(2, p->Slice(2), FakePipeline::Inputs(2), p->Master()).ok());
}

TEST(StageFleetTest, AForwardPassReturnsTheLastStagesOutputsAndNeverMixesWithASteps) {
  auto p = FleetPipeline(2);
  ASSERT_NE(p, nullptr);
  StepInputs in = FakePipeline::Inputs(3);
  auto outputs = p->fleet().RunForwardPass(6, 9, in.shell, p->Master());
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 3u);
  EXPECT_TRUE(at::equal((*outputs)[2], at::full({2}, 2.0f)));
  for (int i = 0; i < 2; ++i) {
    for (const ReceivedEnvelope& e : p->worker(i).pushes()) EXPECT_EQ(e.header.pass(), 9u) << "tagged with the pass";
    const v1::StepPlan plan = p->worker(i).plans()[0];
    EXPECT_EQ(plan.pass(), 9u);
    for (const v1::Action& a : plan.actions()) EXPECT_EQ(a.type(), v1::Action::FORWARD);
    EXPECT_EQ(Count(Kinds(p->worker(i)), Kind::TARGET), 0) << "a pass has no loss";
  }
}

// A call without heartbeats (the stage-local optimizer's Reduce, a read-back) that hangs is said as an outage, as a
// silent step is; back once it answers, left to the recovery when it failed for want of the stage.
TEST(StageFleetTest, ACallWithoutHeartbeatsThatHangsIsSaidAsTheStagesOutage) {
  auto p = FleetPipeline(2, absl::Seconds(1));
  ASSERT_NE(p, nullptr);
  absl::Mutex mu;
  std::vector<StageOutage> said;
  p->fleet().outages().Configure(0, "", absl::Seconds(1), [&](const StageOutage& o) {
    absl::MutexLock lock(&mu);
    if (o.notice) said.push_back(o);
  });
  // Stage 1's call takes 1.2 s and ends with `result`; stage 0's returns at once.
  auto slow_one = [](absl::Status result) {
    return [result](StageClient&, int stage) {
      if (stage == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      return stage == 1 ? result : absl::OkStatus();
    };
  };
  std::vector<absl::Status> done =
      p->fleet().CallEach("step 3's gradient sum waits for it", slow_one(absl::OkStatus()));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].ok() && done[1].ok());
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(said.size(), 2u);
    EXPECT_EQ(said[0].worker, 1);
    EXPECT_NE(said[0].message.find("stage 1 ("), std::string::npos) << said[0].message;
    EXPECT_NE(said[0].message.find("step 3's gradient sum waits for it"), std::string::npos) << said[0].message;
    EXPECT_TRUE(said[1].over) << "back once it answered";
    said.clear();
  }
  done = p->fleet().CallEach("the read-back waits for it", slow_one(absl::UnavailableError("gone")));
  EXPECT_TRUE(absl::IsUnavailable(done[1])) << done[1];
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(said.size(), 1u);
    EXPECT_FALSE(said[0].over) << "a call that failed for want of the stage leaves the outage open for the recovery";
  }
  EXPECT_TRUE(p->fleet().outages().Open(1));
  p->fleet().outages().AnsweredAll();
  {
    absl::MutexLock lock(&mu);
    said.clear();
  }
  done = p->fleet().CallEach("nothing", [](StageClient&, int) { return absl::OkStatus(); });
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(said.empty()) << "a quick call says nothing";
}

}  // namespace
}  // namespace baton

// One stage's client against a fake stage worker (no process): its calls, what it counts, what it hears while a step
// runs, and how a call that hangs ends.
#include "stage_driver/stage_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "rpc/tls.h"
#include "stage_driver/testing/fake_stage_worker.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<FakeStageWorker> Worker() {
  auto w = FakeStageWorker::Start({"a", "b"});
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

v1::StepPlan StepPlanOf(int64_t step, int micro_batches) {
  v1::StepPlan plan;
  plan.set_job_id("job");
  plan.set_step(step);
  plan.set_micro_batches(micro_batches);
  return plan;
}

TEST(StageClientTest, AStepReturnsTheGradientsAndSummaryAndItsBytesAreCountedByKind) {
  ClearProcessSecurity();
  auto w = Worker();
  ASSERT_NE(w, nullptr);
  StageClient client(3, w->address(), absl::Seconds(10));
  auto traffic = std::make_shared<LinkTraffic>();
  client.set_traffic(traffic);
  ASSERT_TRUE(client.WaitReady(absl::Seconds(5), [] { return false; }).ok());
  EXPECT_EQ(client.name(), absl::StrCat("stage 3 (", w->address(), ")"));
  TensorMap grads;
  auto summary = client.RunStep(StepPlanOf(2, 3), &grads);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->step(), 2);
  EXPECT_EQ(summary->losses_size(), 3);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_TRUE(at::equal(grads.at("a"), at::full({4}, 3.0f * 3))) << "(step 2 + 1) per micro-batch, 3 of them";
  TrafficBytes bytes;
  bytes += *traffic;
  EXPECT_GT(bytes.adapters, 2 * 4 * sizeof(float)) << "the gradients count as adapter bytes";
  EXPECT_GT(bytes.control, 0u) << "the plan and summary";
  EXPECT_GT(bytes.heartbeats, 0u);
}

TEST(StageClientTest, TheStateItLoadsNamesTheDrivingProcessAsItsSender) {
  auto w = Worker();
  ASSERT_NE(w, nullptr);
  StageClient client(0, w->address(), absl::Seconds(10));
  client.set_sender("baton_sample");
  ASSERT_TRUE(client.LoadState("job", {{"a", at::ones({4})}}).ok());
  ASSERT_EQ(w->pushes().size(), 1u);
  const ReceivedEnvelope e = w->pushes()[0];
  EXPECT_EQ(e.header.sender(), "baton_sample");
  EXPECT_EQ(e.header.kind(), v1::EnvelopeHeader::LORA_STATE);
  EXPECT_EQ(e.header.job_id(), "job");
  EXPECT_TRUE(at::equal(e.tensors.at("a"), at::ones({4})));
}

TEST(StageClientTest, GetLoraReturnsEveryAdapterTheStageHolds) {
  auto w = Worker();
  ASSERT_NE(w, nullptr);
  StageClient client(0, w->address(), absl::Seconds(10));
  auto lora = client.GetLora("job");
  ASSERT_TRUE(lora.ok()) << lora.status();
  EXPECT_EQ(lora->size(), 2u);
  EXPECT_TRUE(at::equal(lora->at("b"), at::zeros({4})));
}

TEST(StageClientTest, CancelEndsAStepThatHangsAndRearmLetsTheNextOneRun) {
  auto w = Worker();
  ASSERT_NE(w, nullptr);
  w->Play(FakeRun::kStallSilently);
  StageClient client(1, w->address(), absl::Seconds(60));
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    client.Cancel();
  });
  const auto t0 = Clock::now();
  TensorMap grads;
  auto summary = client.RunStep(StepPlanOf(0, 1), &grads);
  canceller.join();
  EXPECT_FALSE(summary.ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0) << "not the 60 s deadline";
  EXPECT_FALSE(client.RunStep(StepPlanOf(1, 1), &grads).ok()) << "cancelled until re-armed";
  client.Rearm();
  EXPECT_TRUE(client.RunStep(StepPlanOf(1, 1), &grads).ok());
}

TEST(StageClientTest, HeartbeatsSayWhatTheStageIsOnWhileItWaits) {
  auto w = Worker();
  ASSERT_NE(w, nullptr);
  w->Play(FakeRun::kWaitForData);
  StageClient client(1, w->address(), absl::Seconds(60));
  std::thread watcher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const v1::StageHeartbeat beat = client.LastHeartbeat();
    EXPECT_EQ(beat.waiting_on(), -1);
    EXPECT_NE(beat.activity().find("waiting for INPUTS of step 5"), std::string::npos) << beat.activity();
    EXPECT_LT(client.SilentSeconds(), 0.6) << "it beats every 0.2 s";
    client.Cancel();
  });
  TensorMap grads;
  EXPECT_FALSE(client.RunStep(StepPlanOf(5, 1), &grads).ok());
  watcher.join();
  for (int i = 0; i < 100 && w->cancelled_runs() == 0; ++i) {  // the server notices within its 50 ms poll
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(w->cancelled_runs(), 1) << "the stage saw its step cancelled";
}

TEST(StageClientTest, AServerThatIsGoneIsUnavailableAndNamed) {
  auto w = Worker();
  ASSERT_NE(w, nullptr);
  const std::string address = w->address();
  w->Kill();
  StageClient client(2, address, absl::Seconds(5));
  auto lora = client.GetLora("job");
  ASSERT_FALSE(lora.ok());
  EXPECT_TRUE(absl::IsUnavailable(lora.status())) << lora.status();
  EXPECT_NE(lora.status().message().find("stage 2 (" + address + ")"), std::string::npos) << lora.status();
  const absl::Status ready = client.WaitReady(absl::Milliseconds(500), [] { return false; });
  EXPECT_FALSE(ready.ok());
}

}  // namespace
}  // namespace baton

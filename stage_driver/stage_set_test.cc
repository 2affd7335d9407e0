// StageSet over fake remote workers, without a process: what each stage is configured with (its slice, its
// neighbours, the pipeline's id and the run's generation), a refused Configure named by its stage, and the recovery
// of a remote worker that comes back at its address, or does not within worker_restart_timeout.
#include "stage_driver/stage_set.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "stage_driver/testing/fake_pipeline.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<FakePipeline> SetPipeline(int stages, absl::Duration restart_timeout = absl::Seconds(10)) {
  StageDriverOptions options = FakeDriverOptions();
  options.worker_restart_timeout = restart_timeout;
  auto p = FakePipeline::Start(stages, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(StageSetTest, EachStageIsConfiguredWithItsSliceItsNeighboursAndTheRunsGeneration) {
  auto p = SetPipeline(3);
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 3; ++i) {
    const auto configures = p->worker(i).configures();
    ASSERT_EQ(configures.size(), 1u);
    const v1::ConfigureRequest& req = configures[0];
    EXPECT_EQ(req.job_id(), "fake-pipeline");
    EXPECT_EQ(req.config_hash(), "fake-pipeline");
    EXPECT_EQ(req.job_name(), "fake");
    EXPECT_EQ(req.stage_index(), i);
    EXPECT_EQ(req.num_stages(), 3);
    EXPECT_EQ(req.block_begin(), i);
    EXPECT_EQ(req.block_end(), i + 1);
    EXPECT_EQ(req.has_embedders(), i == 0);
    EXPECT_EQ(req.has_head(), i == 2);
    EXPECT_EQ(req.prev_address(), i > 0 ? p->worker(i - 1).address() : "");
    EXPECT_EQ(req.next_address(), i < 2 ? p->worker(i + 1).address() : "");
    EXPECT_EQ(req.generation(), p->fleet().generation());
    EXPECT_EQ(req.run_id(), p->fleet().run_id());
    EXPECT_EQ(p->fleet().params(i), (std::vector<std::string>{absl::StrCat("s", i, ".a"), absl::StrCat("s", i, ".b")}))
        << "the fleet learns each stage's adapters from its answer";
  }
}

TEST(StageSetTest, AConfigureAStageRefusesFailsNamingTheStageAndWhy) {
  auto p = SetPipeline(3);
  ASSERT_NE(p, nullptr);
  p->worker(2).FailCall("Configure", absl::InvalidArgumentError("no such model file"));
  absl::Status s = p->stages().Configure();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("no such model file"), std::string::npos) << s;
  EXPECT_NE(s.message().find(p->worker(2).address()), std::string::npos) << "names the stage: " << s;
}

TEST(StageSetTest, ARemoteStageThatComesBackIsWaitedForAndEveryStageReconfiguredForANewGeneration) {
  auto p = SetPipeline(2);
  ASSERT_NE(p, nullptr);
  const uint64_t generation = p->fleet().generation();
  p->fleet().rope(0).Add("grid-2x2");
  p->worker(1).Kill();
  std::thread restart([&] {  // after the recovery's 2 s health check gave up on it: then it is waited for
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_TRUE(p->worker(1).Restart().ok());
  });
  absl::StatusOr<std::vector<int>> lost = p->stages().Recover(-1);
  restart.join();
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(*lost, std::vector<int>{1}) << "found by its failed health check";
  EXPECT_EQ(p->fleet().generation(), generation + 1);
  for (int i = 0; i < 2; ++i) {
    const auto configures = p->worker(i).configures();
    ASSERT_EQ(configures.size(), 2u) << "the survivor too: it drops the aborted step's data";
    EXPECT_EQ(configures[1].generation(), generation + 1);
  }
  EXPECT_FALSE(p->fleet().rope(0).Has("grid-2x2")) << "a Configure empties the stages' RoPE caches";
  EXPECT_FALSE(p->fleet().outages().Open(1)) << "its outage ended when it answered";
}

TEST(StageSetTest, ARemoteStageThatDoesNotComeBackFailsTheRecoveryNamingIt) {
  auto p = SetPipeline(2, absl::Seconds(1));
  ASSERT_NE(p, nullptr);
  p->worker(0).Kill();
  const auto t0 = Clock::now();
  absl::StatusOr<std::vector<int>> lost = p->stages().Recover(-1);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDeadlineExceeded) << lost.status();
  EXPECT_NE(lost.status().message().find(absl::StrCat("stage 0 (", p->worker(0).address(), ") did not come back")),
            std::string::npos)
      << lost.status();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 8.0) << "its 1 s, not the 30 s RPC timeout";
}

TEST(StageSetTest, TheStageTheStallWatchBlamedIsReconfiguredEvenThoughItAnswers) {
  auto p = SetPipeline(2);
  ASSERT_NE(p, nullptr);
  absl::StatusOr<std::vector<int>> lost = p->stages().Recover(/*suspect=*/0);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_EQ(*lost, std::vector<int>{0});
  EXPECT_EQ(p->worker(0).configures().size(), 2u);
}

}  // namespace
}  // namespace baton

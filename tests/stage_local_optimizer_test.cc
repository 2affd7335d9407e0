// The stage-local optimizer at one replica (`replica_exchange: allreduce`, the default): each stage holds its step's
// gradients and steps AdamW on its own adapters, the coordinator only adds the squared norms and sends the clipping
// factor and learning rate back. Real stage_worker processes on loopback.
//
// Tolerance: none. Both exchanges run the same ops on the same values in the same order (the norms are measured per
// gradient and added by name, the fused AdamW is elementwise), so the LoRA, losses and norms are bitwise the same; a
// rolled-back run redoes pure functions of (seed, step, state), so it too is bitwise the uninterrupted run.
#include <absl/strings/str_join.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "coordinator/pipeline_trainer.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

class StageLocalOptimizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("stage_local"));
    test_util::WriteTinyModelAndTwoBucketCache(*dir_);
    // The stages' host copies of their state here, not in /dev/shm (the local workers inherit it).
    ASSERT_TRUE(MakeDirs(CopiesDir()).ok());
    ::setenv("BATON_STATE_COPY_DIR", CopiesDir().c_str(), 1);
  }
  static std::string CopiesDir() { return JoinPath(*dir_, "host_copies"); }
  static void TearDownTestSuite() { delete dir_; }

  // Clipping small enough to apply (its factor must be the same both ways), LoRA dropout on.
  static JobConfig Job(const std::string& exchange, int64_t steps) {
    auto job = ParseJobYaml(absl::StrCat(
        "model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
        "\nlora: {rank: 4, targets: all-linear, dropout: 0.1}\noptimizer: {lr: 0.01, weight_decay: 0.01, clip: 0.05}\n"
        "steps: ",
        steps, "\nbatch_size: 4\nmicro_batches: 4\nschedule: 1f1b\nrecompute: false\nseed: 3\nreplica_exchange: ",
        exchange, "\n"));
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }
  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }
  static double MaxLoraDifference(const std::string& a, const std::string& b) {
    auto la = test_util::LoadRunLora(JoinPath(*dir_, a)), lb = test_util::LoadRunLora(JoinPath(*dir_, b));
    EXPECT_FALSE(la.empty());
    EXPECT_EQ(la.size(), lb.size());
    double worst = 0;
    for (const auto& [k, v] : la) {
      if (!lb.count(k)) {
        ADD_FAILURE() << k << " missing from " << b;
        continue;
      }
      worst = std::max(worst, (v - lb.at(k)).abs().max().item<double>());
    }
    return worst;
  }
  // Runs `job`, SIGKILLing the last stage worker once `lines` steps are logged; `recoveries`: the recoveries made.
  static absl::StatusOr<CoordinatorResult> RunKillingAStage(const JobConfig& job, CoordinatorOptions options,
                                                            size_t lines, int* recoveries) {
    std::atomic<int> count{0};
    options.hooks.on_recovery = [&](int64_t, int, const std::string&) { ++count; };
    std::thread killer([&] {
      test_util::WaitForLines(JoinPath(options.output_dir, "train_log.jsonl"), lines);
      std::vector<pid_t> workers = test_util::OurStageWorkers();
      ASSERT_EQ(workers.size(), 2u);
      ::kill(workers.back(), SIGKILL);
    });
    auto run = RunCoordinator(job, options);
    killer.join();
    *recoveries = count;
    return run;
  }
  static std::string* dir_;
};
std::string* StageLocalOptimizerTest::dir_ = nullptr;

// The same LoRA, losses and norms as the coordinator exchange, bit for bit; per step nothing but a few hundred bytes of
// plans, summaries and norms crosses the coordinator's links besides the activations (and the stall watch's heartbeats,
// one a second a stage, whatever the step), against the whole LoRA twice.
TEST_F(StageLocalOptimizerTest, OneReplicaTrainsTheCoordinatorExchangesLoraWithoutMovingIt) {
  auto coordinator = RunCoordinator(Job("coordinator", 4), Options("coordinator"));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto local = RunCoordinator(Job("allreduce", 4), Options("stage_local"));
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(MaxLoraDifference("coordinator", "stage_local"), 0.0);
  ASSERT_EQ(local->steps.size(), coordinator->steps.size());
  uint64_t data = 0;  // each step's inputs are pushed during the step before it
  for (size_t i = 0; i < local->steps.size(); ++i) {
    const PipelineStepRecord &a = coordinator->steps[i], &b = local->steps[i];
    EXPECT_GT(a.grad_norm, 0.05) << "step " << i + 1 << " was not clipped";
    EXPECT_EQ(b.grad_norm, a.grad_norm) << "step " << i + 1;
    EXPECT_EQ(b.loss, a.loss) << "step " << i + 1;
    std::printf("step %zu: bytes through the coordinator besides activations: %llu (coordinator exchange: %llu)\n",
                i + 1, static_cast<unsigned long long>(b.link_adapter_bytes + b.link_control_bytes),
                static_cast<unsigned long long>(a.link_adapter_bytes + a.link_control_bytes));
    EXPECT_EQ(b.link_adapter_bytes, 0u) << "step " << i + 1;
    // Step 1 also forms each stage's group of one (a JoinGroup each, once per run and after a recovery).
    if (i > 0) EXPECT_LT(b.link_control_bytes, 1024u) << "step " << i + 1;
    data += b.link_data_bytes;
    // The coordinator exchange moves every gradient up and every adapter down.
    EXPECT_GT(a.link_adapter_bytes, 2 * 4 * 1000u) << "step " << i + 1;
  }
  EXPECT_GT(data, 0u);
  const auto log = test_util::ReadTrainLog(JoinPath(*dir_, "stage_local"));
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[1]["coordinator_link_bytes"]["adapters"].get<uint64_t>(), 0u);
}

// A stage worker killed after steps that the coordinator never read back: the worker restarted in its place takes
// the adapters and moments back from the copy the killed one kept in host shared memory, so only the step it was in
// is redone (none of those since the coordinator's copy). The LoRA is the uninterrupted run's, bit for bit; the
// copies are gone once the run ended.
TEST_F(StageLocalOptimizerTest, AKilledStageTakesItsStateBackFromItsHostCopy) {
  JobConfig job = Job("allreduce", 10);
  job.checkpoint_every = 0;
  job.state_every = 0;
  ASSERT_TRUE(RunCoordinator(job, Options("copy_reference")).ok());
  CoordinatorOptions options = Options("copy_killed");
  int recoveries = 0;
  auto run = RunKillingAStage(job, options, 6, &recoveries);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GE(recoveries, 1);
  EXPECT_EQ(run->steps_redone, 0);  // the step the worker was killed in never completed: it is not counted
  EXPECT_EQ(MaxLoraDifference("copy_reference", "copy_killed"), 0.0);
  EXPECT_EQ(test_util::ReadTrainLog(options.output_dir).size(), 10u);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(CopiesDir())) left.push_back(entry.path().string());
  EXPECT_TRUE(left.empty()) << "left in host memory: " << absl::StrJoin(left, ", ");
}

// The same kill without host copies (a stage lost with its host): its adapters and moments died with it, so the run
// rolls back to the last state the coordinator holds (step 4's checkpoint) and redoes the steps since. The LoRA is the
// uninterrupted run's, bit for bit, and the train log has each step once.
TEST_F(StageLocalOptimizerTest, AKilledStageRollsTheRunBackToTheCoordinatorsCopy) {
  JobConfig job = Job("allreduce", 10);
  job.checkpoint_every = 4;
  job.state_every = 0;
  ASSERT_TRUE(RunCoordinator(job, Options("rollback_reference")).ok());
  CoordinatorOptions options = Options("rollback_killed");
  options.host_state_copies = false;
  int recoveries = 0;
  auto run = RunKillingAStage(job, options, 6, &recoveries);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GE(recoveries, 1);
  EXPECT_GE(run->steps_redone, 1);  // killed after step 6 was logged: back to step 4's checkpoint (8's if it was late)
  EXPECT_EQ(MaxLoraDifference("rollback_reference", "rollback_killed"), 0.0);
  const auto log = test_util::ReadTrainLog(options.output_dir);
  ASSERT_EQ(log.size(), 10u);
  for (size_t i = 0; i < log.size(); ++i) EXPECT_EQ(log[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
}

// Without checkpoints or host copies, the coordinator still reads the state back every state_every steps: a stage
// killed mid-run costs at most that many steps, and the LoRA is the uninterrupted run's bit for bit.
TEST_F(StageLocalOptimizerTest, StateEveryBoundsWhatALostStageCosts) {
  JobConfig job = Job("allreduce", 12);
  job.checkpoint_every = 0;
  job.state_every = 3;
  ASSERT_TRUE(RunCoordinator(job, Options("every_reference")).ok());
  CoordinatorOptions options = Options("every_killed");
  options.host_state_copies = false;  // as when the stage is lost with its host
  int recoveries = 0;
  auto run = RunKillingAStage(job, options, 5, &recoveries);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_LE(run->steps_redone, job.state_every - 1);  // the lost step itself is not counted: it never completed
  EXPECT_EQ(MaxLoraDifference("every_reference", "every_killed"), 0.0);
  EXPECT_EQ(test_util::ReadTrainLog(options.output_dir).size(), 12u);
}

// A stage killed right after a checkpoint (before the next update): the coordinator's copy is current, so the
// restarted stage is loaded with it and only the step is redone, bit for bit.
TEST_F(StageLocalOptimizerTest, AStageLostWhileTheCoordinatorsCopyIsCurrentIsLoadedWithIt) {
  JobConfig job = Job("allreduce", 6);
  job.checkpoint_every = 2;
  ASSERT_TRUE(RunCoordinator(job, Options("current_reference")).ok());
  CoordinatorOptions options = Options("current_killed");
  std::atomic<int> recoveries{0};
  options.hooks.on_recovery = [&](int64_t, int, const std::string&) { ++recoveries; };
  options.hooks.before_update = [&](int64_t step) {
    if (step != 2 || recoveries > 0) return;  // step 3's micro-batches ran, step 2's checkpoint was read back
    std::vector<pid_t> workers = test_util::OurStageWorkers();
    ASSERT_EQ(workers.size(), 2u);
    ::kill(workers.front(), SIGKILL);
  };
  auto run = RunCoordinator(job, options);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(recoveries.load(), 1);
  EXPECT_EQ(MaxLoraDifference("current_reference", "current_killed"), 0.0);
  EXPECT_EQ(test_util::ReadTrainLog(options.output_dir).size(), 6u);
}

}  // namespace
}  // namespace baton

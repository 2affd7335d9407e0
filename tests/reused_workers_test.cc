// Remote stage workers that outlive a run (issue 25, part 1): a second run of the same job against the same
// workers, and a --resume after the coordinator was killed (-9) while they kept running, each compute bitwise what
// the same run computes on fresh workers, validation included. Before, a reused worker handed the second run the
// first run's trained adapters as its "initial" LoRA (step-0 validation with the old LoRA), kept its step window
// (`step 0 is outside [N, N+2]`) and its recovery generation (the new run's pushes were dropped as stale).
#include <absl/strings/str_join.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/testing/paths.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/local_workers.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;

class ReusedWorkersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("reused"));
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(*dir_, "job.yaml"), JobYaml()).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  // Dropout on (the workers' seeded masks) and validation every 2 steps (the step-0 one saw the old LoRA).
  static std::string JobYaml() {
    return absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                        "\nlora: {rank: 4, targets: all-linear, dropout: 0.1}\noptimizer: {lr: 0.01}\nsteps: 12"
                        "\nbatch_size: 4\nmicro_batches: 4\nschedule: 1f1b\nseed: 3\ncheckpoint_every: 4\n"
                        "validation: {every: 4, samples: 2, timesteps: [0.25, 0.75]}\nname: reused\n");
  }
  static JobConfig Job() {
    auto job = ParseJobYaml(JobYaml());
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }
  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }

  // The same job on fresh local workers, once: what every run on reused workers must equal.
  static std::string Fresh() {
    const std::string out = JoinPath(*dir_, "fresh");
    if (!PathExists(JoinPath(out, "lora.safetensors"))) {
      auto r = RunCoordinator(Job(), Options("fresh"));
      EXPECT_TRUE(r.ok()) << r.status();
    }
    return out;
  }

  // The last training step train_log.jsonl records (0 before the first).
  static int64_t LastStep(const std::string& out) {
    int64_t last = 0;
    for (const auto& j : test_util::ReadTrainLog(out)) {
      if (!j.contains("event") && j.contains("step")) last = j["step"].get<int64_t>();
    }
    return last;
  }

  static void ExpectSameRun(const std::string& out, const std::string& reference) {
    const auto a = test_util::LoadRunLora(reference), b = test_util::LoadRunLora(out);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    for (const auto& [name, t] : a) {
      ASSERT_TRUE(b.count(name)) << name;
      EXPECT_TRUE(at::equal(t, b.at(name))) << name << " differs from the run on fresh workers";
    }
    const auto va = test_util::ValidationLosses(reference), vb = test_util::ValidationLosses(out);
    ASSERT_EQ(va.size(), 4u) << "validation at steps 0, 4, 8, 12";
    EXPECT_EQ(va, vb) << "validation differs from the run on fresh workers";
  }

  static std::string* dir_;
};
std::string* ReusedWorkersTest::dir_ = nullptr;

TEST_F(ReusedWorkersTest, ASecondRunOnSurvivingRemoteWorkersEqualsARunOnFreshOnes) {
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with this process's ephemeral CA
  lopts.extra_args.push_back("--model_root=" + *dir_);
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const char* out : {"first", "second"}) {
    CoordinatorOptions o = Options(out);
    o.workers = (*workers)->addresses();
    auto r = RunCoordinator(Job(), o);
    ASSERT_TRUE(r.ok()) << out << " run: " << r.status();
  }
  const std::string fresh = Fresh();
  ExpectSameRun(JoinPath(*dir_, "first"), fresh);
  ExpectSameRun(JoinPath(*dir_, "second"), fresh);
}

// The coordinator binary killed with SIGKILL after a checkpoint, its remote workers left running (mid-step, at a
// later step than the checkpoint), then `--resume` against them.
TEST_F(ReusedWorkersTest, AResumeAfterTheCoordinatorWasKilledEqualsTheUninterruptedRun) {
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.extra_args = {"--insecure", "--model_root=" + *dir_};
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  const std::string out = JoinPath(*dir_, "resumed");
  std::vector<std::string> args = {JoinPath(BinDir(), "coordinator"),
                                   "--insecure",
                                   "--job",
                                   JoinPath(*dir_, "job.yaml"),
                                   "--output",
                                   out,
                                   "--workers",
                                   absl::StrJoin((*workers)->addresses(), ",")};
  const pid_t first = test_util::SpawnLogged(args, JoinPath(*dir_, "resumed-1.log"));
  ASSERT_GT(first, 0);
  // Killed once step 5 is logged: the step-4 checkpoint exists and the workers have gone past it.
  for (int i = 0; i < 2400 && LastStep(out) < 5; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(kill(first, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(first, &status, 0), first);
  ASSERT_TRUE(PathExists(JoinPath(out, "checkpoints"))) << "no checkpoint before the kill";
  args.push_back("--resume");
  const pid_t second = test_util::SpawnLogged(args, JoinPath(*dir_, "resumed-2.log"));
  ASSERT_GT(second, 0);
  ASSERT_EQ(waitpid(second, &status, 0), second);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "resume failed:\n"
                                                             << ReadFile(JoinPath(*dir_, "resumed-2.log")).value_or("");
  ExpectSameRun(out, Fresh());
}

}  // namespace
}  // namespace baton

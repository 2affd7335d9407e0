// Worker loss costs one step, not the job: a stage worker killed (-9) or stopped (SIGSTOP) mid-run is brought
// back and the step redone, and the final LoRA is bitwise the LoRA of an uninterrupted run; a worker that never
// comes back fails the run cleanly, naming it, with the last checkpoint kept. (The kill loop, many kills of
// workers and of the coordinator itself, is tests/recovery/kill_loop.cc, ctest label `recovery`.)
#include <absl/synchronization/mutex.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "coordinator/checkpoint.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/metrics/families.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/local_workers.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::OurStageWorkers;
using test_util::WaitForLines;
using Clock = std::chrono::steady_clock;

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("recovery"));
    test_util::WriteTinyModelAndTwoBucketCache(*dir_);
  }
  static void TearDownTestSuite() { delete dir_; }

  // Dropout on: a redone step must draw the same masks.
  static JobConfig Job(int64_t steps) {
    auto job = ParseJobYaml(absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                                         "\nlora: {rank: 4, targets: all-linear, dropout: 0.1}\n"
                                         "optimizer: {lr: 0.01, weight_decay: 0.01}\nsteps: ",
                                         steps, "\nbatch_size: 4\nmicro_batches: 4\nschedule: 1f1b\nseed: 3\n"));
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }

  // The uninterrupted run every recovered one must equal, bitwise.
  static void ExpectSameAsUninterrupted(const std::string& out, int64_t steps) {
    const std::string ref = absl::StrCat("reference", steps);
    if (!PathExists(JoinPath(JoinPath(*dir_, ref), "lora.safetensors"))) {
      auto r = RunCoordinator(Job(steps), Options(ref));
      ASSERT_TRUE(r.ok()) << r.status();
    }
    auto a = LoadAllSafetensors(JoinPath(JoinPath(*dir_, ref), "lora.safetensors"));
    auto b = LoadAllSafetensors(JoinPath(JoinPath(*dir_, out), "lora.safetensors"));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ASSERT_EQ(a->size(), b->size());
    for (const auto& [name, t] : *a) {
      ASSERT_TRUE(b->count(name)) << name;
      EXPECT_TRUE(at::equal(t, b->at(name))) << name << " differs from the uninterrupted run";
    }
  }

  static std::string* dir_;
};
std::string* RecoveryTest::dir_ = nullptr;

struct Recoveries {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> seen;  // (stage, cause)
  Clock::time_point first;
  void Hook(CoordinatorOptions& o) {
    o.hooks.on_recovery = [this](int64_t, int stage, const std::string& cause) {
      std::lock_guard<std::mutex> lock(mu);
      if (seen.empty()) first = Clock::now();
      seen.emplace_back(stage, cause);
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  }
};

TEST_F(RecoveryTest, KilledLocalWorkerIsRestartedAndTheLoraIsBitwiseUninterrupted) {
  const int64_t steps = 6;
  CoordinatorOptions o = Options("killed_local");
  Recoveries recoveries;
  recoveries.Hook(o);
  AddMetricsHooks("recovery_killed_local", &o.hooks);
  const std::string log = JoinPath(o.output_dir, "train_log.jsonl");
  std::thread killer([&] {
    WaitForLines(log, 2);  // mid-run
    std::vector<pid_t> workers = OurStageWorkers();
    ASSERT_EQ(workers.size(), 2u);
    ::kill(workers[1], SIGKILL);
  });
  auto result = RunCoordinator(Job(steps), o);
  killer.join();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(recoveries.size(), 1u);
  EXPECT_NE(recoveries.seen[0].second.find("killed by signal 9"), std::string::npos) << recoveries.seen[0].second;
  EXPECT_EQ(recoveries.seen[0].first, 1);
  EXPECT_EQ(CoordinatorFamilies().step_retries.Add({{"job", "recovery_killed_local"}, {"stage", "1"}}).Value(), 1.0);
  ExpectSameAsUninterrupted("killed_local", steps);
}

// Embedded workers: a stopped local worker is a stall too; the coordinator replaces the process itself.
TEST_F(RecoveryTest, StoppedLocalWorkerIsReplacedAndTheLoraIsBitwiseUninterrupted) {
  const int64_t steps = 6;
  CoordinatorOptions o = Options("stopped_local");
  o.stall_timeout = absl::Seconds(4);
  Recoveries recoveries;
  recoveries.Hook(o);
  absl::Mutex mu;
  std::vector<std::string> ended;  // the lines that end an outage
  o.hooks.on_outage = [&](const StageOutage& outage) {
    absl::MutexLock lock(&mu);
    if (outage.over) ended.push_back(outage.message);
  };
  const std::string log = JoinPath(o.output_dir, "train_log.jsonl");
  std::thread stopper([&] {
    WaitForLines(log, 2);
    std::vector<pid_t> workers = OurStageWorkers();
    ASSERT_EQ(workers.size(), 2u);
    ::kill(workers[0], SIGSTOP);
  });
  auto result = RunCoordinator(Job(steps), o);
  stopper.join();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(recoveries.size(), 1u);
  EXPECT_EQ(recoveries.seen[0].first, 0) << recoveries.seen[0].second;
  EXPECT_NE(recoveries.seen[0].second.find("stalled"), std::string::npos) << recoveries.seen[0].second;
  // The stopped worker never answered again: a new one took its place, at another address.
  absl::MutexLock lock(&mu);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_TRUE(
      std::regex_match(ended[0], std::regex(R"(stage 0 \(127\.0\.0\.1:\d+\) was replaced after \d+ s without an )"
                                            R"(answer: stage 0 \(127\.0\.0\.1:\d+\) answers in its place)")))
      << ended[0];
  ExpectSameAsUninterrupted("stopped_local", steps);
}

// Remote workers (--workers): a stopped one (SIGSTOP) is a stall, noticed within --stall_timeout_s and blamed on
// that stage, not on the neighbour waiting for it; once it runs again (SIGCONT) it is reconfigured, the step redone.
TEST_F(RecoveryTest, StoppedRemoteWorkerIsAStallNamedWithinSecondsThenRedone) {
  const int64_t steps = 6;
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the coordinator's ephemeral CA
  lopts.extra_args.push_back("--model_root=" + *dir_);
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  CoordinatorOptions o = Options("stopped_remote");
  o.workers = (*workers)->addresses();
  o.stall_timeout = absl::Seconds(4);
  Recoveries recoveries;
  recoveries.Hook(o);
  const std::string log = JoinPath(o.output_dir, "train_log.jsonl");
  Clock::time_point stopped;
  std::thread stopper([&] {
    WaitForLines(log, 2);
    stopped = Clock::now();
    ASSERT_TRUE((*workers)->Kill(1, SIGSTOP).ok());
    for (int i = 0; i < 600 && recoveries.size() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the coordinator waits for it meanwhile
    ASSERT_TRUE((*workers)->Kill(1, SIGCONT).ok());
  });
  auto result = RunCoordinator(Job(steps), o);
  stopper.join();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(recoveries.size(), 1u);
  EXPECT_EQ(recoveries.seen[0].first, 1) << recoveries.seen[0].second;
  EXPECT_NE(recoveries.seen[0].second.find("stage 1 (" + o.workers[1] + ") stalled"), std::string::npos)
      << recoveries.seen[0].second;
  EXPECT_LT(recoveries.first - stopped, std::chrono::seconds(4 + 4)) << "the stall must be noticed within seconds";
  ExpectSameAsUninterrupted("stopped_remote", steps);
}

// An outage is said while it lasts (issue 35, item 4): a remote worker that does not answer (SIGSTOP: on loopback, what
// a cut link or a hung host looks like) is named within the stall timeout, again every stall timeout while the step
// and then the recovery wait for it, and once it is back; the metric baton_stage_unreachable_seconds follows it.
TEST_F(RecoveryTest, AnUnreachableRemoteWorkerIsSaidWithinTheStallTimeoutThenPeriodicallyUntilItIsBack) {
  const int64_t steps = 6;
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS: a stopped worker cannot even finish a handshake
  lopts.extra_args.push_back("--model_root=" + *dir_);
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  CoordinatorOptions o = Options("unreachable_remote");
  o.workers = (*workers)->addresses();
  o.stall_timeout = absl::Seconds(4);     // lines after 2 s, then every 4 s
  constexpr double kStoppedSeconds = 11;  // three lines (2, 6, 10 s) before it is back
  struct Said {
    double at;  // seconds after the SIGSTOP
    StageOutage outage;
  };
  std::mutex mu;
  std::vector<Said> said;  // notices
  double highest_gauge = 0;
  Clock::time_point stopped = Clock::now() + std::chrono::hours(1);
  AddMetricsHooks("recovery_unreachable", &o.hooks);
  const prometheus::Labels labels = {{"job", "recovery_unreachable"}, {"stage", "1"}};
  // Runs after the metrics hook (AddMetricsHooks chains the hook it finds after its own).
  o.hooks.on_outage = [&, metrics = std::move(o.hooks.on_outage)](const StageOutage& outage) {
    metrics(outage);
    std::lock_guard<std::mutex> lock(mu);
    highest_gauge = std::max(highest_gauge, CoordinatorFamilies().stage_unreachable_seconds.Add(labels).Value());
    if (outage.notice) said.push_back({std::chrono::duration<double>(Clock::now() - stopped).count(), outage});
  };
  const std::string log = JoinPath(o.output_dir, "train_log.jsonl");
  std::thread stopper([&] {
    WaitForLines(log, 2);
    {
      std::lock_guard<std::mutex> lock(mu);
      stopped = Clock::now();
    }
    ASSERT_TRUE((*workers)->Kill(1, SIGSTOP).ok());
    std::this_thread::sleep_for(std::chrono::duration<double>(kStoppedSeconds));
    ASSERT_TRUE((*workers)->Kill(1, SIGCONT).ok());
  });
  auto result = RunCoordinator(Job(steps), o);
  stopper.join();
  ASSERT_TRUE(result.ok()) << result.status();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(said.size(), 3u);
  for (const Said& s : said) std::printf("%5.1f s: %s\n", s.at, s.outage.message.c_str());
  EXPECT_EQ(said.front().outage.worker, 1);
  EXPECT_NE(said.front().outage.message.find("stage 1 (" + o.workers[1] + ")"), std::string::npos)
      << said.front().outage.message;
  EXPECT_LE(said.front().at, 4.0 + 1) << "the first line must come within the stall timeout";
  // While it is stopped, a line at least every stall timeout (a little slack for a loaded machine).
  double last = 0;
  for (const Said& s : said) {
    if (s.outage.over) break;
    EXPECT_LE(s.at - last, 4.0 + 2) << s.outage.message;
    last = s.at;
  }
  EXPECT_GE(last, kStoppedSeconds - 4.0 - 2) << "lines until it was back";
  EXPECT_TRUE(said.back().outage.over) << said.back().outage.message;
  EXPECT_GE(said.back().at, kStoppedSeconds);
  EXPECT_NE(said.back().outage.message.find("is back after"), std::string::npos) << said.back().outage.message;
  EXPECT_GE(highest_gauge, kStoppedSeconds - 4.0 - 2);
  EXPECT_EQ(CoordinatorFamilies().stage_unreachable_seconds.Add(labels).Value(), 0.0) << "back: 0";
  ExpectSameAsUninterrupted("unreachable_remote", steps);
}

// A remote worker that never comes back: the run fails after --worker_restart_timeout_s, naming the stage and its
// address, non-zero, with the last checkpoint kept for --resume.
TEST_F(RecoveryTest, WorkerThatNeverComesBackFailsCleanlyNamingItAndKeepsTheCheckpoint) {
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the coordinator's ephemeral CA
  lopts.extra_args.push_back("--model_root=" + *dir_);
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  JobConfig job = Job(100000);  // runs until the kill
  job.checkpoint_every = 1;
  CoordinatorOptions o = Options("never_back");
  o.workers = (*workers)->addresses();
  o.worker_restart_timeout = absl::Seconds(2);
  const std::string log = JoinPath(o.output_dir, "train_log.jsonl");
  std::thread killer([&] {
    WaitForLines(log, 2);
    (void)(*workers)->Kill(1, SIGKILL);
  });
  auto t0 = Clock::now();
  auto result = RunCoordinator(job, o);
  auto took = Clock::now() - t0;
  killer.join();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("stage 1 (" + o.workers[1] + ") did not come back within 2s"),
            std::string::npos)
      << result.status();
  EXPECT_LT(took, std::chrono::seconds(30));
  auto kept = ListCheckpointSteps(o.output_dir);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->empty()) << "the last checkpoint must stay for --resume";
}

// --step_retries 0: the first loss fails the run, as before recovery existed.
TEST_F(RecoveryTest, NoRetriesMeansTheFirstLossFailsTheRun) {
  CoordinatorOptions o = Options("no_retries");
  o.step_retries = 0;
  const std::string log = JoinPath(o.output_dir, "train_log.jsonl");
  std::thread killer([&] {
    WaitForLines(log, 2);
    std::vector<pid_t> workers = OurStageWorkers();
    if (workers.size() == 2) ::kill(workers[0], SIGKILL);
  });
  auto result = RunCoordinator(Job(100000), o);
  killer.join();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("killed by signal 9"), std::string::npos) << result.status();
  EXPECT_NE(result.status().message().find("--step_retries 0"), std::string::npos) << result.status();
}

}  // namespace
}  // namespace baton

// Many LoRAs on one loaded pipeline (issue 38): a sweep's members train at once over the same two stage workers, and
// each member's LoRA and validation are bitwise those of the member trained alone on fresh workers -- also when
// another member fails mid-run, when a stage worker is killed mid-step (every member redoes its step) and when the
// sweep is stopped and resumed. FLUX.2 here in process; Wan through the coordinator binary.
#include "core/train/sweep.h"

#include <absl/strings/str_cat.h>
#include <absl/time/clock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <set>

#include "coordinator/sweep_runs.h"
#include "core/testing/prometheus_scrape.h"
#include "core/testing/run_command.h"
#include "stage_driver/shared_workers.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;

class SweepTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("sweep"));
    test_util::WriteTinyModelAndTwoBucketCache(*dir_);
  }
  static void TearDownTestSuite() { delete dir_; }

  // Batch 1 (one micro-batch a step: a two-stage pipeline alone is half idle), dropout on (the stages' seeded masks),
  // validation and checkpoints every 2 steps; `sweep` as given ("" = none).
  static JobConfig Job(const std::string& sweep, const std::string& lr = "0.01") {
    const std::string yaml = absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                                          "\nlora: {rank: 4, targets: all-linear, dropout: 0.1}\noptimizer: {lr: ", lr,
                                          "}\nsteps: 6\nbatch_size: 1\nmicro_batches: 1\nseed: 3\ncheckpoint_every: 2\n"
                                          "validation: {every: 2, samples: 2, timesteps: [0.25, 0.75]}\nname: sweep\n",
                                          sweep.empty() ? "" : absl::StrCat("sweep: ", sweep, "\n"));
    auto job = ParseJobYaml(yaml);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }
  static CoordinatorOptions Options(const std::string& out) {
    return test_util::LocalStagesOptions(2, JoinPath(*dir_, out));
  }

  // The member with learning rate `lr` trained alone on fresh workers (once per lr).
  static std::string Alone(const std::string& lr) {
    const std::string out = JoinPath(*dir_, absl::StrCat("alone-", lr));
    if (!PathExists(JoinPath(out, "lora.safetensors"))) {
      auto r = RunCoordinator(Job("", lr), Options(absl::StrCat("alone-", lr)));
      EXPECT_TRUE(r.ok()) << r.status();
    }
    return out;
  }

  static void ExpectSameAsAlone(const std::string& member_out, const std::string& lr) {
    const std::string alone = Alone(lr);
    const auto a = test_util::LoadRunLora(alone), b = test_util::LoadRunLora(member_out);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    bool moved = false;
    for (const auto& [name, t] : a) {
      ASSERT_TRUE(b.count(name)) << name;
      EXPECT_TRUE(at::equal(t, b.at(name))) << member_out << ": " << name << " differs from the member trained alone";
      if (name.find("lora_B") != std::string::npos) moved |= t.abs().max().item<double>() > 0;
    }
    EXPECT_TRUE(moved);
    const auto va = test_util::ValidationLosses(alone), vb = test_util::ValidationLosses(member_out);
    EXPECT_EQ(va.size(), 4u) << "validation at steps 0, 2, 4, 6";
    EXPECT_EQ(va, vb) << member_out << ": validation differs from the member trained alone";
  }

  static std::string* dir_;
};
std::string* SweepTest::dir_ = nullptr;

TEST_F(SweepTest, MembersAreNamedByTheirValuesAndRefuseWhatCannotBeSwept) {
  auto members = ExpandSweep(Job("{optimizer.lr: [0.01, 0.03], lora.rank: [4, 8]}"));
  ASSERT_TRUE(members.ok()) << members.status();
  std::vector<std::string> names;
  for (const SweepMember& m : *members) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"lr=0.01_rank=4", "lr=0.01_rank=8", "lr=0.03_rank=4", "lr=0.03_rank=8"}));
  EXPECT_EQ((*members)[3].job.optimizer.lr, 0.03);
  EXPECT_EQ((*members)[3].job.lora.rank, 8);
  EXPECT_EQ((*members)[3].job.lora.alpha, 8) << "alpha follows the rank when the job gives none";
  EXPECT_NE(JobHash((*members)[0].job), JobHash((*members)[2].job)) << "the stages must tell members apart";
  for (const char* bad : {"{optimizer.eps: [1e-8]}", "{optimizer.lr: [0.01, -1]}", "{optimizer.lr: []}",
                          "{seed: [1, 1]}", "{optimizer.lr: [1, 2, 3, 4, 5], seed: [1, 2, 3, 4]}"}) {
    const std::string yaml = absl::StrCat("model: m\ndataset: d\nsweep: ", bad, "\n");
    EXPECT_FALSE(ParseJobYaml(yaml).ok()) << bad;
  }
  // A swept lr is checked as the job file's is: Adafactor's relative step ignores it (the members trained alike), and
  // polynomial's end rate bounds it.
  for (const char* optimizer : {"{type: adafactor}", "{schedule: polynomial}"}) {
    const std::string yaml =
        absl::StrCat("model: m\ndataset: d\noptimizer: ", optimizer, "\nsweep: {optimizer.lr: [1e-8, 1e-4]}\n");
    EXPECT_FALSE(ParseJobYaml(yaml).ok()) << optimizer;
  }
}

TEST_F(SweepTest, EachMemberEqualsTheMemberTrainedAlone) {
  auto results = RunSweep(Job("{optimizer.lr: [0.01, 0.03]}"), Options("sweep"));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 2u);
  for (const auto& r : *results) ASSERT_TRUE(r.result.ok()) << r.name << ": " << r.result.status();
  ExpectSameAsAlone(JoinPath(*dir_, "sweep/lr=0.01"), "0.01");
  ExpectSameAsAlone(JoinPath(*dir_, "sweep/lr=0.03"), "0.03");
}

// A member whose learning rate diverges fails at its first non-finite step; the other finishes, bitwise alone. The
// failed member's pipeline leaves the workers at once (they no longer show it configured), not when they stop.
TEST_F(SweepTest, AFailingMemberEndsAloneAndLeavesTheOthersUnchanged) {
  auto workers = std::make_shared<SharedStageWorkers>();
  CoordinatorOptions options = Options("failing");
  options.shared_workers = workers;
  options.metrics_listen = "127.0.0.1:0";
  std::vector<double> failed_configured, survivor_configured;  // per worker, at the survivor's last step
  options.hooks.on_step = [&](const PipelineStepRecord& rec) {
    if (rec.step != 6) return;
    for (const std::string& address : workers->workers()->metrics_addresses()) {
      double failed = 0, survivor = 0;
      for (int attempt = 0; attempt < 100; ++attempt) {  // the failed member releases as its run unwinds
        auto text = test_util::HttpGet(address);
        ASSERT_TRUE(text.ok()) << text.status();
        failed = test_util::SumSamples(*text, "baton_worker_configured", {{"job", "sweep.lr=1e30"}});
        survivor = test_util::SumSamples(*text, "baton_worker_configured", {{"job", "sweep.lr=0.01"}});
        if (failed < 0) break;
        absl::SleepFor(absl::Milliseconds(50));
      }
      failed_configured.push_back(failed);
      survivor_configured.push_back(survivor);
    }
  };
  auto results = RunSweep(Job("{optimizer.lr: [0.01, 1e30]}"), options);
  ASSERT_TRUE(workers->Stop().ok());
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ(failed_configured, std::vector<double>({-1, -1})) << "the failed member's pipeline is still held";
  EXPECT_EQ(survivor_configured, std::vector<double>({1, 1}));
  ASSERT_EQ(results->size(), 2u);
  ASSERT_TRUE((*results)[0].result.ok()) << (*results)[0].result.status();
  ASSERT_FALSE((*results)[1].result.ok());
  EXPECT_NE((*results)[1].result.status().message().find("is nan"), std::string::npos) << (*results)[1].result.status();
  ExpectSameAsAlone(JoinPath(*dir_, "failing/lr=0.01"), "0.01");
}

// One member stopped after its 2nd step (as the job service stops one job) checkpoints and ends; the other goes on,
// bitwise its run alone.
TEST_F(SweepTest, AStoppedMemberEndsAloneAndLeavesTheOthersUnchanged) {
  std::atomic<bool> stop_second{false};
  auto results = RunSweep(Job("{optimizer.lr: [0.01, 0.03]}"), Options("one_stopped"),
                          [&](const SweepMember& member, CoordinatorOptions& o) {
                            if (member.name != "lr=0.03") return;
                            o.hooks.stop = &stop_second;
                            o.hooks.on_step = [&](const PipelineStepRecord& r) {
                              if (r.step == 2) stop_second = true;
                            };
                          });
  ASSERT_TRUE(results.ok()) << results.status();
  for (const auto& r : *results) ASSERT_TRUE(r.result.ok()) << r.name << ": " << r.result.status();
  EXPECT_EQ((*results)[0].result->steps.back().step, 6);
  EXPECT_LT((*results)[1].result->steps.back().step, 6) << "the stopped member ran to the end";
  EXPECT_TRUE(PathExists(JoinPath(*dir_, "one_stopped/lr=0.03/checkpoints")))
      << "the stopped member kept no checkpoint";
  ExpectSameAsAlone(JoinPath(*dir_, "one_stopped/lr=0.01"), "0.01");
}

// Stage 1 is killed before member lr=0.01's 3rd update: every member loses its step, one restart serves both, and
// both redo it.
TEST_F(SweepTest, AKilledStageWorkerCostsEveryMemberItsStepNeverItsLora) {
  CoordinatorOptions o = Options("killed");
  o.shared_workers = std::make_shared<SharedStageWorkers>();
  std::atomic<bool> killed{false};
  std::atomic<int> recoveries{0};
  o.hooks.on_recovery = [&](int64_t, int, const std::string&) { ++recoveries; };
  o.hooks.before_update = [&, workers = o.shared_workers](int64_t step) {
    if (step == 2 && !killed.exchange(true)) {
      EXPECT_TRUE(workers->workers()->Kill(1, SIGKILL).ok());
    }
  };
  auto results = RunSweep(Job("{optimizer.lr: [0.01, 0.03]}"), o);
  ASSERT_TRUE(o.shared_workers->Stop().ok());
  ASSERT_TRUE(results.ok()) << results.status();
  for (const auto& r : *results) ASSERT_TRUE(r.result.ok()) << r.name << ": " << r.result.status();
  EXPECT_TRUE(killed);
  EXPECT_GE(recoveries.load(), 1);
  ExpectSameAsAlone(JoinPath(*dir_, "killed/lr=0.01"), "0.01");
  ExpectSameAsAlone(JoinPath(*dir_, "killed/lr=0.03"), "0.03");
}

// Stopped after step 3 (each member checkpoints where it is), then --resume: every member from its own checkpoint.
TEST_F(SweepTest, AStoppedSweepResumesEveryMemberFromItsOwnCheckpoint) {
  std::atomic<bool> stop{false};
  CoordinatorOptions o = Options("resumed");
  o.hooks.stop = &stop;
  o.hooks.on_step = [&](const PipelineStepRecord& r) {
    if (r.step == 3) stop = true;
  };
  auto first = RunSweep(Job("{optimizer.lr: [0.01, 0.03]}"), o);
  ASSERT_TRUE(first.ok()) << first.status();
  for (const auto& r : *first) {
    ASSERT_TRUE(r.result.ok()) << r.name << ": " << r.result.status();
    ASSERT_FALSE(r.result->steps.empty());
    EXPECT_LT(r.result->steps.back().step, 6) << r.name << " was not stopped";
  }
  CoordinatorOptions again = Options("resumed");
  again.resume = true;
  auto second = RunSweep(Job("{optimizer.lr: [0.01, 0.03]}"), again);
  ASSERT_TRUE(second.ok()) << second.status();
  for (const auto& r : *second) {
    ASSERT_TRUE(r.result.ok()) << r.name << ": " << r.result.status();
    EXPECT_GT(r.result->first_step, 0) << r.name << " started over";
  }
  ExpectSameAsAlone(JoinPath(*dir_, "resumed/lr=0.01"), "0.01");
  ExpectSameAsAlone(JoinPath(*dir_, "resumed/lr=0.03"), "0.03");
}

}  // namespace
}  // namespace baton

// End-to-end pipeline tests: real stage_worker processes on loopback, driven by the coordinator, held to
// the single-process reference trainer.
//
// Tolerance: the pipeline runs exactly the ops train-local runs, in the same order (same sampler, same
// per-micro-batch loss scale, gradients accumulated in micro-batch order, the same AdamW on fp32 masters),
// single-threaded on CPU, and tensors cross the wire as raw bytes. So we expect bitwise equality and
// observe it; the assertion allows 1e-6 absolute on weights of magnitude ~0.1 only so that a BLAS that
// blocks a split batch differently on another machine does not fail the suite — anything larger means the
// pipeline computes something different.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "coordinator/local_workers.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/local_trainer.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::BinDir;

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("pipeline"));
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model"), 1).ok());
    // Two resolution buckets: steps mix micro-batches of 4 and 6 image tokens.
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  JobConfig Job(const std::string& schedule, bool recompute, double dropout = 0.0) {
    auto job = ParseJobYaml(absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                                         "\nlora: {rank: 4, targets: all-linear, dropout: ", dropout,
                                         "}\noptimizer: {lr: 0.01, weight_decay: 0.01}\nsteps: 3\nbatch_size: 4\n"
                                         "micro_batches: 4\nschedule: ",
                                         schedule, "\nrecompute: ", recompute ? "true" : "false", "\nseed: 3\n"));
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  CoordinatorOptions Options(int stages, const std::string& out) {
    CoordinatorOptions o;
    o.stages = stages;
    o.output_dir = JoinPath(*dir_, out);
    o.stage_worker_binary = JoinPath(BinDir(), "stage_worker");
    o.rpc_timeout = absl::Seconds(60);
    o.connect_timeout = absl::Seconds(10);
    o.quiet = true;
    return o;
  }

  static std::map<std::string, at::Tensor> Lora(const std::string& out) {
    auto t = LoadAllSafetensors(JoinPath(JoinPath(*dir_, out), "lora.safetensors"));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : std::map<std::string, at::Tensor>{};
  }

  static void ExpectSameLora(const std::string& a, const std::string& b) {
    auto la = Lora(a), lb = Lora(b);
    ASSERT_FALSE(la.empty());
    ASSERT_EQ(la.size(), lb.size());
    for (const auto& [k, v] : la) {
      ASSERT_TRUE(lb.count(k)) << k;
      double diff = (v - lb.at(k)).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6) << k << " differs between " << a << " and " << b;
    }
  }

  static std::string* dir_;
};
std::string* PipelineTest::dir_ = nullptr;

struct Variant {
  int stages;
  const char* schedule;
  bool recompute;
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.stages << " stages, " << v.schedule << (v.recompute ? ", recompute" : "");
}

class PipelineEquivalenceTest : public PipelineTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(PipelineEquivalenceTest, LoraAndLossesMatchTrainLocal) {
  const Variant v = GetParam();
  JobConfig job = Job(v.schedule, v.recompute, /*dropout=*/0.1);
  const std::string ref = absl::StrCat("ref_", v.schedule, v.recompute);
  auto local = RunLocalTraining(job, JoinPath(*dir_, ref), 0);
  ASSERT_TRUE(local.ok()) << local.status();
  const std::string out = absl::StrCat("pp", v.stages, v.schedule, v.recompute);
  auto pipe = RunCoordinator(job, Options(v.stages, out));
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  ASSERT_EQ(pipe->steps.size(), local->steps.size());
  for (size_t i = 0; i < local->steps.size(); ++i) {
    // The stage reports each micro-batch loss as float32, train-local sums doubles: 1e-6 relative.
    EXPECT_NEAR(pipe->steps[i].loss, local->steps[i].loss, 1e-6 * local->steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(pipe->steps[i].stages.size(), static_cast<size_t>(v.stages));
  }
  ExpectSameLora(ref, out);
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, PipelineEquivalenceTest,
                         ::testing::Values(Variant{1, "1f1b", true}, Variant{2, "gpipe", true},
                                           Variant{2, "1f1b", true}, Variant{2, "gpipe", false},
                                           Variant{2, "1f1b", false}, Variant{3, "gpipe", true},
                                           Variant{3, "1f1b", false}, Variant{2, "interleaved", true},
                                           Variant{2, "interleaved", false}, Variant{1, "interleaved", true}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.stages, "stages_", info.param.schedule,
                                               info.param.recompute ? "_recompute" : "");
                         });

TEST_F(PipelineTest, ResumedRunEqualsUninterruptedRun) {
  JobConfig job = Job("1f1b", true);
  job.checkpoint_every = 1;
  auto full = RunCoordinator(job, Options(2, "full"));
  ASSERT_TRUE(full.ok()) << full.status();
  // "Crash" after step 2 (the run stops there with a checkpoint), then resume to step 3.
  CoordinatorOptions first = Options(2, "resumed");
  first.steps = 2;
  ASSERT_TRUE(RunCoordinator(job, first).ok());
  CoordinatorOptions second = Options(2, "resumed");
  second.resume = true;
  auto resumed = RunCoordinator(job, second);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, 2);
  ASSERT_EQ(resumed->steps.size(), 1u);
  EXPECT_EQ(resumed->steps[0].loss, full->steps[2].loss);
  ExpectSameLora("full", "resumed");
  auto log = ReadFile(JoinPath(JoinPath(*dir_, "resumed"), "train_log.jsonl"));
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(std::count(log->begin(), log->end(), '\n'), 3);
  for (const char* key : {"\"stage_busy_seconds\":[", "\"samples_per_second\":"}) {
    EXPECT_NE(log->find(key), std::string::npos) << key;
  }
}

TEST_F(PipelineTest, InterleavedRefusesWhatItCannotSplit) {
  // 4 micro-batches over 3 stages: Megatron's interleaving needs a multiple of the stage count.
  auto uneven = RunCoordinator(Job("interleaved", true), Options(3, "uneven"));
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(uneven.status().message().find("micro-batches to be a multiple of stages"), std::string::npos)
      << uneven.status();
  EXPECT_NE(uneven.status().message().find("micro_batches: 4, chunks: 2 on --stages 3"), std::string::npos)
      << uneven.status();
  // 2 stages x 3 chunks = 6 virtual stages, but the tiny model has 5 blocks.
  JobConfig job = Job("interleaved", true);
  job.chunks = 3;
  auto too_many = RunCoordinator(job, Options(2, "too_many"));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("6 virtual stages, but the model has only 5 blocks"), std::string::npos)
      << too_many.status();
}

TEST_F(PipelineTest, StageThatWasNeverStartedIsNamed) {
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  auto workers = LocalWorkers::Start(1, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  CoordinatorOptions o = Options(2, "absent");
  o.workers = {(*workers)->addresses()[0], "127.0.0.1:1"};
  o.connect_timeout = absl::Seconds(2);
  auto t0 = std::chrono::steady_clock::now();
  auto result = RunCoordinator(Job("1f1b", true), o);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("stage 1 (127.0.0.1:1)"), std::string::npos) << result.status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(PipelineTest, KilledStageIsNamedWithinTheDeadline) {
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.extra_args = {"--wait_timeout_s=20"};
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  JobConfig job = Job("1f1b", true);
  job.steps = 100000;  // runs until the kill
  CoordinatorOptions o = Options(2, "killed");
  o.workers = (*workers)->addresses();
  o.rpc_timeout = absl::Seconds(20);
  std::string log_path = JoinPath(o.output_dir, "train_log.jsonl");
  std::thread killer([&] {
    // Kill stage 1 once training is under way.
    for (int i = 0; i < 600; ++i) {
      auto log = ReadFile(log_path);
      if (log.ok() && std::count(log->begin(), log->end(), '\n') >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    (void)(*workers)->Kill(1, SIGKILL);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto result = RunCoordinator(job, o);
  auto took = std::chrono::steady_clock::now() - t0;
  killer.join();
  ASSERT_FALSE(result.ok());
  const std::string address = (*workers)->addresses()[1];
  EXPECT_NE(result.status().message().find("stage 1 (" + address + ")"), std::string::npos) << result.status();
  EXPECT_LT(took, std::chrono::seconds(40)) << "the failure must surface within the deadline, not hang";
}

}  // namespace
}  // namespace baton

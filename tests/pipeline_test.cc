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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "baton/v1/stage.grpc.pb.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/pipeline/partition.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"
#include "rpc/grpc_options.h"
#include "rpc/tls.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/local_workers.h"
#include "tests/local_stages.h"
#include "wire/envelope.h"

namespace baton {
namespace {

using test_util::BinDir;

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("pipeline"));
    test_util::WriteTinyModelAndTwoBucketCache(*dir_);
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
    return test_util::LocalStagesOptions(stages, JoinPath(*dir_, out));
  }

  static std::map<std::string, at::Tensor> Lora(const std::string& out) {
    return test_util::LoadRunLora(JoinPath(*dir_, out));
  }

  static void ExpectSameLora(const std::string& a, const std::string& b, const std::string& file = "lora.safetensors") {
    auto la = test_util::LoadRunLora(JoinPath(*dir_, a), file), lb = test_util::LoadRunLora(JoinPath(*dir_, b), file);
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

// wire_dtype: fp8 really compresses what crosses between stages (the LoRA moves off the exact run's), stays
// close to it (per-token scales keep e4m3's ~3% rounding from compounding), and is deterministic run to run.
TEST_F(PipelineTest, Fp8WireStaysCloseToExactAndIsDeterministic) {
  JobConfig exact = Job("1f1b", false);
  JobConfig fp8 = exact;
  fp8.wire_dtype = "fp8";
  auto a = RunCoordinator(exact, Options(2, "wire_exact"));
  auto b = RunCoordinator(fp8, Options(2, "wire_fp8"));
  auto c = RunCoordinator(fp8, Options(2, "wire_fp8_again"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status() << c.status();
  for (size_t i = 0; i < a->steps.size(); ++i) {
    EXPECT_NEAR(b->steps[i].loss, a->steps[i].loss, 0.02 * a->steps[i].loss) << "step " << i + 1;
  }
  ExpectSameLora("wire_fp8", "wire_fp8_again");
  auto exact_lora = Lora("wire_exact"), fp8_lora = Lora("wire_fp8");
  double max_diff = 0;
  for (const auto& [k, v] : exact_lora) max_diff = std::max(max_diff, (v - fp8_lora.at(k)).abs().max().item<double>());
  EXPECT_GT(max_diff, 1e-6) << "fp8 on the wire changed nothing: was it applied?";
  // AdamW moves a weight by about lr per step whatever the gradient's size, so two runs whose gradients
  // differ slightly can drift up to 2·lr·steps apart; the losses above are the closeness check.
  EXPECT_LE(max_diff, 2 * exact.optimizer.lr * exact.steps);
}

// recompute: auto under a budget that one stage fits only by recomputing some (not all) of its blocks: the
// stages run the hybrid (checkpointed head of the stage, graph for the rest) and still match train-local.
TEST_F(PipelineTest, AutoRecomputeUnderABudgetMatchesTrainLocal) {
  const Flux2Config c = test_util::TinyFlux2Config();
  JobConfig job = Job("1f1b", false, /*dropout=*/0.1);
  job.recompute = RecomputePolicy::kAuto;
  // The planner's options as the coordinator builds them for this job (PlanStages): fp32 on cpu, the
  // cache's largest micro-batch (2x3 image + 5 text tokens, one sample).
  PartitionOptions o;
  o.stages = 2;
  o.bytes_per_param = 4;
  o.activation_bytes = 4;
  o.lora_rank = 4;
  o.all_linear = true;
  o.local_optimizer = true;  // the default exchange: AdamW's state beside the adapters
  o.micro_batches = 4;
  o.recompute = RecomputePolicy::kNone;
  o.device = PlanDevice::kCpu;
  o.tokens_per_micro_batch = 11;
  o.text_tokens_per_micro_batch = 5;
  // The smallest uniform budget that fits without recompute, minus the graph of one block's share.
  auto plan = PartitionFlux2(c, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t lo = 0, hi = plan->stages[0].est_memory_bytes + plan->stages[1].est_memory_bytes;
  while (lo + 1 < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    o.memory_budget_bytes = {mid};
    (PartitionFlux2(c, o)->fits ? hi : lo) = mid;
  }
  o.recompute = RecomputePolicy::kAuto;
  o.memory_budget_bytes = {hi - 1};
  plan = PartitionFlux2(c, o);
  ASSERT_TRUE(plan.ok() && plan->fits) << plan.status();
  bool hybrid = false;
  for (const StageSpec& s : plan->stages) {
    hybrid |= s.recompute_blocks > 0 && s.recompute_blocks < s.block_end - s.block_begin;
  }
  ASSERT_TRUE(hybrid) << RenderPlan(c, *plan);
  job.memory_per_stage = {absl::StrCat(hi - 1)};

  auto local = RunLocalTraining(job, JoinPath(*dir_, "ref_auto"), 0);
  ASSERT_TRUE(local.ok()) << local.status();
  auto pipe = RunCoordinator(job, Options(2, "pp_auto"));
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  ASSERT_EQ(pipe->steps.size(), local->steps.size());
  for (size_t i = 0; i < local->steps.size(); ++i) {
    EXPECT_NEAR(pipe->steps[i].loss, local->steps[i].loss, 1e-6 * local->steps[i].loss) << "step " << i + 1;
  }
  ExpectSameLora("ref_auto", "pp_auto");
}

// offload: {blocks: 2} reaches every stage worker (ConfigureRequest.offload_blocks): each swaps its first two blocks
// in from host memory for every use, and the LoRA is bitwise the one of the same pipeline without the swap.
TEST_F(PipelineTest, OffloadedBlocksTrainTheLoraOfThePlainPipelineBitwise) {
  JobConfig job = Job("1f1b", true, /*dropout=*/0.1);
  auto plain = RunCoordinator(job, Options(2, "pp_plain_rc"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  job.offload_blocks = 2;
  auto swapped = RunCoordinator(job, Options(2, "pp_offload"));
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  ASSERT_EQ(swapped->steps.size(), plain->steps.size());
  for (size_t i = 0; i < plain->steps.size(); ++i) EXPECT_EQ(swapped->steps[i].loss, plain->steps[i].loss) << i;
  const auto a = Lora("pp_plain_rc"), b = Lora("pp_offload");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) EXPECT_TRUE(at::equal(v, b.at(k))) << k;
}

// quantize: int8 reaches every stage worker (through ConfigureRequest.quantize): two stages quantize their own
// blocks while loading and train exactly as train-local's int8 run, and differently from the fp32 base.
TEST_F(PipelineTest, Int8StagesMatchTrainLocalInt8) {
  JobConfig job = Job("1f1b", true);
  job.quantize = "int8";
  auto local = RunLocalTraining(job, JoinPath(*dir_, "ref_int8"), 0);
  ASSERT_TRUE(local.ok()) << local.status();
  auto pipe = RunCoordinator(job, Options(2, "pp_int8"));
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto full = RunLocalTraining(Job("1f1b", true), JoinPath(*dir_, "ref_full"), 0);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(pipe->steps.size(), local->steps.size());
  for (size_t i = 0; i < local->steps.size(); ++i) {
    EXPECT_NEAR(pipe->steps[i].loss, local->steps[i].loss, 1e-6 * local->steps[i].loss) << "step " << i + 1;
  }
  EXPECT_NE(local->steps[0].loss, full->steps[0].loss);
  ExpectSameLora("ref_int8", "pp_int8");
}

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

// The recipes around the update (`optimizer: {type}`, `lora: {plus_ratio}`, `ema:`) wherever the optimizer runs:
// train-local, the stages' own optimizer (the default exchange) across 2 stages with a stop and a resume in between,
// and the coordinator's: the same LoRA and the same EMA (lora_ema.safetensors), bitwise but for the BLAS allowance
// above. The EMA is not the LoRA. For AdamW and for Adafactor (at a rate, with a first moment), with LoRA+; for Prodigy
// (whose step-size estimate the stages' own optimizers sum through the coordinator, by name as one process adds it);
// for 8-bit AdamW (its byte codes through the stages' state exchange and the checkpoint).
TEST_F(PipelineTest, OptimizerRecipesMatchTrainLocalInEveryPlacementAndResume) {
  for (const std::string type : {"adamw", "adafactor", "prodigy", "adamw8bit"}) {
    JobConfig job = Job("1f1b", false);
    job.optimizer.type = type;
    job.optimizer.adafactor.relative_step = false;
    job.optimizer.adafactor.beta1 = 0.9;
    job.optimizer.plus_ratio = type == "prodigy" ? 1 : 16;
    if (type == "prodigy") {  // its recipes' rate, and a start that moves the LoRA within 3 steps
      job.optimizer.lr = 1;
      job.optimizer.prodigy.d0 = 1e-3;
    }
    job.optimizer.min_8bit_size = 200;  // the tiny model's larger adapters 8-bit, the smaller fp32
    job.optimizer.ema.decay = 0.9;
    job.checkpoint_every = 1;
    const std::string ref = type + "_ref", local = type + "_local", central = type + "_coordinator";
    ASSERT_TRUE(RunLocalTraining(job, JoinPath(*dir_, ref), 0).ok());
    CoordinatorOptions first = Options(2, local);
    first.steps = 2;
    ASSERT_TRUE(RunCoordinator(job, first).ok());
    CoordinatorOptions second = Options(2, local);
    second.resume = true;
    auto resumed = RunCoordinator(job, second);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->first_step, 2);
    std::vector<std::string> outs = {local};
    if (type != "adamw8bit") {  // (the coordinator steps 8-bit AdamW with train-local's code)
      job.replica_exchange = "coordinator";
      ASSERT_TRUE(RunCoordinator(job, Options(2, central)).ok());
      outs.push_back(central);
    }
    for (const std::string& out : outs) {
      ExpectSameLora(ref, out);
      ExpectSameLora(ref, out, "lora_ema.safetensors");
    }
    auto lora = Lora(ref);
    auto ema = test_util::LoadRunLora(JoinPath(*dir_, ref), "lora_ema.safetensors");
    ASSERT_EQ(ema.size(), lora.size());
    double apart = 0;
    for (const auto& [k, v] : lora) apart = std::max(apart, (v - ema.at(k)).abs().max().item<double>());
    EXPECT_GT(apart, 1e-4) << type << ": the EMA equals the LoRA";
  }
}

// lora.type: dora, loha and lokr reach every stage worker (ConfigureRequest.lora.type): two stages with the
// stage-local optimizer train bitwise the adapters of one process (train-local), in each type's own file.
TEST_F(PipelineTest, LoraTypesTrainTheAdaptersOfOneProcessBitwise) {
  for (const auto& [type, factor] : std::vector<std::pair<AdapterType, int64_t>>{
           {AdapterType::kDora, -1}, {AdapterType::kLoha, -1}, {AdapterType::kLokr, 4}}) {
    JobConfig job = Job("1f1b", true);
    job.lora.type = type;
    job.lora.lokr_factor = factor;
    const std::string ref = absl::StrCat(AdapterTypeName(type), "_ref"),
                      pp = absl::StrCat(AdapterTypeName(type), "_pp");
    ASSERT_TRUE(RunLocalTraining(job, JoinPath(*dir_, ref), 0).ok());
    auto run = RunCoordinator(job, Options(2, pp));
    ASSERT_TRUE(run.ok()) << run.status();
    const auto a = Lora(ref), b = Lora(pp);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [k, v] : a) {
      ASSERT_TRUE(b.count(k)) << k;
      EXPECT_TRUE(at::equal(v, b.at(k))) << AdapterTypeName(type) << ": " << k;
    }
  }
}

TEST_F(PipelineTest, NonFiniteStepIsNotAppliedAndStopsTheRun) {
  // lr 1e30: step 1 is finite but throws the LoRA far off, so step 2's loss is NaN. Neither trainer may apply
  // it: both fail naming the step and the micro-batch, and step 1's checkpoint stays the last LoRA.
  JobConfig job = Job("1f1b", false);
  job.optimizer.lr = 1e30;
  job.optimizer.warmup_steps = 0;
  job.checkpoint_every = 1;
  auto pipe = RunCoordinator(job, Options(2, "diverged"));
  ASSERT_FALSE(pipe.ok());
  EXPECT_EQ(pipe.status().code(), absl::StatusCode::kFailedPrecondition) << pipe.status();
  EXPECT_NE(pipe.status().message().find("step 2: the loss of micro-batch 0 is"), std::string::npos) << pipe.status();
  EXPECT_NE(pipe.status().message().find("(computed on stage 1)"), std::string::npos) << pipe.status();
  const std::string out = JoinPath(*dir_, "diverged");
  // lora.safetensors is step 1's (each checkpoint writes it): finite, if far off.
  for (const auto& [name, t] : Lora("diverged")) EXPECT_TRUE(at::isfinite(t).all().item<bool>()) << name;
  EXPECT_TRUE(PathExists(JoinPath(JoinPath(out, "checkpoints"), "step-1")));
  EXPECT_FALSE(PathExists(JoinPath(JoinPath(out, "checkpoints"), "step-2")));
  auto local = RunLocalTraining(job, JoinPath(*dir_, "diverged_local"), 0);
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("step 2: the loss of micro-batch 0 is"), std::string::npos) << local.status();
}

TEST_F(PipelineTest, ResumeRefusesATrainLogItCannotRead) {
  JobConfig job = Job("1f1b", false);
  job.checkpoint_every = 1;
  CoordinatorOptions first = Options(2, "badlog");
  first.steps = 2;
  ASSERT_TRUE(RunCoordinator(job, first).ok());
  const std::string log_path = JoinPath(JoinPath(*dir_, "badlog"), "train_log.jsonl");
  auto log = ReadFile(log_path);
  ASSERT_TRUE(log.ok());
  const size_t at = log->find("\"step\":1");
  ASSERT_NE(at, std::string::npos) << *log;
  ASSERT_TRUE(WriteFileAtomic(log_path, log->replace(at, 8, "\"step\":\"1\"")).ok());
  CoordinatorOptions second = Options(2, "badlog");
  second.resume = true;
  auto resumed = RunCoordinator(job, second);
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kDataLoss) << resumed.status();
  EXPECT_NE(resumed.status().message().find("train_log.jsonl:1: not a step record"), std::string::npos)
      << resumed.status();
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
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the coordinator's ephemeral CA
  lopts.extra_args.push_back("--model_root=" + *dir_);
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
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the coordinator's ephemeral CA
  lopts.extra_args.push_back("--wait_timeout_s=20");
  lopts.extra_args.push_back("--model_root=" + *dir_);
  auto workers = LocalWorkers::Start(2, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  JobConfig job = Job("1f1b", true);
  job.steps = 100000;  // runs until the kill
  CoordinatorOptions o = Options(2, "killed");
  o.workers = (*workers)->addresses();
  o.rpc_timeout = absl::Seconds(20);
  o.step_retries = 0;  // recovery off: the loss fails the run (tests/recovery_test.cc covers the redo)
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

// Issue 10: while a 2-stage job runs, a peer with a valid certificate (mutual TLS keeps everyone else out:
// SecurityTest) sends a bogus Configure, a NaN target under another job id and asks for the adapter. Each is refused,
// and the job finishes with the LoRA of an undisturbed run, bit for bit.
TEST_F(PipelineTest, StrangersCannotDisturbARunningJob) {
  JobConfig job = Job("1f1b", true);
  job.steps = 4;
  auto run = [&](const std::string& out, bool disturb) -> std::vector<grpc::StatusCode> {
    LocalWorkerOptions lopts;
    lopts.binary = JoinPath(BinDir(), "stage_worker");
    lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the coordinator's ephemeral CA
    lopts.extra_args.push_back("--model_root=" + *dir_);
    auto workers = LocalWorkers::Start(2, lopts);
    EXPECT_TRUE(workers.ok()) << workers.status();
    CoordinatorOptions o = Options(2, out);
    o.workers = (*workers)->addresses();
    std::vector<grpc::StatusCode> codes;
    std::thread stranger([&] {
      const std::string log_path = JoinPath(o.output_dir, "train_log.jsonl");
      for (int i = 0; disturb && i < 600; ++i) {
        auto log = ReadFile(log_path);
        if (log.ok() && std::count(log->begin(), log->end(), '\n') >= 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!disturb) return;
      auto stub = v1::StageService::NewStub(MakeChannel((*workers)->addresses()[1], ProcessChannelCredentials()));
      v1::ConfigureRequest bogus;
      bogus.set_job_id("stranger");
      bogus.set_num_stages(1);
      bogus.set_micro_batches(1);
      bogus.mutable_lora()->set_rank(4);
      bogus.mutable_lora()->set_alpha(4);
      bogus.set_model_path("/dev/zero");  // valid but for the path: refused by --model_root
      grpc::ClientContext c1;
      v1::ConfigureResponse resp;
      codes.push_back(stub->Configure(&c1, bogus, &resp).error_code());
      grpc::ClientContext c2;
      v1::PushAck ack;
      auto writer = stub->Push(&c2, &ack);
      v1::EnvelopeHeader h;
      h.set_job_id("stranger");
      h.set_step(3);
      h.set_kind(v1::EnvelopeHeader::TARGET);
      (void)WriteEnvelope(writer.get(), h, {{"target", at::full({1, 4, 4}, NAN)}});
      writer->WritesDone();
      codes.push_back(writer->Finish().error_code());
      grpc::ClientContext c3;
      v1::GetLoraRequest get;
      get.set_job_id("stranger");
      auto reader = stub->GetLora(&c3, get);
      v1::TensorChunk chunk;
      while (reader->Read(&chunk)) {
      }
      codes.push_back(reader->Finish().error_code());
    });
    auto result = RunCoordinator(job, o);
    stranger.join();
    EXPECT_TRUE(result.ok()) << result.status();
    return codes;
  };
  run("undisturbed", false);
  std::vector<grpc::StatusCode> codes = run("disturbed", true);
  EXPECT_EQ(codes,
            (std::vector<grpc::StatusCode>{grpc::StatusCode::PERMISSION_DENIED, grpc::StatusCode::FAILED_PRECONDITION,
                                           grpc::StatusCode::FAILED_PRECONDITION}));
  ExpectSameLora("undisturbed", "disturbed");
}

}  // namespace
}  // namespace baton

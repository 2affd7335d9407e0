// Pipeline throughput: the same FLUX.2 LoRA job trained by the coordinator over 1 stage and over 2 stage
// worker processes (gRPC on loopback), GPipe, 1F1B and interleaved 1F1B (2 stages, --chunks model chunks per
// stage: Megatron virtual stages), with and without recompute; every process computes
// on ONE thread, so 2 stages can at best use the machine's 2 cores where 1 stage uses one. Reports the
// median samples/s over the steps after the warm-up, the 2-stage speedup, and the measured pipeline bubble
// 1 - sum_s(forward_s + backward_s) / (p * step_seconds) next to the theory (p-1)/(v*m+p-1) and to a
// simulation of the schedule with the run's own per-stage costs (which accounts for stage imbalance).
// 2-stage runs use the planner's split (balanced by compute); the "-params" rows also run the split a
// parameter-count cost picks (steered through the job's memory_per_stage), which weighs a double block as
// two single blocks: the planner's rule before it was measured here. Weights and a synthetic cache are
// generated into a temp directory; a train-local run of the same job is the no-machinery reference. The last
// line is one JSON object.
//
//   bench_pipeline [--dim=384] [--double=2] [--single=4] [--joint=256] [--grid=16] [--text=64] [--m=8]
//                  [--rank=16] [--targets=all-linear] [--steps=3] [--warmup=1] [--rounds=4] [--chunks=2]
//                  [--recompute_off] [--recompute_auto] [--no_param_split] [--only=LABEL_PART] [--keep]
// The interleaved rows run when m is a multiple of 2 (Megatron's rule: m % stages == 0).
// --recompute_off adds the variants without recompute; --recompute_auto the variants with `recompute: auto`
// (the planner recomputes only where a stage's budget requires it: with no budget, nothing) and their ratio
// to train-local; --only keeps the variants whose label contains the text (diagnosis; rows it drops read as 0).
#include <ATen/Parallel.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/local_workers.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_config.h"
#include "core/model/flux2_weights.h"
#include "core/pipeline/chunks.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/schedule.h"
#include "core/train/job.h"
#include "core/train/local_trainer.h"
#include "core/util/files.h"

namespace baton {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_pipeline: %s\n", what.c_str());
  std::exit(1);
}

struct Args {
  int64_t dim = 384, double_blocks = 2, single_blocks = 4, joint = 256, grid = 16, text = 64;
  int m = 8;
  int64_t rank = 16;
  std::string targets = "all-linear";
  int steps = 3, warmup = 1, rounds = 4;
  int chunks = 2;  // interleaved: model chunks per stage
  bool recompute_off = false;
  bool recompute_auto = false;
  bool param_split = true;
  bool keep = false;
  std::string only;  // run only the variants whose label contains this (e.g. "1f1b/rc")
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* flag) -> const char* {
      size_t n = std::strlen(flag);
      return s.compare(0, n, flag) == 0 ? s.c_str() + n : nullptr;
    };
    if (const char* v = value("--dim="))
      a.dim = std::atoll(v);
    else if (const char* v = value("--double="))
      a.double_blocks = std::atoll(v);
    else if (const char* v = value("--single="))
      a.single_blocks = std::atoll(v);
    else if (const char* v = value("--joint="))
      a.joint = std::atoll(v);
    else if (const char* v = value("--grid="))
      a.grid = std::atoll(v);
    else if (const char* v = value("--text="))
      a.text = std::atoll(v);
    else if (const char* v = value("--m="))
      a.m = std::atoi(v);
    else if (const char* v = value("--rank="))
      a.rank = std::atoll(v);
    else if (const char* v = value("--targets="))
      a.targets = v;
    else if (const char* v = value("--steps="))
      a.steps = std::atoi(v);
    else if (const char* v = value("--warmup="))
      a.warmup = std::atoi(v);
    else if (const char* v = value("--rounds="))
      a.rounds = std::atoi(v);
    else if (const char* v = value("--chunks="))
      a.chunks = std::atoi(v);
    else if (s == "--recompute_off")
      a.recompute_off = true;
    else if (s == "--recompute_auto")
      a.recompute_auto = true;
    else if (s == "--no_param_split")
      a.param_split = false;
    else if (s == "--keep")
      a.keep = true;
    else if (const char* v = value("--only="))
      a.only = v;
    else
      Die("unknown flag " + s + " (see the comment atop bench/bench_pipeline.cc)");
  }
  if (a.dim % 64 != 0 || a.m < 1 || a.steps < 1 || a.warmup < 0 || a.rounds < 1 || a.chunks < 2) {
    Die("--dim must be a multiple of 64 (head_dim 64); --m, --steps, --rounds ≥ 1; --warmup ≥ 0; --chunks ≥ 2");
  }
  return a;
}

// A small FLUX.2-shaped transformer: head_dim 64, RoPE axes 4 x 16, in_channels 128, mlp_ratio 3.
Flux2Config ModelConfig(const Args& a) {
  Flux2Config c;
  c.in_channels = 128;
  c.num_layers = a.double_blocks;
  c.num_single_layers = a.single_blocks;
  c.attention_head_dim = 64;
  c.num_attention_heads = a.dim / 64;
  c.joint_attention_dim = a.joint;
  c.axes_dims_rope = {16, 16, 16, 16};
  return c;
}

struct Variant {
  int stages;
  std::string schedule;
  RecomputePolicy recompute;
  bool param_split = false;  // 2 stages: the parameter-count split instead of the planner's
  std::string Label() const {
    const char* rc = recompute == RecomputePolicy::kAll    ? "/rc"
                     : recompute == RecomputePolicy::kNone ? "/norc"
                                                           : "/auto";
    return absl::StrCat(stages, "st", param_split ? "-params" : "", "/", schedule, rc);
  }
};

// The planner's options as RunCoordinator builds them (coordinator/pipeline_trainer.cc) for this bench's
// job (fp32, one sample per micro-batch, every sample grid x grid image tokens + text tokens).
PartitionOptions CoordinatorPartitionOptions(const JobConfig& job, const Args& a, int stages) {
  PartitionOptions o;
  o.stages = stages;
  o.bytes_per_param = 4;
  o.lora_rank = job.lora.rank;
  o.all_linear = job.lora_targets == "all-linear";
  o.micro_batches = static_cast<int>(job.micro_batches);
  o.recompute = job.recompute;
  o.schedule = job.schedule == "gpipe" ? ScheduleKind::kGPipe : ScheduleKind::k1F1B;
  o.device = PlanDevice::kCpu;
  o.activation_bytes = 4;
  o.tokens_per_micro_batch = a.grid * a.grid + a.text;
  o.text_tokens_per_micro_batch = a.text;
  return o;
}

// The 2-stage boundary a parameter-count cost would choose: min over splits of the larger stage's params.
int64_t ParamBalancedBoundary(const Flux2Config& c) {
  const int64_t n = c.num_blocks();
  auto params = [&](int64_t i, int64_t j) {
    int64_t sum = 0;
    for (int64_t b = i; b < j; ++b) sum += c.IsDoubleBlock(b) ? c.DoubleBlockParams() : c.SingleBlockParams();
    return sum;
  };
  int64_t best = 1, best_max = INT64_MAX;
  for (int64_t b = 1; b < n; ++b) {
    const int64_t worst = std::max(params(0, b) + c.EmbedderParams(), params(b, n) + c.HeadParams());
    if (worst < best_max) best = b, best_max = worst;
  }
  return best;
}

// Blocks the planner gives stage `k` of 2 when only that stage has a budget (0 if nothing fits).
int64_t StageBlocks(const Flux2Config& c, const PartitionOptions& o, int k, int64_t budget) {
  PartitionOptions b = o;
  b.memory_budget_bytes = {int64_t{1} << 60, int64_t{1} << 60};
  b.memory_budget_bytes[k] = budget;
  auto plan = PartitionFlux2(c, b);
  if (!plan.ok() || !plan->fits) return 0;
  return plan->stages[k].block_end - plan->stages[k].block_begin;
}

// Memory budgets (job.memory_per_stage) that make the planner split 2 stages at `boundary`: the stage that
// must get fewer blocks than the planner would give it is capped halfway between the smallest budgets that
// admit its block count and one more block (found by bisection, so it does not depend on the memory
// model's details). This is how the bench runs a split other than the planner's through the real
// coordinator.
std::vector<std::string> BudgetsForBoundary(const Flux2Config& c, const PartitionOptions& o, int64_t boundary) {
  auto plan = PartitionFlux2(c, o);
  if (!plan.ok()) Die(plan.status().ToString());
  const int64_t n = c.num_blocks();
  const int k = boundary < plan->stages[0].block_end ? 0 : 1;  // the stage to cap
  const int64_t blocks = k == 0 ? boundary : n - boundary;
  auto smallest = [&](int64_t want) {
    int64_t lo = 0, hi = int64_t{1} << 50;
    while (lo + 1 < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      (StageBlocks(c, o, k, mid) >= want ? hi : lo) = mid;
    }
    return hi;
  };
  const int64_t a = smallest(blocks), b = smallest(blocks + 1);
  const int64_t cap = a + (b - a) / 2;
  if (StageBlocks(c, o, k, cap) != blocks) Die("cannot steer the planner to the requested split");
  std::vector<std::string> budgets = {absl::StrCat(int64_t{1} << 60), absl::StrCat(int64_t{1} << 60)};
  budgets[k] = absl::StrCat(cap);
  return budgets;
}

struct Measured {
  std::vector<double> samples_per_s;        // measured steps, all rounds
  std::vector<double> round_samples_per_s;  // per round: the median over its measured steps
  std::vector<double> step_s;
  std::vector<double> prepare_s, optimizer_s;         // the coordinator's serial work per measured step
  std::vector<double> bubble;                         // per measured step
  std::vector<std::vector<double>> fwd, bwd, idle;    // [stage][measured step]
  double wall_s = 0, foreign_cpu_s = 0, steal_s = 0;  // whole runs, all rounds
};

// CPU accounting, to tell how quiet the machine was: all CPUs' busy and steal time (/proc/stat) against
// this process's and its reaped children's (the stage workers') CPU time.
struct CpuSample {
  double busy_s = 0, steal_s = 0, ours_s = 0;
  std::chrono::steady_clock::time_point t;
};

CpuSample SampleCpu() {
  CpuSample c;
  c.t = std::chrono::steady_clock::now();
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  c.busy_s = (user + nice + system + irq + softirq) / tick;
  c.steal_s = steal / tick;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    ::getrusage(who, &u);
    c.ours_s += u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }
  return c;
}

void AddCpu(const CpuSample& a, const CpuSample& b, Measured& out) {
  out.wall_s += std::chrono::duration<double>(b.t - a.t).count();
  out.foreign_cpu_s += std::max(0.0, (b.busy_s - a.busy_s) - (b.ours_s - a.ours_s));
  out.steal_s += b.steal_s - a.steal_s;
}

// Single-thread GEMM throughput (GFLOP/s) of `threads` threads running at once for `seconds`, summed:
// how far two busy cores of this machine are from twice one (turbo bins, shared caches, SMT siblings or
// neighbours on the host all show up here). Shapes like a D=384 linear over 320 tokens.
double GemmGflops(int threads, double seconds) {
  std::vector<double> gflops(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      at::set_num_threads(1);
      const at::Tensor a = at::randn({320, 384}), b = at::randn({384, 1152});
      const auto t0 = std::chrono::steady_clock::now();
      int64_t n = 0;
      double elapsed = 0;
      do {
        for (int k = 0; k < 10; ++k) at::mm(a, b);
        n += 10;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } while (elapsed < seconds);
      gflops[i] = 2.0 * 320 * 384 * 1152 * static_cast<double>(n) / elapsed / 1e9;
    });
  }
  for (auto& t : pool) t.join();
  double sum = 0;
  for (double g : gflops) sum += g;
  return sum;
}

// One RunCoordinator (fresh local workers), keeping the steps after the warm-up.
void RunOnce(const JobConfig& base, const Variant& v, const Args& a, const std::string& dir, int round, Measured& out) {
  JobConfig job = base;
  job.schedule = v.schedule;
  job.chunks = v.schedule == "interleaved" ? a.chunks : 1;
  job.recompute = v.recompute;
  if (v.param_split) {
    const Flux2Config c = ModelConfig(a);
    job.memory_per_stage = BudgetsForBoundary(c, CoordinatorPartitionOptions(job, a, 2), ParamBalancedBoundary(c));
  }
  job.steps = a.warmup + a.steps;
  CoordinatorOptions o;
  o.stages = v.stages;
  o.output_dir = JoinPath(dir, absl::StrCat("run_", v.stages, v.schedule, static_cast<int>(v.recompute), "_", round));
  o.quiet = true;
  o.rpc_timeout = absl::Seconds(600);
  const char* bin = std::getenv("BATON_BIN_DIR");
  o.stage_worker_binary = bin ? JoinPath(bin, "stage_worker") : DefaultStageWorkerBinary();
  const CpuSample before = SampleCpu();
  auto result = RunCoordinator(job, o);
  AddCpu(before, SampleCpu(), out);
  if (!result.ok()) Die(absl::StrCat(v.Label(), ": ", result.status().ToString()));
  if (out.fwd.empty()) out.fwd.resize(v.stages), out.bwd.resize(v.stages), out.idle.resize(v.stages);
  std::vector<double> this_round;
  for (size_t i = a.warmup; i < result->steps.size(); ++i) {
    const PipelineStepRecord& r = result->steps[i];
    out.samples_per_s.push_back(r.samples_per_second);
    this_round.push_back(r.samples_per_second);
    out.step_s.push_back(r.step_seconds);
    out.prepare_s.push_back(r.prepare_seconds);
    out.optimizer_s.push_back(r.optimizer_seconds);
    double busy = 0;
    for (int s = 0; s < v.stages; ++s) {
      const StageStepStats& st = r.stages[s];
      busy += st.forward_seconds + st.backward_seconds;
      out.fwd[s].push_back(st.forward_seconds);
      out.bwd[s].push_back(st.backward_seconds);
      out.idle[s].push_back(st.idle_seconds);
    }
    out.bubble.push_back(1.0 - busy / (v.stages * r.step_seconds));
  }
  out.round_samples_per_s.push_back(Median(this_round));
  (void)RemoveAll(o.output_dir);
}

int Main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  at::set_num_threads(1);

  const Flux2Config c = ModelConfig(a);
  if (absl::Status s = c.Validate(); !s.ok()) Die(s.ToString());

  char tmpl[] = "/tmp/bench_pipeline_XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp failed");
  const std::string dir = tmpl;
  const std::string model = JoinPath(dir, "model"), cache = JoinPath(dir, "cache");
  if (absl::Status s = WriteRandomFlux2Weights(c, model, 1); !s.ok()) Die(s.ToString());
  const int64_t samples = 4 * a.m;
  if (absl::Status s =
          WriteSyntheticCache(cache, c.in_channels, c.joint_attention_dim, samples, {{a.grid, a.grid}}, a.text, 7);
      !s.ok()) {
    Die(s.ToString());
  }
  auto job =
      ParseJobYaml(absl::StrCat("model: ", model, "\ndataset: ", cache, "\nlora: {rank: ", a.rank, ", alpha: ", a.rank,
                                ", targets: ", a.targets, "}\noptimizer: {lr: 1.0e-3}\nsteps: 1\nbatch_size: ", a.m,
                                "\nmicro_batches: ", a.m, "\nseed: 1\ndtype: fp32\nthreads: 1\n"),
                   "bench_pipeline job");
  if (!job.ok()) Die(job.status().ToString());

  // The planner's 2-stage split, and the parameter-count split when it differs (see BudgetsForBoundary).
  const int64_t n = c.num_blocks();
  auto planned = PartitionFlux2(c, CoordinatorPartitionOptions(*job, a, 2));
  if (!planned.ok()) Die(planned.status().ToString());
  const int64_t planner_boundary = planned->stages[0].block_end;
  const int64_t param_boundary = ParamBalancedBoundary(c);
  const bool try_params = a.param_split && planner_boundary != param_boundary;
  // The interleaved rows' split (as the coordinator plans it): the simulation shares each stage's measured cost
  // among its chunks by this plan's cost model.
  PartitionOptions interleaved_options = CoordinatorPartitionOptions(*job, a, 2);
  interleaved_options.schedule = ScheduleKind::kInterleaved1F1B;
  const absl::StatusOr<ChunkPlan> chunk_plan = PartitionFlux2Chunks(c, interleaved_options, a.chunks);

  // What `recompute: auto` decides for the 2-stage split (no budget: nothing).
  int64_t auto_rc[2] = {0, 0};
  {
    JobConfig j = *job;
    j.recompute = RecomputePolicy::kAuto;
    auto p = PartitionFlux2(c, CoordinatorPartitionOptions(j, a, 2));
    if (!p.ok()) Die(p.status().ToString());
    for (int k = 0; k < 2; ++k) auto_rc[k] = p->stages[k].recompute_blocks;
  }
  std::vector<Variant> variants;
  for (RecomputePolicy rc : {RecomputePolicy::kAll, RecomputePolicy::kNone, RecomputePolicy::kAuto}) {
    if (rc == RecomputePolicy::kNone && !a.recompute_off) continue;
    if (rc == RecomputePolicy::kAuto && !a.recompute_auto) continue;
    for (const char* sched : {"gpipe", "1f1b"}) {
      if (rc == RecomputePolicy::kAuto && std::string(sched) == "gpipe") continue;  // 1f1b is the default job
      variants.push_back({1, sched, rc});
      variants.push_back({2, sched, rc});
      if (try_params) variants.push_back({2, sched, rc, /*param_split=*/true});
    }
    if (a.m % 2 == 0) variants.push_back({2, "interleaved", rc});
  }
  if (!a.only.empty()) {
    variants.erase(std::remove_if(variants.begin(), variants.end(),
                                  [&](const Variant& v) { return v.Label().find(a.only) == std::string::npos; }),
                   variants.end());
  }
  // Machine calibration: GEMM throughput on 1 thread vs 2 threads at once, before every round and after.
  std::vector<double> gemm1, gemm2;
  auto calibrate = [&] {
    for (int r = 0; r < 2; ++r) {
      gemm1.push_back(GemmGflops(1, 1.5));
      gemm2.push_back(GemmGflops(2, 1.5));
    }
  };
  std::vector<Measured> measured(variants.size());
  // This machine's single-core speed drifts by tens of percent within minutes (other tenants of the host;
  // see the GEMM range printed below), which would swamp the ratio of runs taken far apart. So rounds
  // interleave the variants, a closing 1-stage run follows the last round, and every 2-stage run is compared
  // with the mean of the 1-stage runs just before and just after it (at 1 stage GPipe and 1F1B do the same
  // work in a different order, so either serves as the reference).
  struct Run {
    size_t variant;
    double samples_per_s;
  };
  std::vector<Run> sequence;
  auto run = [&](size_t i, int round) {
    std::fprintf(stderr, "bench_pipeline: %s %s  %s\n",
                 absl::FormatTime("%H:%M:%S", absl::Now(), absl::UTCTimeZone()).c_str(),
                 round < a.rounds ? absl::StrCat("round ", round + 1, "/", a.rounds).c_str() : "closing run",
                 variants[i].Label().c_str());
    RunOnce(*job, variants[i], a, dir, round, measured[i]);
    sequence.push_back({i, measured[i].round_samples_per_s.back()});
  };
  for (int round = 0; round < a.rounds; ++round) {
    calibrate();
    for (size_t i = 0; i < variants.size(); ++i) run(i, round);
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].stages == 1 && variants[i].recompute == variants.back().recompute) {
      run(i, a.rounds);  // the closing reference
      break;
    }
  }
  // Per 2-stage variant: its throughput over the bracketing 1-stage runs' mean, one ratio per round.
  std::vector<std::vector<double>> ratios(variants.size());
  for (size_t k = 0; k < sequence.size(); ++k) {
    const Variant& v = variants[sequence[k].variant];
    if (v.stages == 1) continue;
    std::vector<double> refs;
    for (int dir_step : {-1, 1}) {
      for (int64_t j = static_cast<int64_t>(k) + dir_step; j >= 0 && j < static_cast<int64_t>(sequence.size());
           j += dir_step) {
        const Variant& u = variants[sequence[j].variant];
        if (u.stages == 1 && u.recompute == v.recompute) {
          refs.push_back(sequence[j].samples_per_s);
          break;
        }
      }
    }
    if (!refs.empty()) ratios[sequence[k].variant].push_back(sequence[k].samples_per_s / Mean(refs));
  }
  calibrate();
  const double gemm_scaling = Median(gemm2) / Median(gemm1);
  const auto [gemm1_min, gemm1_max] = std::minmax_element(gemm1.begin(), gemm1.end());
  // Single-process reference (train-local), same job: what the pipeline machinery costs at 1 stage.
  double local_sps = 0;
  if (a.only.empty()) {
    JobConfig j = *job;
    j.steps = a.warmup + a.steps;
    auto local = RunLocalTraining(j, JoinPath(dir, "local"), 0);
    if (!local.ok()) Die(local.status().ToString());
    std::vector<double> sps;
    for (size_t i = a.warmup; i < local->steps.size(); ++i) sps.push_back(local->steps[i].samples_per_second);
    local_sps = Median(sps);
  }

  // ---- report -----------------------------------------------------------------------------------------
  const int64_t img_tokens = a.grid * a.grid;
  std::printf(
      "FLUX.2-shaped model: D=%lld (%lld heads x 64), %lld double + %lld single blocks, in_channels %lld, "
      "joint_attention_dim %lld; %lld image + %lld text tokens; LoRA rank %lld on %s; fp32\n",
      (long long)a.dim, (long long)c.num_attention_heads, (long long)a.double_blocks, (long long)a.single_blocks,
      (long long)c.in_channels, (long long)a.joint, (long long)img_tokens, (long long)a.text, (long long)a.rank,
      a.targets.c_str());
  std::printf(
      "batch %d = m %d micro-batches of 1; 1 compute thread per process (coordinator and each stage "
      "worker); %d warm-up + %d measured steps x %d round(s); samples/s and step_s are medians, the rest "
      "means over measured steps\n",
      a.m, a.m, a.warmup, a.steps, a.rounds);
  std::printf("2-stage split, planner (cost = compute): stage 0 = %s | stage 1 = %s\n",
              DescribeBlocks(c, 0, planner_boundary).c_str(), DescribeBlocks(c, planner_boundary, n).c_str());
  if (try_params) {
    std::printf(
        "2-stage split, -params rows (cost = parameter count, forced with memory_per_stage): stage 0 = %s | "
        "stage 1 = %s\n",
        DescribeBlocks(c, 0, param_boundary).c_str(), DescribeBlocks(c, param_boundary, n).c_str());
  }
  if (chunk_plan.ok()) std::printf("interleaved rows, the chunk planner's %s", RenderChunkPlan(c, *chunk_plan).c_str());
  std::printf(
      "machine: 1-thread GEMM %.1f GFLOP/s (%.1f..%.1f over the run), 2 threads at once %.1f GFLOP/s in "
      "total = %.2fx: the ceiling for 2 single-threaded stages here (medians of 2 per round + 2 after)\n",
      Median(gemm1), *gemm1_min, *gemm1_max, Median(gemm2), gemm_scaling);
  std::printf(
      "bubble = 1 - sum_s(fwd_s + bwd_s) / (p * step_s); theory = (p-1)/(v*m+p-1) (v = 1 but interleaved); "
      "simulated = the schedule timed with the run's own per-stage F/B costs (imbalance, no comm; interleaved: "
      "each stage's cost shared among its chunks by the planner's cost model); others/steal = CPU cores used by "
      "other processes / stolen by the hypervisor, averaged over the run; coord ms = the coordinator's serial "
      "work per step: sampling + shell before the stages start, clipping + AdamW after\n\n");
  std::printf("%-20s %9s %8s %19s %7s %7s %9s %6s %6s %11s  %s\n", "variant", "samples/s", "step_s", "speedup (range)",
              "bubble", "theory", "simulated", "others", "steal", "coord ms",
              "per stage: fwd / bwd / idle seconds per step");
  std::map<std::string, double> sps, bubble, simulated, speedups;
  double max_others = 0;
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    const Measured& r = measured[i];
    const double tput = Median(r.samples_per_s);
    sps[v.Label()] = tput;
    bubble[v.Label()] = Mean(r.bubble);
    std::vector<double> f, b;  // per micro-batch
    for (int s = 0; s < v.stages; ++s) {
      f.push_back(Mean(r.fwd[s]) / a.m);
      b.push_back(Mean(r.bwd[s]) / a.m);
    }
    const int v_chunks = v.schedule == "interleaved" ? a.chunks : 1;
    auto kind = ParseScheduleKind(v.schedule);
    auto sched = kind.ok() ? MakeSchedule(*kind, v.stages, a.m, v_chunks) : kind.status();
    auto tl = sched.ok() ? SimulateScheduleWithCosts(*sched, f, b, 0) : sched.status();
    if (sched.ok() && v_chunks > 1 && chunk_plan.ok()) {
      std::vector<std::vector<double>> fc(v.stages), bc(v.stages);
      for (int s = 0; s < v.stages; ++s) {
        const std::vector<int> us = WorkerVirtualStages(v.stages, v_chunks, s);
        double total = 0;
        for (int u : us) total += chunk_plan->virtual_stages[u].cost;
        for (int u : us) {
          fc[s].push_back(f[s] * chunk_plan->virtual_stages[u].cost / total);
          bc[s].push_back(b[s] * chunk_plan->virtual_stages[u].cost / total);
        }
      }
      tl = SimulateScheduleWithChunkCosts(*sched, fc, bc, 0);
    }
    simulated[v.Label()] = tl.ok() ? tl->bubble_fraction : -1;
    std::string per_stage;
    for (int s = 0; s < v.stages; ++s) {
      absl::StrAppendFormat(&per_stage, "%s%.3f / %.3f / %.3f", s ? "  |  " : "", Mean(r.fwd[s]), Mean(r.bwd[s]),
                            Mean(r.idle[s]));
    }
    // Speedup: the median over rounds of the ratio to the bracketing 1-stage runs.
    std::string speedup_text;
    if (!ratios[i].empty()) {
      speedups[v.Label()] = Median(ratios[i]);
      const auto [lo, hi] = std::minmax_element(ratios[i].begin(), ratios[i].end());
      speedup_text = absl::StrFormat("%.3fx (%.2f..%.2f)", Median(ratios[i]), *lo, *hi);
    }
    const std::string coord = absl::StrFormat("%.0f + %.0f", 1e3 * Mean(r.prepare_s), 1e3 * Mean(r.optimizer_s));
    std::printf("%-20s %9.3f %8.3f %19s %7.3f %7.3f %9.3f %6.2f %6.2f %11s  %s\n", v.Label().c_str(), tput,
                Median(r.step_s), speedup_text.c_str(), bubble[v.Label()], TheoreticalBubble(v.stages, a.m, v_chunks),
                simulated[v.Label()], r.foreign_cpu_s / r.wall_s, r.steal_s / r.wall_s, coord.c_str(),
                per_stage.c_str());
    max_others = std::max(max_others, r.foreign_cpu_s / r.wall_s);
  }
  if (a.only.empty()) {
    std::printf("%-20s %9.3f   (one process, no pipeline machinery and no recompute; last, not interleaved)\n",
                "train-local", local_sps);
  }
  if (a.recompute_auto && local_sps > 0 && sps.count("2st/1f1b/auto")) {
    std::printf(
        "recompute auto: 2 stages (1f1b) %.3f samples/s = %.3fx train-local (target > 1x when the model fits one "
        "process); the planner recomputed %lld + %lld blocks on the 2 stages\n",
        sps["2st/1f1b/auto"], sps["2st/1f1b/auto"] / local_sps, (long long)auto_rc[0], (long long)auto_rc[1]);
  }

  // Headline: the default job (1F1B, recompute, the planner's split).
  auto num = [](double x) { return std::isfinite(x) ? absl::StrFormat("%.4f", x) : std::string("null"); };
  const double theory2 = TheoreticalBubble(2, a.m);
  const double speedup = speedups["2st/1f1b/rc"];
  const std::string best_sched = speedups["2st/1f1b/rc"] >= speedups["2st/gpipe/rc"] ? "1f1b" : "gpipe";
  const double best2 = std::max(speedups["2st/1f1b/rc"], speedups["2st/gpipe/rc"]);
  std::printf(
      "\nspeedup_2_stages = %.3fx (2 stages / 1 stage, 1f1b, recompute, planner's split; median over rounds "
      "of the ratio to the bracketing 1-stage runs; best 2-stage schedule: %s at %.3fx); target >= 1.7x: %s\n",
      speedup, best_sched.c_str(), best2, speedup >= 1.7 ? "met" : "MISSED");
  std::printf("bubble (2 stages, 1f1b, recompute): measured %.3f, simulated %.3f, theory %.3f\n", bubble["2st/1f1b/rc"],
              simulated["2st/1f1b/rc"], theory2);
  // Drift-free view: if the 2 stages together did exactly the 1-stage run's compute, the speedup would be
  // p(1 - bubble_2) / (1 - bubble_1), from bubbles that are each measured within one run.
  auto equal_work = [&](const std::string& label) {
    std::vector<double> one_stage;
    for (const char* l : {"1st/gpipe/rc", "1st/1f1b/rc"}) {
      if (bubble.count(l)) one_stage.push_back(bubble.at(l));
    }
    return bubble.count(label) && !one_stage.empty() ? 2 * (1 - bubble.at(label)) / (1 - Mean(one_stage)) : NAN;
  };
  std::printf(
      "speedup at equal work, 2(1 - bubble_2st) / (1 - bubble_1st): planner split %.3fx, parameter-count "
      "split %.3fx (1f1b, recompute); the measured speedup falls below this by the extra compute time of 2 "
      "busy cores plus noise\n",
      equal_work("2st/1f1b/rc"), equal_work("2st-params/1f1b/rc"));
  const double speedup_params = try_params ? speedups["2st-params/1f1b/rc"] : NAN;
  if (try_params) {
    std::printf(
        "parameter-count split (1f1b, recompute): speedup %.3fx, bubble measured %.3f, simulated %.3f; "
        "planner (compute) split / parameter-count split = %.3fx\n",
        speedup_params, bubble["2st-params/1f1b/rc"], simulated["2st-params/1f1b/rc"], speedup / speedup_params);
  }

  // Interleaved 1F1B (Megatron virtual stages), recompute, the chunk planner's split.
  const std::string il = "2st/interleaved/rc";
  const bool have_il = speedups.count(il) > 0;
  const double il_speedup = have_il ? speedups[il] : NAN;
  const double il_theory = TheoreticalBubble(2, a.m, a.chunks);
  if (have_il) {
    std::printf(
        "speedup_2_stages_interleaved = %.3fx (2 stages x %d chunks / 1 stage, recompute); target >= 1.8x: %s; "
        "bubble measured %.3f, simulated %.3f, theory (p-1)/(v*m+p-1) = %.3f: %.3f beyond theory; at equal work "
        "%.3fx\n",
        il_speedup, a.chunks, il_speedup >= 1.8 ? "met" : "MISSED", bubble[il], simulated[il], il_theory,
        bubble[il] - il_theory, equal_work(il));
  }

  std::string raw;
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::string l = variants[i].Label();
    const Measured& r = measured[i];
    absl::StrAppendFormat(&raw,
                          "%s\"%s\":{\"samples_per_s\":%.4f,\"speedup\":%s,\"bubble\":%.4f,"
                          "\"bubble_simulated\":%.4f,\"foreign_cpu_cores\":%.3f,\"steal_cores\":%.3f}",
                          i ? "," : "", l, sps[l], speedups.count(l) ? num(speedups[l]) : "null", bubble[l],
                          simulated[l], r.foreign_cpu_s / r.wall_s, r.steal_s / r.wall_s);
  }
  std::printf(
      "{\"bench\":\"pipeline\",\"speedup_2_stages\":%s,\"speedup_basis\":\"2 stages / 1 stage, 1f1b, recompute, "
      "planner split, median over rounds of the ratio to the bracketing 1-stage runs\","
      "\"speedup_2_stages_best_schedule\":%s,\"best_schedule\":\"%s\",\"speedup_equal_work\":%s,"
      "\"speedup_equal_work_param_split\":%s,"
      "\"speedup_2_stages_param_split\":%s,\"speedup_2_stages_interleaved\":%s,\"chunks\":%d,"
      "\"bubble_measured_interleaved\":%s,\"bubble_theory_interleaved\":%.4f,"
      "\"speedup_equal_work_interleaved\":%s,\"bubble_measured\":%s,\"bubble_simulated\":%s,"
      "\"bubble_theory\":%.4f,\"bubble_measured_param_split\":%s,\"samples_per_s_1_stage\":%s,"
      "\"samples_per_s_2_stages\":%s,\"samples_per_s_2_stages_param_split\":%s,"
      "\"samples_per_s_train_local\":%s,\"gemm_1_thread_gflops\":%.2f,\"gemm_2_thread_scaling\":%.4f,"
      "\"max_foreign_cpu_cores\":%.3f,\"planner_split_boundary\":%lld,\"runs\":{%s},\"config\":{\"dim\":%lld,"
      "\"head_dim\":64,\"double_blocks\":%lld,\"single_blocks\":%lld,\"in_channels\":128,"
      "\"joint_attention_dim\":%lld,\"image_tokens\":%lld,\"text_tokens\":%lld,\"micro_batches\":%d,"
      "\"micro_batch_size\":1,\"lora_rank\":%lld,\"lora_targets\":\"%s\",\"dtype\":\"fp32\",\"threads\":1,"
      "\"warmup_steps\":%d,\"measured_steps\":%d,\"rounds\":%d}}\n",
      num(speedup).c_str(), num(best2).c_str(), best_sched.c_str(), num(equal_work("2st/1f1b/rc")).c_str(),
      num(equal_work("2st-params/1f1b/rc")).c_str(), num(speedup_params).c_str(), num(il_speedup).c_str(), a.chunks,
      num(have_il ? bubble[il] : NAN).c_str(), il_theory, num(have_il ? equal_work(il) : NAN).c_str(),
      num(bubble["2st/1f1b/rc"]).c_str(), num(simulated["2st/1f1b/rc"]).c_str(), theory2,
      num(try_params ? bubble["2st-params/1f1b/rc"] : NAN).c_str(), num(sps["1st/1f1b/rc"]).c_str(),
      num(sps["2st/1f1b/rc"]).c_str(), num(try_params ? sps["2st-params/1f1b/rc"] : NAN).c_str(),
      num(a.only.empty() ? local_sps : NAN).c_str(), Median(gemm1), gemm_scaling, max_others,
      (long long)planner_boundary, raw.c_str(), (long long)a.dim, (long long)a.double_blocks,
      (long long)a.single_blocks, (long long)a.joint, (long long)img_tokens, (long long)a.text, a.m, (long long)a.rank,
      a.targets.c_str(), a.warmup, a.steps, a.rounds);
  if (!a.keep) (void)RemoveAll(dir);
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) { return baton::Main(argc, argv); }

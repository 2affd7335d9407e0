// The planner, measured: trains a scaled-down FLUX.2 LoRA job through the real coordinator over real
// stage_worker processes on CPU (gRPC on loopback), reads each stage process's peak resident set (VmHWM
// from /proc/<pid>/status once the job is done) and prints it next to the planner's estimate for the same
// job (same config, micro-batches, schedule, recompute, dtype, device = cpu), with the ratio
// measured / estimate. Also prints each worker's resident set before it was configured (the fixed
// per-process cost the planner models as kCpuProcessBytes). The last line is one JSON object.
//
//   bench_memory [--dim=1536] [--double=2] [--single=12] [--joint=1024] [--grid=8] [--text=16] [--m=2]
//                [--stages=2] [--rank=16] [--targets=all-linear] [--steps=1] [--schedule=1f1b]
//                [--recompute=true|false|auto] [--budget=BYTES] [--threads=1] [--keep]
// Defaults: a ~0.5 B model (2 double + 12 single blocks at D = 1536), fp32.
#include <ATen/Parallel.h>
#include <absl/flags/flag.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/flux2_bench_flags.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_config.h"
#include "core/model/flux2_weights.h"
#include "core/pipeline/partition.h"
#include "core/train/job.h"
#include "core/util/files.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/local_workers.h"

ABSL_FLAG(int, m, 2, "micro-batches per step");
ABSL_FLAG(int, stages, 2, "stage worker processes");
ABSL_FLAG(int, steps, 1, "training steps");
ABSL_FLAG(std::string, schedule, "1f1b", "pipeline schedule");
ABSL_FLAG(std::string, recompute, "true", "activation recompute: true | false | auto");
ABSL_FLAG(std::string, budget, "", "memory budget per stage (BYTES; with --recompute=auto)");
ABSL_FLAG(int, threads, 1, "compute threads per stage worker");
ABSL_FLAG(bool, keep, false, "keep the temporary folder (weights, cache, job) for a look afterwards");

namespace baton {
namespace {

struct Args : Flux2BenchRun {
  int m = 2, stages = 2, steps = 1, threads = 1;
  std::string schedule = "1f1b", recompute = "true", budget;
  bool keep = false;
};

Args ParseArgs(int argc, char** argv) {
  Flux2BenchRun defaults;
  defaults.dim = 1536;
  defaults.double_blocks = 2;
  defaults.single_blocks = 12;
  defaults.joint = 1024;
  defaults.grid = 8;
  defaults.text = 16;
  SetFlux2BenchDefaults(defaults);
  if (absl::Status s = ParseBenchFlags(
          argc, argv,
          "bench_memory [--dim=1536] [--double=2] [--single=12] [--joint=1024] [--grid=8] [--text=16] [--m=2] "
          "[--stages=2] [--rank=16] [--targets=all-linear] [--steps=1] [--schedule=1f1b] [--recompute=true|false|auto] "
          "[--budget=BYTES] [--threads=1] [--keep] (see the comment atop bench/bench_memory.cc)");
      !s.ok()) {
    BenchDie(std::string(s.message()));
  }
  Args a;
  static_cast<Flux2BenchRun&>(a) = Flux2BenchFromFlags();
  a.m = absl::GetFlag(FLAGS_m);
  a.stages = absl::GetFlag(FLAGS_stages);
  a.steps = absl::GetFlag(FLAGS_steps);
  a.threads = absl::GetFlag(FLAGS_threads);
  a.schedule = absl::GetFlag(FLAGS_schedule);
  a.recompute = absl::GetFlag(FLAGS_recompute);
  a.budget = absl::GetFlag(FLAGS_budget);
  a.keep = absl::GetFlag(FLAGS_keep);
  if (a.dim % 64 != 0 || a.m < 1 || a.steps < 1 || a.stages < 1) {
    BenchDie("--dim must be a multiple of 64 (head_dim 64); --m, --steps, --stages >= 1");
  }
  return a;
}

// Bytes of one "Name:  123 kB" line of /proc/<pid>/status (-1 when absent).
int64_t StatusBytes(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      int64_t kb = -1;
      std::string rest = line.substr(name.size() + 1);
      rest.erase(std::remove(rest.begin(), rest.end(), ' '), rest.end());
      rest.erase(std::remove(rest.begin(), rest.end(), '\t'), rest.end());
      if (absl::EndsWith(rest, "kB")) rest.resize(rest.size() - 2);
      if (absl::SimpleAtoi(rest, &kb)) return kb * 1024;
    }
  }
  return -1;
}

// The planner's options exactly as RunCoordinator builds them (coordinator/pipeline_trainer.cc, PlanStages)
// for this job: fp32, one sample per micro-batch of grid x grid image + text tokens, stages on CPU.
PartitionOptions PlannerOptions(const JobConfig& job, const Args& a) {
  PartitionOptions o;
  o.stages = a.stages;
  o.bytes_per_param = 4;
  o.activation_bytes = 4;
  o.lora_rank = job.lora.rank;
  o.all_linear = job.lora_targets == "all-linear";
  o.micro_batches = static_cast<int>(job.micro_batches);
  o.schedule = job.schedule == "gpipe" ? ScheduleKind::kGPipe : ScheduleKind::k1F1B;
  o.recompute = job.recompute;
  o.device = PlanDevice::kCpu;
  o.tokens_per_micro_batch = a.grid * a.grid + a.text;
  o.text_tokens_per_micro_batch = a.text;
  for (const std::string& b : job.memory_per_stage) {
    auto bytes = ParseByteSize(b);
    if (!bytes.ok()) BenchDie(bytes.status().ToString());
    o.memory_budget_bytes.push_back(*bytes);
  }
  return o;
}

double Mb(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

int Main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  at::set_num_threads(1);
  const Flux2Config c = Flux2BenchConfig(a);
  if (absl::Status s = c.Validate(); !s.ok()) BenchDie(s.ToString());

  char tmpl[] = "/tmp/bench_memory_XXXXXX";
  if (!::mkdtemp(tmpl)) BenchDie("mkdtemp failed");
  const std::string dir = tmpl;
  const std::string model = JoinPath(dir, "model"), cache = JoinPath(dir, "cache");
  if (absl::Status s = WriteRandomFlux2Weights(c, model, 1); !s.ok()) BenchDie(s.ToString());
  if (absl::Status s =
          WriteSyntheticCache(cache, c.in_channels, c.joint_attention_dim, 2 * a.m, {{a.grid, a.grid}}, a.text, 7);
      !s.ok()) {
    BenchDie(s.ToString());
  }
  auto job =
      ParseJobYaml(absl::StrCat("model: ", model, "\ndataset: ", cache, "\nlora: {rank: ", a.rank, ", alpha: ", a.rank,
                                ", targets: ", a.targets, "}\noptimizer: {lr: 1.0e-3}\nsteps: ", a.steps,
                                "\nbatch_size: ", a.m, "\nmicro_batches: ", a.m, "\nschedule: ", a.schedule,
                                "\nrecompute: ", a.recompute, "\nseed: 1\ndtype: fp32\nthreads: ", a.threads, "\n",
                                a.budget.empty() ? "" : absl::StrCat("memory_per_stage: ", a.budget, "\n")),
                   "bench_memory job");
  if (!job.ok()) BenchDie(job.status().ToString());
  auto plan = PartitionFlux2(c, PlannerOptions(*job, a));
  if (!plan.ok()) BenchDie(plan.status().ToString());

  // The workers are started here, not by the coordinator, so their pids outlive the run for /proc reads.
  LocalWorkerOptions lopts;
  const char* bin = std::getenv("BATON_BIN_DIR");
  lopts.binary = bin ? JoinPath(bin, "stage_worker") : DefaultStageWorkerBinary();
  lopts.threads = a.threads;
  auto tls = LocalWorkerSecurityArgs();  // mutual TLS with an ephemeral CA, as the coordinator's own local workers
  if (!tls.ok()) BenchDie(tls.status().ToString());
  lopts.extra_args = *tls;
  lopts.extra_args.push_back("--wait_timeout_s=600");
  lopts.extra_args.push_back("--model_root=" + dir);
  auto workers = LocalWorkers::Start(a.stages, lopts);
  if (!workers.ok()) BenchDie(workers.status().ToString());
  const std::vector<pid_t> pids = (*workers)->pids();
  ::usleep(300'000);  // let each worker settle after LISTENING (its gRPC threads start lazily)
  std::vector<int64_t> baseline;
  for (pid_t pid : pids) baseline.push_back(StatusBytes(pid, "VmRSS"));

  CoordinatorOptions o;
  o.stages = a.stages;
  o.workers = (*workers)->addresses();
  o.output_dir = JoinPath(dir, "run");
  o.quiet = true;
  o.rpc_timeout = absl::Seconds(600);
  auto result = RunCoordinator(*job, o);
  if (!result.ok()) BenchDie(result.status().ToString());
  std::vector<int64_t> peak, rss_end;
  for (pid_t pid : pids) {
    peak.push_back(StatusBytes(pid, "VmHWM"));
    rss_end.push_back(StatusBytes(pid, "VmRSS"));
  }
  (void)(*workers)->Stop();

  std::printf(
      "FLUX.2-shaped model: D=%lld, %lld double + %lld single blocks (%.3f B params), joint_attention_dim %lld; "
      "%lld image + %lld text tokens per micro-batch; m=%d, %s, recompute %s; LoRA rank %lld on %s; fp32, cpu, "
      "%d thread(s) per process, %d step(s)\n",
      (long long)a.dim, (long long)a.double_blocks, (long long)a.single_blocks, c.TotalParams() / 1e9,
      (long long)a.joint, (long long)(a.grid * a.grid), (long long)a.text, a.m, a.schedule.c_str(), a.recompute.c_str(),
      (long long)a.rank, a.targets.c_str(), a.threads, a.steps);
  std::fputs(RenderPlan(c, *plan).c_str(), stdout);
  std::printf("\n%5s  %12s  %12s  %12s  %12s  %7s  %12s\n", "stage", "baseline MB", "peak MB", "estimate MB",
              "est. act MB", "ratio", "end RSS MB");
  std::string stages_json;
  double worst = 1;
  for (int k = 0; k < a.stages; ++k) {
    const StageSpec& s = plan->stages[k];
    const double ratio = static_cast<double>(peak[k]) / static_cast<double>(s.est_memory_bytes);
    if (std::abs(ratio - 1) > std::abs(worst - 1)) worst = ratio;
    std::printf("%5d  %12.1f  %12.1f  %12.1f  %12.1f  %7.3f  %12.1f\n", k, Mb(baseline[k]), Mb(peak[k]),
                Mb(s.est_memory_bytes), Mb(s.activation_bytes), ratio, Mb(rss_end[k]));
    absl::StrAppendFormat(&stages_json,
                          "%s{\"stage\":%d,\"blocks\":[%lld,%lld],\"baseline_rss_bytes\":%lld,\"peak_rss_bytes\":%lld,"
                          "\"estimate_bytes\":%lld,\"estimate_weights_bytes\":%lld,\"estimate_activation_bytes\":%lld,"
                          "\"recompute_blocks\":%lld,\"ratio\":%.4f}",
                          k ? "," : "", k, (long long)s.block_begin, (long long)s.block_end, (long long)baseline[k],
                          (long long)peak[k], (long long)s.est_memory_bytes, (long long)s.param_bytes,
                          (long long)s.activation_bytes, (long long)s.recompute_blocks, ratio);
  }
  std::printf("ratio = measured peak RSS (VmHWM) / planner estimate; target within 15%% both ways: %s (worst %.3f)\n",
              std::abs(worst - 1) <= 0.15 ? "met" : "MISSED", worst);
  std::printf(
      "{\"bench\":\"memory\",\"params\":%lld,\"dim\":%lld,\"double_blocks\":%lld,\"single_blocks\":%lld,"
      "\"tokens_per_micro_batch\":%lld,\"micro_batches\":%d,\"schedule\":\"%s\",\"recompute\":\"%s\","
      "\"worst_ratio\":%.4f,\"within_15_percent\":%s,\"stages\":[%s]}\n",
      (long long)c.TotalParams(), (long long)a.dim, (long long)a.double_blocks, (long long)a.single_blocks,
      (long long)(a.grid * a.grid + a.text), a.m, a.schedule.c_str(), a.recompute.c_str(), worst,
      std::abs(worst - 1) <= 0.15 ? "true" : "false", stages_json.c_str());
  if (!a.keep) (void)RemoveAll(dir);
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) { return baton::Main(argc, argv); }

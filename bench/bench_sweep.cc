// Many LoRAs on one loaded pipeline (issue 38): a sweep's members trained at once over two stage workers against the
// same members trained one after another on the same workers, side by side in one run. The demo's tiny FLUX.2
// transformer (`baton init-weights --pipeline tiny`: D = 64, 2 double + 4 single blocks, rank 16 all-linear) on a
// synthetic cache of 128 px records, 2 stages, 1 compute thread per stage worker. Throughput counts the samples of
// the timed steps (after --warmup per member) over the wall time they took: together, the window in which every
// member was past its warm-up and none had finished; one after another, the sum of each run's timed span. Memory:
// each stage worker's resident set after the members' runs, less the same after one member alone, against the
// planner's cost of the extra members. The last line is one JSON object.
//
//   bench_sweep [--steps=12] [--warmup=3] [--rounds=2] [--cases=2x1,4x1,3x4]
// A case MxB is M members at batch B (B micro-batches of one sample).
#include <absl/flags/flag.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/synchronization/mutex.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "coordinator/pipeline_trainer.h"
#include "coordinator/sweep_runs.h"
#include "core/data/cache.h"
#include "core/encode/flux2_encoder.h"
#include "core/metrics/process_memory.h"
#include "core/train/job.h"
#include "core/train/sweep.h"
#include "core/util/files.h"
#include "stage_driver/shared_workers.h"

ABSL_FLAG(int, steps, 12, "training steps per member");
ABSL_FLAG(int, warmup, 3, "untimed steps at the start of each member");
ABSL_FLAG(int, rounds, 2, "rounds; each runs every case together and one after another (the median ratio is kept)");
ABSL_FLAG(std::string, cases, "2x1,4x1,3x4", "MxB: M members at batch B, comma-separated");

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  int members = 2, batch = 1;
};

// Step end times (seconds since the run began) per member.
class StepClock {
 public:
  explicit StepClock(int members) : ends_(members), t0_(Clock::now()) {}
  std::function<void(const PipelineStepRecord&)> Hook(int member) {
    return [this, member](const PipelineStepRecord& r) {
      absl::MutexLock lock(&mu_);
      ends_[member].push_back(std::chrono::duration<double>(Clock::now() - t0_).count());
      busy_.resize(r.stages.size());
      for (size_t s = 0; s < r.stages.size(); ++s)
        busy_[s] += r.stages[s].forward_seconds + r.stages[s].backward_seconds;
      ++records_;
    };
  }
  // Each stage's mean compute seconds per step (forward + backward, from the stages' summaries).
  std::vector<double> BusyPerStep() {
    absl::MutexLock lock(&mu_);
    std::vector<double> mean = busy_;
    for (double& b : mean) b /= std::max(records_, 1);
    return mean;
  }
  // Samples per second of the steps past `warmup` that every member ran in one window.
  double Together(int warmup, int batch) {
    absl::MutexLock lock(&mu_);
    double start = 0, end = 1e30;
    for (const auto& e : ends_) {
      if (static_cast<int>(e.size()) <= warmup) BenchDie("a member ran too few steps");
      start = std::max(start, e[warmup - 1]);
      end = std::min(end, e.back());
    }
    int64_t samples = 0;
    for (const auto& e : ends_) {
      for (double t : e) samples += t > start && t <= end ? batch : 0;
    }
    return static_cast<double>(samples) / (end - start);
  }
  // The timed span of member 0 (a run alone) and its samples.
  std::pair<double, int64_t> Alone(int warmup, int batch) {
    absl::MutexLock lock(&mu_);
    const auto& e = ends_[0];
    if (static_cast<int>(e.size()) <= warmup) BenchDie("a run ran too few steps");
    return {e.back() - e[warmup - 1], static_cast<int64_t>(e.size() - warmup) * batch};
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<double>> ends_ ABSL_GUARDED_BY(mu_);
  std::vector<double> busy_ ABSL_GUARDED_BY(mu_);
  int records_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point t0_;
};

JobConfig MakeJob(const std::string& dir, const Case& c, bool sweep) {
  std::vector<std::string> lrs;
  for (int m = 0; m < c.members; ++m) lrs.push_back(absl::StrFormat("%.0e", 1e-3 * (m + 1)));
  const std::string yaml = absl::StrCat(
      "model: ", JoinPath(dir, "pipeline"), "\ndataset: ", JoinPath(dir, "cache"),
      "\nlora: {rank: 16, alpha: 16, targets: all-linear}\noptimizer: {lr: 1e-3}\nsteps: ", absl::GetFlag(FLAGS_steps),
      "\nbatch_size: ", c.batch, "\nmicro_batches: ", c.batch, "\nschedule: 1f1b\nseed: 1\nthreads: 1\nname: bench\n",
      sweep ? absl::StrCat("sweep: {optimizer.lr: [", absl::StrJoin(lrs, ", "), "]}\n") : "");
  auto job = ParseJobYaml(yaml);
  if (!job.ok()) BenchDie(std::string(job.status().message()));
  return *job;
}

CoordinatorOptions Options(const std::string& out, const std::shared_ptr<SharedStageWorkers>& workers) {
  CoordinatorOptions o;
  o.stages = 2;
  o.output_dir = out;
  o.quiet = true;
  o.shared_workers = workers;
  return o;
}

// The resident set of each pid, bytes.
std::vector<int64_t> Resident(const std::vector<pid_t>& pids) {
  std::vector<int64_t> rss;
  for (pid_t pid : pids) rss.push_back(ResidentMemoryBytes(pid));
  return rss;
}

std::string Millis(const std::vector<double>& seconds) {
  std::vector<std::string> ms;
  for (double s : seconds) ms.push_back(absl::StrFormat("%.1f", s * 1e3));
  return absl::StrCat("[", absl::StrJoin(ms, ", "), "]");
}

struct CaseResult {
  std::vector<double> ratios;
  double together = 0, apart = 0;
  std::vector<double> busy_alone, busy_together;  // the first member's mean compute seconds per step, by stage
  std::vector<int64_t> member_bytes;              // the planner's cost of one more member, by stage
  std::vector<int64_t> rss_alone, rss_together;
};

// One round of a case: the members one after another, then together, each on fresh shared workers.
void RunRound(const std::string& dir, const Case& c, CaseResult& result) {
  const int warmup = absl::GetFlag(FLAGS_warmup);
  double span = 0;
  int64_t samples = 0;
  auto apart_workers = std::make_shared<SharedStageWorkers>();
  auto members = ExpandSweep(MakeJob(dir, c, true));
  if (!members.ok()) BenchDie(std::string(members.status().message()));
  for (const SweepMember& m : *members) {
    StepClock clock(1);
    CoordinatorOptions o = Options(JoinPath(dir, absl::StrCat("apart-", m.name)), apart_workers);
    o.hooks.on_step = clock.Hook(0);
    JobConfig alone = m.job;
    alone.sweep_member.clear();
    auto r = RunCoordinator(alone, o);
    if (!r.ok()) BenchDie(absl::StrCat("alone: ", r.status().message()));
    auto [s, n] = clock.Alone(warmup, c.batch);
    span += s;
    samples += n;
    if (&m == &members->front()) {
      result.rss_alone = Resident(apart_workers->workers()->pids());
      result.busy_alone = clock.BusyPerStep();
    }
  }
  (void)apart_workers->Stop();
  const double apart = static_cast<double>(samples) / span;

  auto together_workers = std::make_shared<SharedStageWorkers>();
  StepClock clock(c.members);
  CoordinatorOptions o = Options(JoinPath(dir, absl::StrCat("together-", c.members, "x", c.batch)), together_workers);
  std::map<std::string, int> index;
  for (size_t i = 0; i < members->size(); ++i) index[(*members)[i].name] = static_cast<int>(i);
  auto results = RunSweep(MakeJob(dir, c, true), o, [&](const SweepMember& member, CoordinatorOptions& mo) {
    mo.hooks.on_step = clock.Hook(index.at(member.name));
    mo.hooks.on_start = [&result](const RunStart& start) { result.member_bytes = start.member_bytes; };
  });
  if (!results.ok()) BenchDie(absl::StrCat("together: ", results.status().message()));
  for (const auto& r : *results) {
    if (!r.result.ok()) BenchDie(absl::StrCat("together: ", r.name, ": ", r.result.status().message()));
  }
  result.rss_together = Resident(together_workers->workers()->pids());
  result.busy_together = clock.BusyPerStep();
  (void)together_workers->Stop();
  const double together = clock.Together(warmup, c.batch);
  result.ratios.push_back(together / apart);
  result.together = together;
  result.apart = apart;
  std::printf(
      "  %dx%d round: together %.2f samples/s, one after another %.2f: %.3fx; compute per step [ms] alone %s, "
      "together %s\n",
      c.members, c.batch, together, apart, together / apart, Millis(result.busy_alone).c_str(),
      Millis(result.busy_together).c_str());
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  if (absl::Status s =
          ParseBenchFlags(argc, argv, "bench_sweep [--steps=12] [--warmup=3] [--rounds=2] [--cases=2x1,4x1,3x4]");
      !s.ok()) {
    BenchDie(std::string(s.message()));
  }
  std::vector<Case> cases;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_cases), ',')) {
    std::pair<std::string, std::string> mb = absl::StrSplit(text, 'x');
    Case c;
    if (!absl::SimpleAtoi(mb.first, &c.members) || !absl::SimpleAtoi(mb.second, &c.batch) || c.members < 1 ||
        c.batch < 1) {
      BenchDie(absl::StrCat("--cases: '", text, "' is not MxB"));
    }
    cases.push_back(c);
  }
  char tmpl[] = "/tmp/bench_sweep_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  if (absl::Status s = WriteTinyFlux2Pipeline(JoinPath(dir, "pipeline"), 0); !s.ok())
    BenchDie(std::string(s.message()));
  // 128 px (8 x 8 latent tokens) and 128 text tokens, as the demo's encoded sample images.
  if (absl::Status s = WriteSyntheticCache(JoinPath(dir, "cache"), 128, 96, 16, {{8, 8}}, 128, 1); !s.ok()) {
    BenchDie(std::string(s.message()));
  }
  std::printf("bench_sweep: %d steps per member (%d warm-up), 2 stages, 1 thread each, %d rounds\n",
              absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_rounds));
  std::vector<CaseResult> results(cases.size());
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (size_t i = 0; i < cases.size(); ++i) RunRound(dir, cases[i], results[i]);
  }
  nlohmann::ordered_json json;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<double> r = results[i].ratios;
    std::sort(r.begin(), r.end());
    const double median = r[r.size() / 2];
    const std::string label = absl::StrCat(cases[i].members, "x", cases[i].batch);
    std::printf("%s: %d members at batch %d: %.3fx the samples/s of one after another (median of %zu)\n", label.c_str(),
                cases[i].members, cases[i].batch, median, r.size());
    for (size_t s = 0; s < results[i].rss_alone.size() && s < results[i].rss_together.size(); ++s) {
      const double planned = s < results[i].member_bytes.size()
                                 ? static_cast<double>(results[i].member_bytes[s]) * (cases[i].members - 1)
                                 : 0;
      std::printf(
          "  stage %zu resident: %.1f MiB alone, %.1f MiB with %d members (+%.1f MiB; the planner: +%.1f MiB)\n", s,
          results[i].rss_alone[s] / 1048576.0, results[i].rss_together[s] / 1048576.0, cases[i].members,
          (results[i].rss_together[s] - results[i].rss_alone[s]) / 1048576.0, planned / 1048576.0);
    }
    json[label] = {{"ratio", median},
                   {"rss_alone", results[i].rss_alone},
                   {"rss_together", results[i].rss_together},
                   {"planned_member_bytes", results[i].member_bytes}};
  }
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) { return baton::Main(argc, argv); }

#include "coordinator/sweep_runs.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "coordinator/pipeline_trainer.h"
#include "core/train/sweep.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "stage_driver/shared_workers.h"

namespace baton {
namespace {

// Each member's options: its folder, the shared workers, and (the members' lines would interleave) a line per step
// that names the member instead of the run's own progress line.
CoordinatorOptions MemberOptions(const CoordinatorOptions& options, const SweepMember& member,
                                 const std::shared_ptr<SharedStageWorkers>& workers, int64_t total_steps) {
  CoordinatorOptions o = options;
  o.output_dir = JoinPath(options.output_dir, member.name);
  o.shared_stages = true;
  if (options.workers.empty()) o.shared_workers = workers;
  if (!options.quiet) {
    o.quiet = true;
    auto on_step = options.hooks.on_step;
    o.hooks.on_step = [on_step, name = member.name, total_steps](const PipelineStepRecord& r) {
      std::printf("[%s] step %lld/%lld  loss %.5f  lr %.2e  %.3f s/step\n", name.c_str(),
                  static_cast<long long>(r.step), static_cast<long long>(total_steps), r.loss, r.lr, r.step_seconds);
      std::fflush(stdout);
      if (on_step) on_step(r);
    };
  }
  return o;
}

}  // namespace

absl::StatusOr<std::vector<SweepMemberResult>> RunSweep(const JobConfig& job, const CoordinatorOptions& options,
                                                        const SweepMemberOptions& per_member) {
  ASSIGN_OR_RETURN(std::vector<SweepMember> members, ExpandSweep(job));
  if (options.replicas > 1) return absl::InvalidArgumentError("a sweep runs on one replica (--replicas 1)");
  const int64_t total_steps = options.steps > 0 ? options.steps : job.steps;
  std::vector<std::string> names;
  for (const SweepMember& m : members) names.push_back(m.name);
  const std::string line =
      absl::StrCat("sweep: ", members.size(), " members on one set of stage workers: ", absl::StrJoin(names, ", "));
  if (options.quiet) {
    LogInfo(line);
  } else {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  // The caller's shared workers when it brings some (it stops them), else ours.
  const bool own_workers = !options.shared_workers;
  auto workers = own_workers ? std::make_shared<SharedStageWorkers>() : options.shared_workers;
  std::vector<SweepMemberResult> results(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    results[i].name = members[i].name;
    results[i].output_dir = JoinPath(options.output_dir, members[i].name);
    CoordinatorOptions o = MemberOptions(options, members[i], workers, total_steps);
    if (per_member) per_member(members[i], o);
    threads.emplace_back([&results, i, job = members[i].job, o = std::move(o)] {
      results[i].result = RunCoordinator(job, o);
      if (!results[i].result.ok()) {
        LogError("sweep member ", results[i].name, " failed: ", results[i].result.status().message());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (own_workers) {
    absl::Status stopped = workers->Stop();
    if (!stopped.ok()) LogWarning("sweep: stopping the stage workers: ", stopped.message());
  }
  return results;
}

absl::StatusOr<CoordinatorResult> RunSweepJob(const JobConfig& job, const CoordinatorOptions& options,
                                              const SweepMemberOptions& per_member) {
  ASSIGN_OR_RETURN(std::vector<SweepMemberResult> results, RunSweep(job, options, per_member));
  std::vector<std::string> failed;
  for (const SweepMemberResult& r : results) {
    if (!r.result.ok()) {
      failed.push_back(absl::StrCat(r.name, ": ", r.result.status().message()));
      continue;
    }
    if (options.quiet || r.result->steps.empty()) continue;
    std::printf("sweep member %s: loss %.5f → %.5f; wrote %s/lora.safetensors\n", r.name.c_str(),
                r.result->steps.front().loss, r.result->steps.back().loss, r.output_dir.c_str());
  }
  std::fflush(stdout);
  if (!failed.empty()) {
    return absl::AbortedError(
        absl::StrCat(failed.size(), " of ", results.size(),
                     " sweep members failed (the others finished): ", absl::StrJoin(failed, "; ")));
  }
  return *results.front().result;
}

}  // namespace baton

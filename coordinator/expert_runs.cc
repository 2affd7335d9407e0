#include "coordinator/expert_runs.h"

#include <cstdio>

#include "coordinator/pipeline_trainer.h"
#include "coordinator/sweep_runs.h"
#include "core/train/experts.h"
#include "core/train/lr_schedule.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<CoordinatorResult> RunCoordinatorJob(const JobConfig& job, const CoordinatorOptions& options) {
  const int64_t steps = options.steps > 0 ? options.steps : job.steps;
  RETURN_IF_ERROR(CheckStepsWithinSchedule(job.optimizer, job.steps, steps));
  if (!job.sweep.empty()) return RunSweepJob(job, options);
  ASSIGN_OR_RETURN(std::vector<ExpertRun> runs, PlanExpertRuns(job, options.output_dir, steps));
  if (runs.size() == 1 && runs[0].name.empty()) return RunCoordinator(job, options);
  for (const std::string& line : DescribeExpertRuns(runs, steps)) {
    if (options.quiet) {
      LogInfo(line);
    } else {
      std::printf("%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
  CoordinatorResult last;
  for (size_t i = 0; i < runs.size(); ++i) {
    const ExpertRun& run = runs[i];
    if (run.steps == 0) continue;
    CoordinatorOptions o = options;
    o.output_dir = run.output_dir;
    o.steps = run.steps;
    o.resume_if_any = options.resume_if_any || (options.resume && i > 0);
    ASSIGN_OR_RETURN(last, RunCoordinator(run.job, o));
    if (options.hooks.stop != nullptr && options.hooks.stop->load()) break;
  }
  return last;
}

}  // namespace baton

// Wan 2.2 A14B's two experts in one job (job key `expert`): the runs a job becomes. Each training step trains one
// expert, chosen by a timestep drawn with the job's own sampler (t ≥ the pipeline's boundary_ratio: the high-noise
// expert, as inference routes it), and each expert has its own LoRA and optimizer, so the job equals two one-expert
// jobs of the same seed: Baton runs them as two phases, loading each expert's weights once instead of every step.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/train/job.h"

namespace baton {

struct ExpertRun {
  std::string name;        // "high_noise" | "low_noise"; "" for a job without `expert`
  JobConfig job;           // model: the expert's transformer folder; timesteps min/max: its side of the boundary
  std::string output_dir;  // <output>/<name> (<output> for a job without `expert`)
  int64_t steps = 0;       // its share of the job's steps (0: none drawn for it)
};

// The runs of `job` trained for `steps` steps into `output_dir`: one for a job without `expert` (itself) or with
// high | low (that expert on its side of the boundary, all steps), two for both. InvalidArgument for a folder
// without two experts or a boundary_ratio, for `both` with timesteps min/max of its own or a shift that depends on
// the image size (the expert draw happens before any sample is chosen).
absl::StatusOr<std::vector<ExpertRun>> PlanExpertRuns(const JobConfig& job, const std::string& output_dir,
                                                      int64_t steps);

// What the runs are and why, a line each for the progress output: for two experts first the reason they run one after
// the other, then per run its share of the steps, its timestep range, its transformer and its folder. None for a job
// without `expert`.
std::vector<std::string> DescribeExpertRuns(const std::vector<ExpertRun>& runs, int64_t steps);

// True when step `step` of `job` trains the high-noise expert: one timestep drawn from a generator seeded by
// (job.seed, step) with the job's sampler, at or above `boundary`.
bool StepTrainsHighNoiseExpert(const JobConfig& job, int64_t step, double boundary);

}  // namespace baton

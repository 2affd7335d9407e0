// A job whose `expert` key asks for Wan 2.2 A14B experts (core/train/experts.h) run as its expert runs, one after
// the other, each a whole coordinator run into its own folder; a job without `expert` is one ordinary run.
#pragma once

#include <absl/status/statusor.h>

#include "coordinator/run_types.h"
#include "core/train/job.h"

namespace baton {

// Runs every expert run of `job` with `options` (its output_dir and steps split per run; a resumed job resumes each
// run, and a run that never started starts fresh). Stops after the run a stop request ended; returns the last run's
// result.
absl::StatusOr<CoordinatorResult> RunCoordinatorJob(const JobConfig& job, const CoordinatorOptions& options);

}  // namespace baton

// A sweep's members (core/train/sweep.h) trained at once over one set of stage workers: each member is a whole run of
// its own (RunCoordinator: its LoRA, train log, validation, samples and checkpoints under OUTPUT/<member>/, its own
// recovery and --resume), on a thread of its own; the stage workers hold every member's adapters over one copy of the
// frozen weights and take the members' forwards and backwards in turn (stage_worker/stage_tenants.h), so each member
// computes exactly what it would alone while its pipeline bubbles fill with the others' work. A member that fails (a
// NaN, a bad record) ends alone; a stop (SIGINT, the job service) checkpoints every member.
#pragma once

#include <absl/status/statusor.h>

#include <functional>
#include <string>
#include <vector>

#include "coordinator/run_types.h"
#include "core/train/job.h"
#include "core/train/sweep.h"

namespace baton {

struct SweepMemberResult {
  std::string name;                          // the member ("lr=1e-4")
  std::string output_dir;                    // OUTPUT/<member>
  absl::StatusOr<CoordinatorResult> result;  // its run's, or why it failed
};

// Runs every member of `job` (which has a sweep) to the end; local stage workers are started once for all
// (options.shared_workers when given, which the caller then stops; with --workers, the given ones are shared). Errors:
// the sweep itself (members, workers); a member's failure is in its result. `per_member` (optional) adjusts each
// member's options last (its own hooks: a watcher per member).
using SweepMemberOptions = std::function<void(const SweepMember& member, CoordinatorOptions& options)>;
absl::StatusOr<std::vector<SweepMemberResult>> RunSweep(const JobConfig& job, const CoordinatorOptions& options,
                                                        const SweepMemberOptions& per_member = nullptr);

// A sweep as one run's result for whoever runs a job: the members' lines printed, the first member's result, or an
// error naming every member that failed.
absl::StatusOr<CoordinatorResult> RunSweepJob(const JobConfig& job, const CoordinatorOptions& options,
                                              const SweepMemberOptions& per_member = nullptr);

}  // namespace baton

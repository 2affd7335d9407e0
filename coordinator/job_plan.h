// Job setup and plan: what the coordinator settles before it starts any worker -- the model and dataset open and
// fit each other, the step sampler and the frozen shell, the schedule, and the planner's split of the blocks over
// the stages (coordinator/job_partition.h; PlanStages prints it).
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <optional>
#include <vector>

#include "coordinator/job_partition.h"
#include "coordinator/run_types.h"
#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/schedule.h"
#include "core/train/batches.h"
#include "core/train/job_fingerprint.h"

namespace baton {

struct JobSetup {
  at::ScalarType dtype = at::kFloat;
  std::unique_ptr<ModelFamily> model;  // the model's family, config and memory-mapped weights
  std::unique_ptr<CacheReader> cache;
  std::optional<StepSampler> sampler;  // reads `cache`, shapes inputs through `model`
  std::unique_ptr<ShellModel> shell;   // the frozen shell, on the CPU
  Schedule schedule;                   // replica 0's (replicas of other stage counts get their own: ReplicaSet)
  std::vector<std::vector<std::vector<StageSpec>>> plans;  // [replica][worker][chunk] block ranges
  int micro_batches = 1;
  JobFingerprint fingerprint;  // what the result depends on (coordinator/resume.h checks it on --resume)
};

// What RunCoordinator checks before it starts any worker, without starting one: the model and dataset open and
// fit each other, the schedule suits `stages` (or each of the job's `replica_stages`), and the planner fits the model
// into them (job service: at submit). A job whose dataset an encoder worker builds first is checked only as far as
// the model. `frozen_key` (optional) gets what its stage workers would hold of the frozen weights (FrozenPipelineKey
// of replica 0's plan, one expert's job: its expert's; "" when there is no plan yet: an encoder worker's dataset).
absl::Status CheckJobPlan(const JobConfig& job, int stages, std::string* frozen_key = nullptr);

// The job's replica shape over the coordinator's options: `replica_stages` (which sets the replicas and replica 0's
// stages), else `replicas` where the options leave it open (0).
absl::Status ApplyJobReplicas(const JobConfig& job, StageDriverOptions& options);
// `replica_exchange: auto` made concrete for the replicas in `options` (after ApplyJobReplicas): `allreduce`, or
// `coordinator` for replicas of different stage counts (the stage-local optimizer sums matching stages) and for
// Prodigy (its step-size estimate sums over every stage, which the stage-local optimizer does not do yet).
JobConfig WithConcreteExchange(const JobConfig& job, const StageDriverOptions& options);

// Opens everything, runs the encoder worker first when the job names one, and plans the stages.
absl::StatusOr<JobSetup> SetUpJob(const JobConfig& job, const CoordinatorOptions& options);

}  // namespace baton

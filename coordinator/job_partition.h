// A training job as the stage driver sees it: the pipeline its stages hold (PipelineSpecFor) and the planner's options
// for its stages, which add what a training run needs to the pipeline's own (the schedule, recompute, the memory
// budgets, where the optimizer runs).
#pragma once

#include <absl/status/statusor.h>

#include <vector>

#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/pipeline/partition.h"
#include "core/train/job.h"
#include "stage_driver/driver_options.h"
#include "stage_driver/pipeline_spec.h"
#include "stage_driver/stage_plan.h"

namespace baton {

// What the job's stages hold: its model, precision, adapters and seed, under the id JobHash(job).
PipelineSpec PipelineSpecFor(const JobConfig& job);

// The planner's options for `stages` workers: for the cache's largest sample, or for `tokens`.
absl::StatusOr<PartitionOptions> JobPartitionOptions(const JobConfig& job, const CacheReader& cache, int stages,
                                                     at::ScalarType dtype, bool remote_workers = false);
absl::StatusOr<PartitionOptions> JobPartitionOptions(const JobConfig& job, SampleTokens tokens, int stages,
                                                     at::ScalarType dtype, bool remote_workers = false);

// Replica r's view of the job when replicas differ: `devices` and `memory_per_stage` that list every worker
// (replica after replica: options.TotalWorkers() entries) are cut to replica r's; other lists are left whole.
JobConfig ReplicaJob(const JobConfig& job, const StageDriverOptions& options, int replica);

// [worker][chunk] block ranges for the job: one per worker, or `chunks` (interleaved).
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanJobStages(const JobConfig& job, const ModelFamily& model,
                                                                  const CacheReader& cache, int stages, int chunks,
                                                                  at::ScalarType dtype, bool quiet,
                                                                  bool remote_workers = false);

}  // namespace baton

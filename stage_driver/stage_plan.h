// The planner's split of a model's blocks over the stage workers, for a job: the options it sizes each stage by
// (dtype, quantization, LoRA rank, micro-batch tokens, each stage's device and memory budget) and the
// [worker][chunk] block ranges it returns (PlanStages prints the plan unless quiet).
#pragma once

#include <absl/status/statusor.h>

#include <vector>

#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/pipeline/partition.h"
#include "core/train/job.h"
#include "stage_driver/driver_options.h"

namespace baton {

// The tokens of one sample the planner sizes a micro-batch by: image (or video) tokens and text tokens.
struct SampleTokens {
  int64_t image = 0, text = 0;
};

// The device each stage is planned for: the job's `devices:` entry; without one, a local worker computes on the
// CPU (the driver starts it so), while a remote worker's --device is unknown here and is planned as CUDA
// (the larger fixed cost: a GPU stage is never planned with the CPU's overhead).
std::vector<PlanDevice> StagePlanDevices(const JobConfig& job, int stages, bool remote_workers);

// The planner's options for `stages` workers: for the cache's largest sample, or for `tokens`.
absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, const CacheReader& cache, int stages,
                                                       at::ScalarType dtype, bool remote_workers = false);
absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, SampleTokens tokens, int stages,
                                                       at::ScalarType dtype, bool remote_workers = false);

// Replica r's view of the job when replicas differ: `devices` and `memory_per_stage` that list every worker
// (replica after replica: options.TotalWorkers() entries) are cut to replica r's; other lists are left whole.
JobConfig ReplicaJob(const JobConfig& job, const StageDriverOptions& options, int replica);

// [worker][chunk] block ranges: one per worker, or v (interleaved).
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const JobConfig& job, const ModelFamily& model,
                                                               const CacheReader& cache, int stages, int chunks,
                                                               at::ScalarType dtype, bool quiet,
                                                               bool remote_workers = false);
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const ModelFamily& model, PartitionOptions popts,
                                                               int stages, int chunks, bool quiet);

}  // namespace baton

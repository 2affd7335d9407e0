// Job setup and plan: what the coordinator settles before it starts any worker -- the model and dataset open and
// fit each other, the step sampler and the frozen shell, the schedule, and the planner's split of the blocks over
// the stages (PlanStages prints it).
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <optional>
#include <vector>

#include "coordinator/pipeline_trainer.h"
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
  Schedule schedule;
  std::vector<std::vector<StageSpec>> plan;  // [worker][chunk] block ranges
  int micro_batches = 1;
  JobFingerprint fingerprint;  // what the result depends on (coordinator/resume.h checks it on --resume)
};

absl::Status CheckCoordinatorOptions(const CoordinatorOptions& options);

// What RunCoordinator checks before it starts any worker, without starting one: the model and dataset open and
// fit each other, the schedule suits `stages`, and the planner fits the model into them (job service: at submit).
// A job whose dataset an encoder worker builds first is checked only as far as the model.
absl::Status CheckJobPlan(const JobConfig& job, int stages);

// Opens everything, runs the encoder worker first when the job names one, and plans the stages.
absl::StatusOr<JobSetup> SetUpJob(const JobConfig& job, const CoordinatorOptions& options);

// The tokens of one sample the planner sizes a micro-batch by: image (or video) tokens and text tokens.
struct SampleTokens {
  int64_t image = 0, text = 0;
};

// The device each stage is planned for: the job's `devices:` entry; without one, a local worker computes on the
// CPU (the coordinator starts it so), while a remote worker's --device is unknown here and is planned as CUDA
// (the larger fixed cost: a GPU stage is never planned with the CPU's overhead).
std::vector<PlanDevice> StagePlanDevices(const JobConfig& job, int stages, bool remote_workers);

// The planner's options for `stages` workers: for the cache's largest sample, or for `tokens`.
absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, const CacheReader& cache, int stages,
                                                       at::ScalarType dtype, bool remote_workers = false);
absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, SampleTokens tokens, int stages,
                                                       at::ScalarType dtype, bool remote_workers = false);

// [worker][chunk] block ranges: one per worker, or v (interleaved).
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const JobConfig& job, const ModelFamily& model,
                                                               const CacheReader& cache, int stages, int chunks,
                                                               at::ScalarType dtype, bool quiet,
                                                               bool remote_workers = false);
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const ModelFamily& model, PartitionOptions popts,
                                                               int stages, int chunks, bool quiet);

}  // namespace baton

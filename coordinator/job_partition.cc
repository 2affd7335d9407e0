#include "coordinator/job_partition.h"

#include <absl/strings/str_cat.h>

#include <algorithm>

#include "core/pipeline/replica_split.h"
#include "core/pipeline/schedule.h"
#include "core/train/common.h"
#include "core/train/optimizer.h"
#include "core/util/status.h"

namespace baton {

PipelineSpec PipelineSpecFor(const JobConfig& job) {
  PipelineSpec p;
  p.id = JobHash(job);
  p.name = JobName(job);
  p.model = job.model;
  p.model_config = job.model_config;
  p.dtype = job.dtype;
  p.quantize = job.quantize;
  p.lora = job.lora;
  p.lora_dtype = job.lora_dtype;
  p.wire_dtype = job.wire_dtype;
  p.micro_batches = job.micro_batches;
  p.devices = job.devices;
  p.threads = job.threads;
  p.deterministic = job.deterministic;
  p.seed = job.seed;
  return p;
}

// Sized for the cache's largest micro-batch (memory) and its token mix (compute); a record's reference images add
// their tokens (each of the record's grid) to its image stream.
absl::StatusOr<PartitionOptions> JobPartitionOptions(const JobConfig& job, const CacheReader& cache, int stages,
                                                     at::ScalarType dtype, bool remote_workers) {
  SampleTokens largest;
  for (const CacheRecordInfo& r : cache.index().records) {
    const int64_t grid = r.grid_h * r.grid_w;
    if (grid * (1 + r.references) > largest.image) {
      largest.image = grid * (1 + r.references);
      largest.reference = grid * r.references;
    }
    largest.text = std::max(largest.text, r.text_len);
  }
  return JobPartitionOptions(job, largest, stages, dtype, remote_workers);
}

absl::StatusOr<PartitionOptions> JobPartitionOptions(const JobConfig& job, SampleTokens tokens, int stages,
                                                     at::ScalarType dtype, bool remote_workers) {
  ASSIGN_OR_RETURN(PartitionOptions popts, StagePartitionOptions(PipelineSpecFor(job), tokens, job.micro_batch_size(),
                                                                 stages, dtype, remote_workers));
  ASSIGN_OR_RETURN(popts.schedule, ParseScheduleKind(job.schedule));
  popts.recompute = job.recompute;
  static_assert(JobConfig::kOffloadAuto == PartitionOptions::kOffloadAuto);
  popts.offload_blocks = job.offload_blocks;
  popts.all_linear = job.lora_targets == "all-linear";
  // `auto` is `allreduce` unless the replicas differ in stage counts (coordinator/job_plan.h: WithConcreteExchange).
  std::vector<int> counts(job.replica_stages.begin(), job.replica_stages.end());
  popts.local_optimizer =
      job.replica_exchange == "allreduce" || (job.replica_exchange == "auto" && !UnequalStageCounts(counts));
  popts.optimizer_state_copies = OptimizerStateCopies(job.optimizer);
  for (const auto& budget : job.memory_per_stage) {
    auto bytes = ParseByteSize(budget);
    if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat(job.source, ": memory_per_stage"));
    popts.memory_budget_bytes.push_back(*bytes);
  }
  return popts;
}

JobConfig ReplicaJob(const JobConfig& job, const StageDriverOptions& options, int replica) {
  JobConfig out = job;
  const int first = options.FirstWorker(replica), count = options.StagesOf(replica);
  for (std::vector<std::string>* list : {&out.devices, &out.memory_per_stage}) {
    if (options.replicas > 1 && static_cast<int>(list->size()) == options.TotalWorkers()) {
      *list = std::vector<std::string>(list->begin() + first, list->begin() + first + count);
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanJobStages(const JobConfig& job, const ModelFamily& model,
                                                                  const CacheReader& cache, int stages, int chunks,
                                                                  at::ScalarType dtype, bool quiet,
                                                                  bool remote_workers) {
  ASSIGN_OR_RETURN(PartitionOptions popts, JobPartitionOptions(job, cache, stages, dtype, remote_workers));
  return PlanStages(model, std::move(popts), stages, chunks, quiet);
}

}  // namespace baton

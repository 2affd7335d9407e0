#include "stage_driver/stage_plan.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cstdio>

#include "core/pipeline/chunks.h"
#include "core/pipeline/replica_split.h"
#include "core/pipeline/schedule.h"
#include "core/quant/weight_quant.h"
#include "core/train/common.h"
#include "core/util/status.h"

namespace baton {

// The planner's options: sized for the cache's largest micro-batch (memory) and its token mix (compute).
std::vector<PlanDevice> StagePlanDevices(const JobConfig& job, int stages, bool remote_workers) {
  std::vector<PlanDevice> out;
  for (int i = 0; i < stages; ++i) {
    if (i < static_cast<int>(job.devices.size())) {
      out.push_back(job.devices[i] == "cpu" ? PlanDevice::kCpu : PlanDevice::kCuda);
    } else {
      out.push_back(remote_workers ? PlanDevice::kCuda : PlanDevice::kCpu);
    }
  }
  return out;
}

absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, const CacheReader& cache, int stages,
                                                       at::ScalarType dtype, bool remote_workers) {
  int64_t max_img = 0, max_txt = 0;
  for (const CacheRecordInfo& r : cache.index().records) {
    max_img = std::max(max_img, r.grid_h * r.grid_w);
    max_txt = std::max(max_txt, r.text_len);
  }
  return StagePartitionOptions(job, SampleTokens{max_img, max_txt}, stages, dtype, remote_workers);
}

absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, SampleTokens tokens, int stages,
                                                       at::ScalarType dtype, bool remote_workers) {
  PartitionOptions popts;
  popts.stages = stages;
  popts.bytes_per_param = static_cast<int>(c10::elementSize(dtype));
  ASSIGN_OR_RETURN(popts.quantize, ParseWeightQuant(job.quantize));
  popts.lora_rank = job.lora.rank;
  popts.micro_batches = static_cast<int>(job.micro_batches);
  ASSIGN_OR_RETURN(popts.schedule, ParseScheduleKind(job.schedule));
  popts.recompute = job.recompute;
  popts.devices = StagePlanDevices(job, stages, remote_workers);
  popts.device = popts.devices.empty() ? PlanDevice::kCpu : popts.devices[0];
  popts.activation_bytes = static_cast<int>(c10::elementSize(dtype));
  popts.all_linear = job.lora_targets == "all-linear";
  // `auto` is `allreduce` unless the replicas differ in stage counts (coordinator/job_plan.h: WithConcreteExchange).
  std::vector<int> counts(job.replica_stages.begin(), job.replica_stages.end());
  popts.local_optimizer =
      job.replica_exchange == "allreduce" || (job.replica_exchange == "auto" && !UnequalStageCounts(counts));
  popts.tokens_per_micro_batch = (tokens.image + tokens.text) * job.micro_batch_size();
  popts.text_tokens_per_micro_batch = tokens.text * job.micro_batch_size();
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

// What each worker runs: [worker][chunk] block ranges -- one per worker, or v (interleaved) -- from the planner:
// blocks to stages (or to p·v chunks) by compute, within each worker's memory budget. Prints the plan.
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const JobConfig& job, const ModelFamily& model,
                                                               const CacheReader& cache, int stages, int chunks,
                                                               at::ScalarType dtype, bool quiet, bool remote_workers) {
  ASSIGN_OR_RETURN(PartitionOptions popts, StagePartitionOptions(job, cache, stages, dtype, remote_workers));
  return PlanStages(model, std::move(popts), stages, chunks, quiet);
}

absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const ModelFamily& model, PartitionOptions popts,
                                                               int stages, int chunks, bool quiet) {
  ASSIGN_OR_RETURN(const PlanSource source, PlanSourceFor(model));
  std::vector<std::vector<StageSpec>> out(stages);
  if (chunks == 1) {
    ASSIGN_OR_RETURN(Plan plan, Partition(source, popts));
    if (!quiet) std::printf("%s", RenderPlan(plan).c_str());
    if (!plan.fits) return absl::ResourceExhaustedError(absl::StrCat("the model does not fit: ", plan.message));
    for (int i = 0; i < stages; ++i) out[i] = {plan.stages[i]};
    return out;
  }
  popts.schedule = ScheduleKind::kInterleaved1F1B;
  // Chunks are not sized one by one: recompute is all or nothing per job. auto: none when that fits.
  const RecomputePolicy asked = popts.recompute;
  if (asked == RecomputePolicy::kAuto) popts.recompute = RecomputePolicy::kNone;
  ASSIGN_OR_RETURN(ChunkPlan plan, PartitionChunks(source, popts, chunks));
  if (!plan.fits && asked == RecomputePolicy::kAuto) {
    popts.recompute = RecomputePolicy::kAll;
    ASSIGN_OR_RETURN(plan, PartitionChunks(source, popts, chunks));
  }
  if (!quiet) std::printf("%s", RenderChunkPlan(plan).c_str());
  if (!plan.fits) return absl::ResourceExhaustedError(absl::StrCat("the model does not fit: ", plan.message));
  const bool recompute = popts.recompute != RecomputePolicy::kNone;
  if (!quiet) std::printf("recompute: %s (interleaved: every block or none)\n", recompute ? "every block" : "none");
  for (int i = 0; i < stages; ++i) {
    for (int u : WorkerVirtualStages(stages, chunks, i)) {
      StageSpec spec = plan.virtual_stages[u];
      spec.recompute_blocks = recompute ? spec.block_end - spec.block_begin : 0;
      out[i].push_back(spec);
    }
  }
  return out;
}

}  // namespace baton

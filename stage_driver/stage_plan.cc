#include "stage_driver/stage_plan.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cstdio>

#include "core/pipeline/chunks.h"
#include "core/pipeline/schedule.h"
#include "core/quant/weight_quant.h"
#include "core/util/status.h"

namespace baton {

std::vector<PlanDevice> PlanDevices(const std::vector<std::string>& devices, int stages, bool remote_workers) {
  std::vector<PlanDevice> out;
  for (int i = 0; i < stages; ++i) {
    if (i < static_cast<int>(devices.size())) {
      out.push_back(devices[i] == "cpu" ? PlanDevice::kCpu : PlanDevice::kCuda);
    } else {
      out.push_back(remote_workers ? PlanDevice::kCuda : PlanDevice::kCpu);
    }
  }
  return out;
}

absl::StatusOr<PartitionOptions> StagePartitionOptions(const PipelineSpec& pipeline, SampleTokens tokens,
                                                       int64_t samples_per_micro_batch, int stages,
                                                       at::ScalarType dtype, bool remote_workers) {
  PartitionOptions popts;
  popts.stages = stages;
  popts.bytes_per_param = static_cast<int>(c10::elementSize(dtype));
  ASSIGN_OR_RETURN(popts.quantize, ParseWeightQuant(pipeline.quantize));
  popts.lora_rank = pipeline.lora.rank;
  popts.lora_type = pipeline.lora.type;
  popts.lokr_factor = pipeline.lora.lokr_factor;
  popts.micro_batches = static_cast<int>(pipeline.micro_batches);
  popts.devices = PlanDevices(pipeline.devices, stages, remote_workers);
  popts.device = popts.devices.empty() ? PlanDevice::kCpu : popts.devices[0];
  popts.activation_bytes = static_cast<int>(c10::elementSize(dtype));
  popts.lora_fp32 = pipeline.lora_dtype == "fp32";
  popts.lora_dropout = pipeline.lora.dropout > 0;
  popts.tokens_per_micro_batch = (tokens.image + tokens.text) * samples_per_micro_batch;
  popts.text_tokens_per_micro_batch = tokens.text * samples_per_micro_batch;
  popts.reference_tokens_per_micro_batch = tokens.reference * samples_per_micro_batch;
  return popts;
}

// What each worker runs: [worker][chunk] block ranges -- one per worker, or v (interleaved) -- from the planner:
// blocks to stages (or to p·v chunks) by compute, within each worker's memory budget. Prints the plan.
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

// The planner's split of a model's blocks over the stage workers of a pipeline: the options it sizes each stage by
// (dtype, quantization, LoRA rank, micro-batch tokens, each stage's device) and the [worker][chunk] block ranges it
// returns (PlanStages prints the plan unless quiet). A training run adds its own (schedule, recompute, memory budgets,
// where the optimizer runs).
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <vector>

#include "core/model/model_family.h"
#include "core/pipeline/partition.h"
#include "stage_driver/pipeline_spec.h"

namespace baton {

// The tokens of one sample the planner sizes a micro-batch by: image (or video) tokens and text tokens.
struct SampleTokens {
  int64_t image = 0, text = 0;
  int64_t reference = 0;  // FLUX.2 reference images' part of `image`
};

// The device each stage is planned for: its entry in `devices`; without one, a local worker computes on the CPU (the
// driver starts it so), while a remote worker's --device is unknown here and is planned as CUDA (the larger fixed
// cost: a GPU stage is never planned with the CPU's overhead).
std::vector<PlanDevice> PlanDevices(const std::vector<std::string>& devices, int stages, bool remote_workers);

// The planner's options for `stages` workers of `pipeline` (its `devices` are this pipeline's, from its stage 0),
// micro-batches of `samples_per_micro_batch` samples of `tokens` each, every activation in `dtype`.
absl::StatusOr<PartitionOptions> StagePartitionOptions(const PipelineSpec& pipeline, SampleTokens tokens,
                                                       int64_t samples_per_micro_batch, int stages,
                                                       at::ScalarType dtype, bool remote_workers);

// [worker][chunk] block ranges: one per worker, or `chunks` (interleaved).
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const ModelFamily& model, PartitionOptions popts,
                                                               int stages, int chunks, bool quiet);

}  // namespace baton

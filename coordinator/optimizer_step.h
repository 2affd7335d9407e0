// The coordinator's optimizer step: the stages' LoRA gradients → non-finite check, clipping and AdamW on the fp32
// master weights, and the step's record; or, with a stage-local optimizer, the stages' own (PeerExchange).
#pragma once

#include <absl/status/statusor.h>

#include <map>
#include <string>

#include "coordinator/peer_exchange.h"
#include "coordinator/run_types.h"
#include "core/train/optimizer.h"
#include "stage_driver/stage_fleet.h"

namespace baton {

absl::StatusOr<PipelineStepRecord> ApplyGradients(const JobConfig& job, int64_t step, const StepOutputs& outputs,
                                                  Optimizer& optimizer, std::map<std::string, at::Tensor>& master);

// The same with a stage-local optimizer: the stages of the replicas that ran the step sum their gradients and apply
// AdamW (PeerExchange::Apply). ABORTED: a replica was lost after its micro-batches counted; the step starts over.
absl::StatusOr<PipelineStepRecord> ApplyExchange(const JobConfig& job, int64_t step, const StepOutputs& outputs,
                                                 PeerExchange& exchange);

}  // namespace baton

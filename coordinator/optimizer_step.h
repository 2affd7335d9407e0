// The coordinator's optimizer step: the stages' LoRA gradients → non-finite check, clipping and AdamW on the fp32
// master weights, and the step's record.
#pragma once

#include <absl/status/statusor.h>

#include <map>
#include <string>

#include "coordinator/run_types.h"
#include "core/train/adamw.h"
#include "stage_driver/stage_fleet.h"

namespace baton {

absl::StatusOr<PipelineStepRecord> ApplyGradients(const JobConfig& job, int64_t step, const StepOutputs& outputs,
                                                  AdamW& optimizer, std::map<std::string, at::Tensor>& master);

}  // namespace baton

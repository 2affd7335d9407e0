// Non-finite values never reach the LoRA: a step whose loss or LoRA gradients are not all finite is not
// applied. The trainers (train-local and the coordinator) check every step before the optimizer runs and stop
// with this error; the last checkpoint stays the last good state.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace baton {

// OK when every micro-batch loss and every gradient is finite. Otherwise FAILED_PRECONDITION naming the step
// (1-based, as train_log.jsonl counts), the first bad micro-batch (0-based) and the stage that computed its
// loss, or the first stage and LoRA parameter with a non-finite gradient, plus the step's learning rate (a
// diverging lr is the usual cause). A gradient is judged by its squared norm (core/train/grad_norm.h), summed in
// double: finite exactly when every element is, and already read back with the losses (no readback per tensor).
// `stage_squared_norms`: per stage, name → squared norm (one entry: a single-process run).
absl::Status CheckStepFinite(int64_t step, double lr, const std::vector<double>& micro_batch_losses, int loss_stage,
                             const std::vector<std::map<std::string, double>>& stage_squared_norms);

}  // namespace baton

// The run's checkpoints: the fp32 masters and the optimizer state (crash-safe, coordinator/checkpoint.h) plus the
// LoRA files users load, with the time it took printed and reported to hooks.on_checkpoint.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <map>
#include <string>

#include "coordinator/run_types.h"
#include "core/model/model_family.h"
#include "core/train/job_fingerprint.h"
#include "core/train/optimizer.h"

namespace baton {

absl::Status CheckpointRun(const JobConfig& job, const CoordinatorOptions& options, const std::string& job_hash,
                           const JobFingerprint& fingerprint, int64_t step,
                           const std::map<std::string, at::Tensor>& master, const Optimizer& optimizer,
                           const ModelFamily& model);

}  // namespace baton

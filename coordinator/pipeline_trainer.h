// The coordinator's training loop: the owner of trainable state (with `replica_exchange: allreduce` the stages step
// AdamW themselves, and it reads their state back for every checkpoint). Each step it draws the micro-batches
// (the same sampler as train-local), computes the frozen shell's constants, fans inputs/constants/targets
// out to the stages, drives the schedule (every stage runs its own action list; activations and gradients
// flow stage to stage directly), gathers each stage's LoRA gradients, clips and steps AdamW on the fp32
// master weights, and sends each stage its new adapters before its next forward.
#pragma once

#include <absl/status/statusor.h>

#include "coordinator/run_types.h"
#include "core/train/job.h"

namespace baton {

// Runs `job` to its last step (or options.steps), or until *options.hooks.stop is set: then it finishes the current
// step, checkpoints and returns (a stop during start-up: CANCELLED, nothing to checkpoint).
absl::StatusOr<CoordinatorResult> RunCoordinator(const JobConfig& job, const CoordinatorOptions& options);

}  // namespace baton

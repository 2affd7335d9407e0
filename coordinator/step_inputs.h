// A step's inputs, prepared by the coordinator: its micro-batches (the sampler, a pure function of the step) and
// their frozen-shell outputs (stage-0 inputs, constants, tables and their cache keys). Deterministic: a step prepared
// twice (after a recovery) is the same step.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>

#include "coordinator/job_plan.h"
#include "stage_driver/stage_fleet.h"

namespace baton {

absl::StatusOr<StepInputs> PrepareStepInputs(JobSetup& setup, int64_t step);

}  // namespace baton

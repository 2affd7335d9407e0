// The learning rate of each step: the job's base rate times diffusers' schedule (optimization.py's get_scheduler).
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/train/job.h"

namespace baton {

// Learning rate of optimizer step `step` (0-based) of a run of `total_steps`: opt.lr times diffusers' schedule
// (get_scheduler's lr_lambda for opt.schedule, num_training_steps = total_steps) after `step` scheduler steps, as a
// diffusers trainer that steps its scheduler after each optimizer step runs it (a warm-up's first step runs at 0).
// Adafactor with relative_step: its own relative step, min(1e-2 (warmup_init: 1e-6·k), 1/√k) at step k = step + 1.
double LearningRate(const OptimizerConfig& opt, int64_t step, int64_t total_steps);
// The schedules LearningRate knows (diffusers' names).
const std::vector<std::string>& LearningRateSchedules();

// A run of `steps` steps of a job of `job_steps` (coordinator / train-local --steps K): the first K steps of the job's
// run, its schedule over job_steps, so a later --resume continues it bit for bit. Past job_steps a schedule that decays
// would run on as diffusers' lambda does (linear and polynomial at their floor, cosine back up): INVALID_ARGUMENT
// saying to raise `steps:` instead. Constant schedules and Adafactor's relative step may run past.
absl::Status CheckStepsWithinSchedule(const OptimizerConfig& opt, int64_t job_steps, int64_t steps);

}  // namespace baton

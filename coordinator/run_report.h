// Progress and the run's log: the per-step progress line on stdout, train_log.jsonl lines, and the trim of that
// log on resume. (The metrics are hooks: coordinator/coordinator_metrics.h.)
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/run_types.h"

namespace baton {

// Rewrites train_log.jsonl keeping only the lines of steps ≤ `last_step` (a resumed run re-logs the rest).
absl::Status TrimTrainLog(const std::string& path, int64_t last_step);

// A train_log.jsonl line: the step record plus per-stage busy/idle and the coordinator's own serial seconds.
nlohmann::ordered_json StepLine(const PipelineStepRecord& rec);

void PrintProgress(const PipelineStepRecord& rec, int64_t start_step, int64_t total_steps, double elapsed, bool tty);

}  // namespace baton

// The coordinator's metrics: run hooks (CoordinatorHooks, coordinator/run_types.h) that keep CoordinatorFamilies()
// up to date. The stage workers' metrics ports and the run's Prometheus targets file are the stage driver's
// (stage_driver/stage_metrics.h).
#pragma once

#include <string>

#include "coordinator/run_types.h"

namespace baton {

// Wraps `hooks` so that each also updates the coordinator's families for job `job_name` (label job) before
// the hook already there, if any, runs.
void AddMetricsHooks(const std::string& job_name, CoordinatorHooks* hooks);

}  // namespace baton

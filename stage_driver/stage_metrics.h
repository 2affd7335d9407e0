// The metrics of a set of stage workers: the ports the local ones serve theirs on, the Prometheus file_sd targets
// file listing every process of the run, and baton_stage_up for each stage the driver talks to.
#pragma once

#include <absl/status/statusor.h>
#include <prometheus/gauge.h>

#include <string>
#include <vector>

namespace baton {

// The driving process's --metrics HOST:PORT → local stage worker i's: HOST:(PORT+1+i), or HOST:0 (a free port) when
// PORT is 0. INVALID_ARGUMENT for a malformed address or a port past 65535.
absl::StatusOr<std::string> StageMetricsListen(const std::string& driver_listen, int stage);

// Prints `metrics: PROCESS H:P, stage 0 H:P, ...` on stdout (when `print`) and writes
// <output_dir>/prometheus_targets.json in Prometheus' file_sd format: one target group per process, labelled
// {baton_process: `process` (the driving process, at `address`)|stage_worker, stage: N}. `stages`: each stage
// worker's metrics "host:port" by stage, "" where unknown (remote workers: their operator knows them), skipped.
absl::Status PublishMetricsTargets(const std::string& output_dir, const std::string& process,
                                   const std::string& address, const std::vector<std::string>& stages, bool print);

// baton_stage_up{job, stage, peer = the worker's address}: StageClient sets it after every call.
prometheus::Gauge* StageUpGauge(const std::string& job_name, int stage, const std::string& address);

}  // namespace baton

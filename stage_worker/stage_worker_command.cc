#include "stage_worker/stage_worker_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>
#include <string>

#include "core/device/device.h"
#include "core/device/device_memory.h"
#include "core/device/threads.h"
#include "core/metrics/metrics_server.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "rpc/tls_flags.h"
#include "stage_worker/stage_service.h"

namespace baton {

namespace {

// The runner's options from the command; an error message (exit 1) for a value the worker cannot use.
absl::StatusOr<StageRunnerOptions> RunnerOptions(const StageWorkerCommand& c) {
  StageRunnerOptions options;
  options.device = c.device;
  options.wait_timeout = absl::Seconds(c.wait_timeout_s);
  if (c.inbox_bytes < (int64_t{1} << 20)) return absl::InvalidArgumentError("--inbox_bytes must be at least 1 MiB");
  options.inbox_bytes = static_cast<uint64_t>(c.inbox_bytes);
  if (c.send_queue_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("--send_queue_bytes must be at least 1 MiB");
  }
  options.send_queue_bytes = static_cast<uint64_t>(c.send_queue_bytes);
  options.model_root = c.model_root.empty() ? "." : c.model_root;
  if (auto root = RealPath(options.model_root); !root.ok() || !IsDirectory(*root)) {
    return absl::InvalidArgumentError(absl::StrCat("--model_root ", options.model_root, " is not a directory"));
  }
  return options;
}

}  // namespace

int RunStageWorkerCommand(const StageWorkerCommand& command) {
  // Refuse a device this machine lacks before serving: a clear message and exit 1, never a crash later.
  auto device = ParseDevice(command.device);
  if (!device.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", std::string(device.status().message()).c_str());
    return 1;
  }
  auto security = InstallSecurityFromFlags("stage_worker", /*warn_insecure=*/false);  // rpc/tls_flags.h
  if (!security.ok()) {
    std::fprintf(stderr, "%s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  auto metrics = StartMetricsServerFromFlag(command.metrics, "stage_worker", /*print=*/true, RefreshDeviceMemoryGauges);
  if (!metrics.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  SetComputeThreads(command.threads);
  absl::StatusOr<StageRunnerOptions> options = RunnerOptions(command);
  if (!options.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", std::string(options.status().message()).c_str());
    return 1;
  }
  absl::Status status = RunStageWorker(command.listen, *options, [&](const std::string& address) {
    SetLogTag(absl::StrCat("stage_worker ", address));
    std::printf("LISTENING %s\n", address.c_str());
    std::fflush(stdout);
  });
  if (!status.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace baton

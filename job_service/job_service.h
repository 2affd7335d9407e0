// `coordinator --listen HOST:PORT`: the JobService front end over a JobQueue. It only translates between gRPC
// and the queue (rpc/grpc_status.h converts the statuses); the queue owns the jobs. A request is at most
// kMaxRequestBytes, and the server's transports buffer at most kTransportMemoryBytes. Serves until `*shutdown`
// turns true (SIGTERM), then stops the running job with a checkpoint and returns.
#pragma once

#include <absl/status/status.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

#include "coordinator/run_types.h"

namespace baton {

// A Submit carries one job file (at most kMaxJobFileBytes, 256 KiB) and a few names; every other request is small.
inline constexpr int kMaxRequestBytes = 1 << 20;
// The gRPC server's memory quota (grpc::ResourceQuota): what its transports may buffer, all connections together.
inline constexpr size_t kTransportMemoryBytes = 64 << 20;

struct JobServiceOptions {
  std::string listen = "127.0.0.1:7070";  // host:port; port 0 picks a free one
  std::string output_root = "out/jobs";   // each job writes into <output_root>/<name>-<id>/
  // Submitted jobs may read (model, model_config, dataset, init_lora, validation.dataset) only inside this folder,
  // symlinks resolved; others are refused by name (PERMISSION_DENIED). "" = anywhere.
  std::string data_root = ".";
  CoordinatorOptions base;  // stages, workers, timeouts: the same for every job
  // Bearer token every call must carry (rpc/tls.h TokenAuthProcessor). Required with TLS (the process's security,
  // set by main from --tls_dir); refused with --insecure, which serves plaintext without authentication.
  std::string token;
};

// Serves JobService (and gRPC health) on options.listen; calls on_listening("host:port") once it accepts
// calls; the process's security (rpc/tls.h) must be set. Returns when *shutdown is set, after the running job has
// checkpointed and stopped.
absl::Status RunJobService(const JobServiceOptions& options,
                           const std::function<void(const std::string&)>& on_listening,
                           const std::atomic<bool>* shutdown);

}  // namespace baton

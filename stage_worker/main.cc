// stage_worker: one pipeline stage. Serves StageService over gRPC; prints "LISTENING host:port" on stdout
// once it accepts calls (the coordinator's embedded mode reads that line), and before it, with --metrics,
// "metrics: http://HOST:PORT/metrics".
#include <absl/flags/flag.h>
#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <absl/strings/str_cat.h>

#include <cstdio>
#include <string>

#include "core/device/determinism.h"
#include "core/device/device.h"
#include "core/metrics/metrics_server.h"
#include "core/util/files.h"
#include "core/util/flags.h"
#include "core/util/log.h"
#include "core/util/threads.h"
#include "rpc/tls_flags.h"
#include "stage_worker/stage_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "address to serve on (host:port; port 0 picks a free one)");
ABSL_FLAG(std::string, device, "cpu", "compute device: cpu | cuda | cuda:N");
ABSL_FLAG(int, threads, 1, "compute threads");
ABSL_FLAG(int, wait_timeout_s, 300, "longest wait for data from a peer before the step fails");
ABSL_FLAG(int64_t, inbox_bytes, int64_t{2} << 30,
          "most bytes of pushed data waiting to be used (a step's inputs plus the next steps' early pushes); pushes "
          "over it are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, send_queue_bytes, int64_t{1} << 30,
          "most bytes of outputs queued for one neighbour stage and not yet sent; computing waits before queueing "
          "more. On CUDA, pinned host memory is trimmed after a step above inbox_bytes + 2 x send_queue_bytes");
ABSL_FLAG(std::string, model_root, "",
          "read models only from regular files inside this directory, symlinks resolved (default: the working "
          "directory); a Configure naming a model elsewhere is refused");
ABSL_FLAG(std::string, metrics, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one); empty = no metrics");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "stage_worker --listen HOST:PORT (--tls_dir DIR | --insecure) [--model_root DIR] [--device cpu|cuda:N] "
      "[--threads K] [--metrics HOST:PORT]");
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA
  baton::InstallVersionFlag();
  baton::InstallFlagsHelp();
  baton::NormalizeFlagArgs(argc, argv);
  absl::ParseCommandLine(argc, argv);
  // Refuse a device this machine lacks before serving: a clear message and exit 1, never a crash later.
  auto device = baton::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", std::string(device.status().message()).c_str());
    return 1;
  }
  auto security = baton::InstallSecurityFromFlags("stage_worker", /*warn_insecure=*/false);  // rpc/tls_flags.h
  if (!security.ok()) {
    std::fprintf(stderr, "%s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  auto metrics = baton::StartMetricsServerFromFlag(absl::GetFlag(FLAGS_metrics), "stage_worker");
  if (!metrics.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  baton::SetComputeThreads(absl::GetFlag(FLAGS_threads));
  baton::StageRunnerOptions options;
  options.device = absl::GetFlag(FLAGS_device);
  options.wait_timeout = absl::Seconds(absl::GetFlag(FLAGS_wait_timeout_s));
  if (absl::GetFlag(FLAGS_inbox_bytes) < (int64_t{1} << 20)) {
    std::fprintf(stderr, "stage_worker: --inbox_bytes must be at least 1 MiB\n");
    return 1;
  }
  options.inbox_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_inbox_bytes));
  if (absl::GetFlag(FLAGS_send_queue_bytes) < (int64_t{1} << 20)) {
    std::fprintf(stderr, "stage_worker: --send_queue_bytes must be at least 1 MiB\n");
    return 1;
  }
  options.send_queue_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_send_queue_bytes));
  options.model_root = absl::GetFlag(FLAGS_model_root).empty() ? "." : absl::GetFlag(FLAGS_model_root);
  if (auto root = baton::RealPath(options.model_root); !root.ok() || !baton::IsDirectory(*root)) {
    std::fprintf(stderr, "stage_worker: --model_root %s is not a directory\n", options.model_root.c_str());
    return 1;
  }
  absl::Status status = baton::RunStageWorker(absl::GetFlag(FLAGS_listen), options, [&](const std::string& address) {
    baton::SetLogTag(absl::StrCat("stage_worker ", address));
    std::printf("LISTENING %s\n", address.c_str());
    std::fflush(stdout);
  });
  if (!status.ok()) {
    std::fprintf(stderr, "stage_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

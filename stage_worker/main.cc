// stage_worker: one pipeline stage. Serves StageService over gRPC; prints "LISTENING host:port" on stdout
// once it accepts calls (the coordinator's embedded mode reads that line), and before it, with --metrics,
// "metrics: http://HOST:PORT/metrics".
#include <absl/flags/flag.h>

#include <string>

#include "core/device/allocator_settings.h"
#include "core/device/binary_flags.h"
#include "core/device/determinism.h"
#include "rpc/grpc_options.h"
#include "stage_worker/stage_worker_command.h"

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
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA
  baton::PreferExpandableSegments();
  baton::PrepareGrpcPolling();  // before anything initializes gRPC
  baton::ParseBinaryFlags(
      argc, argv,
      "stage_worker --listen HOST:PORT (--tls_dir DIR | --insecure) [--model_root DIR] [--device cpu|cuda:N] "
      "[--threads K] [--metrics HOST:PORT]");
  baton::StageWorkerCommand command;
  command.listen = absl::GetFlag(FLAGS_listen);
  command.device = absl::GetFlag(FLAGS_device);
  command.threads = absl::GetFlag(FLAGS_threads);
  command.wait_timeout_s = absl::GetFlag(FLAGS_wait_timeout_s);
  command.inbox_bytes = absl::GetFlag(FLAGS_inbox_bytes);
  command.send_queue_bytes = absl::GetFlag(FLAGS_send_queue_bytes);
  command.model_root = absl::GetFlag(FLAGS_model_root);
  command.metrics = absl::GetFlag(FLAGS_metrics);
  return baton::RunStageWorkerCommand(command);
}

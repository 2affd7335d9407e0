// The `stage_worker` binary behind its flags: checks them, starts metrics, serves StageService until Shutdown.
// main.cc parses the flags into a StageWorkerCommand; RunStageWorkerCommand returns the exit code (its lines and codes
// are the binary's contract: 2 bad security or metrics flags, 1 a bad value or a failure).
#pragma once

#include <cstdint>
#include <string>

namespace baton {

struct StageWorkerCommand {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  std::string device = "cpu";          // cpu | cuda | cuda:N
  int threads = 1;                     // compute threads
  int wait_timeout_s = 300;            // longest wait for data from a peer before the step fails
  int64_t inbox_bytes = int64_t{2} << 30, send_queue_bytes = int64_t{1} << 30;  // each at least 1 MiB
  std::string model_root;  // models only from inside it ("" = the working directory)
  std::string metrics;     // HOST:PORT, "" = no metrics
};

// Prints "LISTENING host:port" on stdout once the server accepts calls (the coordinator's embedded mode reads it).
int RunStageWorkerCommand(const StageWorkerCommand& command);

}  // namespace baton

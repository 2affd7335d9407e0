// The `coordinator` binary behind its flags: one job (--job) or the job service (--listen). main.cc parses the flags
// into a CoordinatorCommand and owns the SIGINT/SIGTERM handlers that set its stop flag; RunCoordinatorCommand does
// the rest and returns the exit code (its lines and codes are the binary's contract: 2 bad flags, 1 a failed run,
// 128 + signal an interrupted one).
#pragma once

#include <atomic>
#include <string>

#include "coordinator/run_types.h"

namespace baton {

struct CoordinatorCommand {
  CoordinatorOptions options;   // stages, timeouts, output, resume (workers and metrics_* are set from the flags below)
  std::string workers;          // --workers as given: comma-separated host:port, one per stage; "" = local workers
  std::string job;              // --job: run this one job and exit
  std::string listen;           // --listen: serve the job service instead
  std::string metrics;          // --metrics HOST:PORT, "" = off
  std::string data_root = ".";  // --listen: where submitted jobs may read
  std::string token_file;       // --listen with TLS: the bearer token
  std::string output_root = "out/jobs";  // --listen: the jobs' folders' root
  // Set by main's handler on the first SIGINT/SIGTERM (required): the job finishes its step, checkpoints and stops,
  // or the service stops its running job that way and returns. `signal`: which one (a job's exit code is 128 + it).
  const std::atomic<bool>* stop = nullptr;
  const std::atomic<int>* signal = nullptr;
};

int RunCoordinatorCommand(const CoordinatorCommand& command);

}  // namespace baton

// How a process drives its stage workers: how many, where (started here or given), the timeouts of their RPCs, and
// what a lost worker gets (retries, restart time, stall time). The coordinator's run options extend these
// (coordinator/run_types.h); `baton sample --stages N` fills them alone.
#pragma once

#include <absl/status/status.h>
#include <absl/time/time.h>

#include <string>
#include <vector>

namespace baton {

struct StageDriverOptions {
  int stages = 1;    // per replica
  int replicas = 1;  // data-parallel pipelines (stage_driver/replica_set.h), each of `stages` workers
  // host:port per stage, replica after replica (replica r's stage i is workers[r * stages + i]); empty = start local
  // stage workers
  std::vector<std::string> workers;
  std::string output_dir = "out/run";                  // the run's folder (prometheus_targets.json with metrics)
  absl::Duration rpc_timeout = absl::Seconds(300);     // any one RPC, including a whole step
  absl::Duration connect_timeout = absl::Seconds(20);  // waiting for a worker to answer at all
  std::string stage_worker_binary;                     // embedded mode; default: next to this binary
  int worker_wait_timeout_s = 0;                       // embedded workers' peer wait (0 = rpc_timeout)
  bool quiet = false;                                  // no per-step lines on stdout
  // Worker loss (a stage dies, fails mid-step or stalls): the step is aborted everywhere and redone, up to
  // step_retries times per step (0: the first loss fails the run), once the lost stage is back: a local worker
  // restarted here, a remote one answering at its address again, within worker_restart_timeout.
  int step_retries = 3;
  absl::Duration worker_restart_timeout = absl::Seconds(60);
  // A stage whose step makes no progress (no heartbeat, or a push in flight) this long counts as lost: well above
  // the stages' 1 s heartbeat on a loaded machine, far below the 300 s rpc_timeout.
  absl::Duration stall_timeout = absl::Seconds(15);
  // Metrics (stage_driver/stage_metrics.h): --metrics as given ("HOST:PORT"; empty = off) and where the driving
  // process's own server is bound. Local stage workers serve theirs on HOST:PORT+1+i (PORT 0: free ports); the run
  // prints them all and writes <output_dir>/prometheus_targets.json.
  std::string metrics_listen, metrics_address;
};

// INVALID_ARGUMENT unless stages ≥ 1, replicas ≥ 1 and --workers, when given, lists one address per stage of every
// replica.
absl::Status CheckStageDriverOptions(const StageDriverOptions& options);

}  // namespace baton

// How a process drives its stage workers: how many, where (started here or given), the timeouts of their RPCs, and
// what a lost worker gets (retries, restart time, stall time). A training run's options extend these; `baton sample
// --stages N` fills them alone.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <memory>
#include <string>
#include <vector>

namespace baton {

class SharedStageWorkers;

struct StageDriverOptions {
  int stages = 1;    // per replica (replica 0's when replica_stages differ)
  int replicas = 1;  // data-parallel pipelines, each of `stages` workers
  // Stages per replica where replicas differ (a 48 GB card as a one-stage replica beside two 24 GB cards as a
  // two-stage one): `replicas` entries; empty = every replica has `stages`.
  std::vector<int> replica_stages;
  // host:port per stage, replica after replica (replica r's stage i is workers[FirstWorker(r) + i]); empty = start
  // local stage workers
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
  // The driving process, as its envelopes' sender and its metrics target's `baton_process` label name it.
  std::string process = "stage_driver";
  // Local workers this pipeline shares with others (a sweep's members; stage_driver/shared_workers.h): started by the
  // first, kept when this one stops, and configured `shared` (each stage holds every member's adapters over one copy
  // of the frozen weights). Null: the pipeline's own workers.
  std::shared_ptr<SharedStageWorkers> shared_workers;
  // Configure the stages `shared` (ConfigureRequest.shared): this pipeline joins the others a worker holds (set for
  // every member of a sweep, on shared local workers or on the given --workers).
  bool shared_stages = false;

  int StagesOf(int replica) const { return replica_stages.empty() ? stages : replica_stages[replica]; }
  int FirstWorker(int replica) const;  // the global index of replica r's stage 0 (workers, devices, metrics ports)
  int TotalWorkers() const { return FirstWorker(replicas); }
  bool UnequalReplicas() const;  // replica_stages holds two different counts
};

// The --workers flag: stage workers' host:port, replica after replica, in one of three forms:
//   "a:1,b:1,c:1,d:1"       one list (with --replicas R: R groups of --stages, in order)
//   "a:1,b:1;c:1,d:1"       one group per replica, separated by ';'
//   "@cluster.txt"          a file with one line per replica (addresses separated by ',' or spaces; '#' comments)
// The groups as given (one group for the first form). INVALID_ARGUMENT for an empty group or an unreadable file.
absl::StatusOr<std::vector<std::vector<std::string>>> ParseWorkerGroups(const std::string& flag);

// Fills options.workers from the groups. Several groups fix the replica count (options.replicas 0 = take it; another
// count is an error) and each replica's stages: groups of one size must hold options.stages addresses (errors name
// the group); groups of different sizes set options.replica_stages (and options.stages to replica 0's).
absl::Status ApplyWorkerGroups(const std::vector<std::vector<std::string>>& groups, StageDriverOptions& options);

// INVALID_ARGUMENT unless stages ≥ 1, replicas ≥ 1, replica_stages (when given) one count ≥ 1 per replica, and
// --workers, when given, lists one address per stage of every replica.
absl::Status CheckStageDriverOptions(const StageDriverOptions& options);

}  // namespace baton

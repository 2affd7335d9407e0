// The stage workers of one run, as a set: started here (local, the embedded default) or given (--workers),
// connected, health-checked and configured with their slices of the plan; and after a lost step brought back:
// a dead or stalled local worker is restarted, a remote one is waited for at its address (systemd/Kubernetes
// restart it), then every stage is reconfigured for a new generation (new neighbour addresses where they changed;
// survivors keep their loaded model and drop the aborted step's data) so that the step can be redone.
#pragma once

#include <absl/status/statusor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/pipeline/partition.h"
#include "stage_driver/driver_options.h"
#include "stage_driver/local_workers.h"
#include "stage_driver/pipeline_spec.h"
#include "stage_driver/stage_fleet.h"

namespace baton {

class StageSet {
 public:
  // `pipeline`: what every stage holds (its id is fleet->job_id()). `plan`: [worker][chunk] block ranges (PlanStages).
  // `fleet` receives the clients; it and `options` outlive this set; `stop` is polled while waiting for workers.
  // `replica`: which of options.replicas pipelines this set is (its workers, devices and metrics ports are that
  // replica's: global worker index options.FirstWorker(replica) + stage).
  StageSet(PipelineSpec pipeline, const StageDriverOptions& options, std::vector<std::vector<StageSpec>> plan,
           StageFleet* fleet, std::function<bool()> stop, int replica = 0);
  // A set on shared workers that ends without Stop (its run failed) still releases its pipeline there: the workers go
  // on serving the others and would otherwise hold its adapters and inbox until they stop.
  ~StageSet();

  // Starts (local) or takes (remote) the workers, then connects to and configures each.
  absl::Status Start();
  absl::Status Configure();
  const std::vector<std::string>& addresses() const { return addresses_; }

  // After a failed step: the stages that are lost (a dead local process, a remote one that does not answer its
  // health check, and `suspect`, the stage the stall watch blamed), each brought back within
  // worker_restart_timeout, then every stage reconfigured. Returns the lost stages. An error names the stage that
  // did not come back: DEADLINE_EXCEEDED when it did not within the timeout (a local worker that does not start,
  // a remote one that does not answer); other codes when something failed meanwhile (e.g. it died again).
  absl::StatusOr<std::vector<int>> Recover(int suspect);
  // "running (pid 123)" / "killed by signal 9 (Killed)" for a local worker, "" for a remote one.
  std::string Describe(int stage);
  // Local workers: asks each to shut down, then stops the processes. Remote workers are left running. On shared
  // workers (options.shared_stages): releases this pipeline there and leaves the workers to their owner.
  absl::Status Stop();
  // The local workers (own or shared); null for remote ones.
  LocalWorkers* local();
  int replica() const { return replica_; }

 private:
  absl::StatusOr<std::vector<std::string>> StartWorkers();
  absl::Status Connect();
  // Recover's steps: the stages that do not answer (and `suspect`); their local workers restarted (own or shared);
  // remote ones waited for.
  std::vector<int> Lost(int suspect);
  absl::Status RestartLocal(const std::vector<int>& lost);
  absl::Status AwaitRemote(const std::vector<int>& lost);
  v1::ConfigureRequest ConfigureRequestFor(int i) const;
  void ReleaseOnSharedWorkers();  // once; best-effort (a worker that is gone holds nothing)

  const PipelineSpec pipeline_;
  const StageDriverOptions& options_;
  std::vector<std::vector<StageSpec>> plan_;
  StageFleet* fleet_;
  std::function<bool()> stop_;
  int replica_ = 0;
  std::unique_ptr<LocalWorkers> local_;
  std::vector<std::string> addresses_;
  bool released_ = false;
};

}  // namespace baton

// The pipelines one stage worker holds. A plain Configure gives the worker to one pipeline, as a worker always was;
// a `shared` one (ConfigureRequest.shared: a sweep's members, many LoRAs on one loaded model) adds its pipeline beside
// the others. Each pipeline is a StageRunner of its own (adapters, inbox, step window, generation, metrics under its
// job's name); those of the same FrozenWeightsKey share one copy of the frozen weights (the first one's, never loaded
// again), and all take turns on the worker's compute one forward or backward at a time
// (StageRunnerOptions::compute_turns), so one pipeline's bubble is another's work. Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <map>
#include <memory>
#include <string>

#include "baton/v1/stage.pb.h"
#include "stage_worker/stage_runner.h"

namespace baton {

class StageTenants {
 public:
  explicit StageTenants(StageRunnerOptions options);

  // Not shared: the one runner a plain Configure always reuses (its loaded model kept where it fits) becomes the only
  // pipeline. Shared: the request's pipeline's runner (new for a job the worker does not hold), built on the frozen
  // tensors of any pipeline of the same FrozenWeightsKey.
  absl::StatusOr<v1::ConfigureResponse> Configure(const v1::ConfigureRequest& req) ABSL_LOCKS_EXCLUDED(configure_mu_);
  // The runner of pipeline `job_id`; for a job the worker does not hold, the plain one (its checks then name the
  // mismatch, as a one-pipeline worker's always did). Never null.
  std::shared_ptr<StageRunner> For(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The most a Push may bring before its header names the pipeline (the largest free inbox; Deliver checks its own).
  uint64_t max_push_budget_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops pipeline `job_id` (its config hash must match; an unknown one is ignored): its runner goes once no call
  // holds it. The plain runner is replaced by a fresh one when it is the one released.
  void Release(const std::string& job_id, const std::string& config_hash) ABSL_LOCKS_EXCLUDED(mu_);
  // How many pipelines the worker holds (1 before any Configure: the plain runner).
  int size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Our own address, once the server has bound its port (every runner names itself with it).
  void set_address(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Frozen tensors per chunk of a pipeline other than `self` built for `key`; empty when none is.
  std::vector<FrozenTensors> SharedFrozen(const std::string& key, const StageRunner* self) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The runner a shared Configure of `job_id` configures: the pipeline's own, the plain one while it holds nothing,
  // else a new one.
  std::shared_ptr<StageRunner> RunnerToJoin(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string device_;  // where a request that names no device computes (FrozenWeightsKey)
  absl::Mutex configure_mu_;  // one Configure at a time (a join reads the others' frozen tensors)
  mutable absl::Mutex mu_;    // the map; never held while a runner computes or configures
  StageRunnerOptions options_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StageRunner> plain_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<StageRunner>> by_job_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton

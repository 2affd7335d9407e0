// R replicas of S fake stage workers (stage_driver/testing/fake_stage_worker.h) driven by the coordinator's real
// ReplicaSet, all in the test's process: what the replica logic's and the stage-local exchange's unit tests run on.
// Stage i of every replica holds the LoRA parameters "s<i>.a" and "s<i>.b" (4 elements each).
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/replica_set.h"
#include "stage_driver/testing/fake_stage_worker.h"

namespace baton {

class FakeReplicas {
 public:
  // Every worker started, the set started (connected and configured); the split even (not by speed).
  static absl::StatusOr<std::unique_ptr<FakeReplicas>> Start(int replicas, int stages, int micro_batches,
                                                             bool local_optimizer);
  ~FakeReplicas();

  ReplicaSet& set() { return *set_; }
  FakeStageWorker& worker(int global) { return *workers_[global]; }
  // The recoveries reported: (step, 1-based; the global worker blamed, -1 for none).
  std::vector<std::pair<int64_t, int>> recoveries() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every adapter, zeros, by name.
  std::map<std::string, at::Tensor> Master() const;
  // Step `step` over `micro_batches` tiny micro-batches, with Master()'s adapters (ReplicaSet::Run's
  // `reduce_when_held` and `guard`).
  absl::StatusOr<StepOutputs> Run(int64_t step, int micro_batches, bool reduce_when_held = false,
                                  SliceGuard* guard = nullptr);

 private:
  FakeReplicas() = default;

  StageDriverOptions options_;
  std::vector<std::vector<std::vector<StageSpec>>> plans_;
  PipelineSpec pipeline_;
  std::vector<std::unique_ptr<FakeStageWorker>> workers_;
  std::unique_ptr<ReplicaSet> set_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<int64_t, int>> recoveries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton

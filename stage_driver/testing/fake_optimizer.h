// The stage-local optimizer of a fake stage worker (fake_stage_worker.h): the state LoadState set, the gradients a
// held step left, and a peer group in the test's own process (every fake worker that joined the same prefix), so a
// driving process's peer exchange (the stage-local optimizer's) runs against it without a process or a socket. Its rule
// is plain SGD on the group's summed gradient times the clip factor: the exchange's bookkeeping is under test here,
// not AdamW (core/train/adamw_test.cc) or c10d (collective/peer_group_test.cc).
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "core/model/model_family.h"

namespace baton {

class FakeGroup;

class FakeLocalOptimizer {
 public:
  explicit FakeLocalOptimizer(std::vector<std::string> names) : names_(std::move(names)) {}

  // LoadState: the adapters and "__step__" (moments are taken and ignored); held gradients are dropped.
  void Load(const TensorMap& state) ABSL_LOCKS_EXCLUDED(mu_);
  // A step run with HOLD_NEW (`add` false) or HOLD_ADD: its gradients held for Reduce.
  void Hold(int64_t step, const TensorMap& grads, bool add) ABSL_LOCKS_EXCLUDED(mu_);
  // JoinGroup: waits for the whole group (size 1: none); the optimizer's step count, -1 without state.
  absl::StatusOr<int64_t> Join(const v1::JoinGroupRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Reduce: the held sums of `step` added over the group in rank order; each adapter's squared norm, in name order.
  // ABORTED when a peer failed its own Reduce (Break), as a collective fails when a peer dies.
  absl::StatusOr<v1::ReduceResponse> Reduce(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // Update: adapter -= lr x clip_scale x the reduced gradient; the new step count.
  absl::StatusOr<int64_t> Update(const v1::UpdateRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // GetLora: the adapters (zeros before any Load) and, with `optimizer_state`, "__step__".
  TensorMap State(bool optimizer_state, int numel) const ABSL_LOCKS_EXCLUDED(mu_);
  // A worker killed: it holds nothing any more, and its group's collective fails for the others.
  void Forget() ABSL_LOCKS_EXCLUDED(mu_);
  void Break() ABSL_LOCKS_EXCLUDED(mu_);  // its group's collective fails for the others

 private:
  const std::vector<std::string> names_;
  mutable absl::Mutex mu_;
  TensorMap adapters_ ABSL_GUARDED_BY(mu_);
  int64_t steps_ ABSL_GUARDED_BY(mu_) = -1;  // -1: no state loaded
  int64_t held_step_ ABSL_GUARDED_BY(mu_) = -1;
  TensorMap held_ ABSL_GUARDED_BY(mu_);
  TensorMap reduced_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<FakeGroup> group_ ABSL_GUARDED_BY(mu_);
  int rank_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton

// The stage-local optimizer of data-parallel replicas (the job's `replica_exchange: allreduce`): the step's LoRA
// gradients held on the stage, summed over the peer group, and AdamW applied to this stage's adapters.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "collective/peer_group.h"
#include "core/train/optimizer.h"

namespace baton {

// The gradients of stage s of every replica in the step are summed by c10d's Gloo allreduce (StageService's JoinGroup,
// Reduce, Update and LoadState). The update is bitwise the coordinator's: the same AdamW on the same fp32 values, and
// the clipping factor computed by the coordinator from every stage's squared norms in the order every trainer
// adds them. The held sum is kept through a failed Reduce, so a group re-formed without a lost replica reduces it
// again. Not thread-safe: the StageRunner calls it under its run lock.
class LocalOptimizer {
 public:
  using Tensors = std::map<std::string, at::Tensor>;

  LocalOptimizer() = default;
  // Joins every reduction's thread: one given up waits out its group's timeout at most (none outlives the worker
  // holding a device tensor and a Gloo group, which crashed its exit now and then).
  ~LocalOptimizer();

  // The summed gradients of one plan (device tensors, by name): a new sum for `step`, or (`add`) added to the sum held
  // for the same step.
  absl::Status Hold(int64_t step, bool add, const Tensors& grads);
  // A new group (the old one, and any reduction in flight in it, are given up first), and the job's fixed optimizer
  // settings that Update steps by from now on (the state carries over).
  absl::Status JoinGroup(const PeerGroupSpec& spec, const v1::OptimizerSettings& settings);
  // Starts summing the held sum of `step` over the group on a thread of its own (the plan's reduce_when_held), so that
  // it runs while the upstream stages finish their backwards; Reduce then waits for it. Holding more, joining a group
  // or loading state gives it up (and the group with it: a Gloo collective cannot be cancelled).
  absl::Status StartReduce(int64_t step);
  // The held sum of `step`, summed over the group into the reduced gradients (the held sum is left as it was; the
  // sum StartReduce began, when there is one); the reduced gradients' squared norms by name. ABORTED when the group
  // failed or was given up: the caller forms a new one.
  absl::StatusOr<v1::ReduceResponse> Reduce(int64_t step);
  // The optimizer on `params` (the live adapters, modified in place) from the reduced gradients of req.step(), by the
  // settings of the last JoinGroup; then nothing is held. The optimizer's step count after it. With req.estimate()
  // (Prodigy's) nothing changes: the response holds this stage's terms of the step-size estimate.
  absl::StatusOr<v1::UpdateResponse> Update(const v1::UpdateRequest& req, Tensors params);
  // The optimizer's step count, or -1 when no state was loaded since the last Reset (a new worker holds none of the
  // run's).
  int64_t Steps() const;
  // The optimizer's state as LoadState takes it (CPU, fp32 moments; "__step__"), and setting it (drops what is held).
  Tensors State() const;
  // The same tensors without copies (the optimizer's own: valid until its next step; the host copy's writer).
  Tensors StateView() const;
  absl::Status Load(const Tensors& state);
  // Everything dropped: held and reduced sums, the optimizer's state, the group (a new run).
  void Reset();

 private:
  // Prodigy's terms of the estimate for `params` at the step's (clipped) reduced gradients `grads`.
  absl::StatusOr<v1::UpdateResponse> Estimate(const v1::UpdateRequest& req, const Tensors& params,
                                              const Tensors& grads) const;
  // The held sum as one fp32 buffer on its device, in name order: one collective per step, whatever the number of
  // adapters (Gloo sums a host copy of it).
  at::Tensor FlattenOnDevice() const;
  // The response of Reduce once `reduced_` holds the step's sum: its squared norms (one readback), the sum's bytes and
  // seconds on the wire (`flat`: undefined when nothing was summed, a group of one).
  absl::StatusOr<v1::ReduceResponse> Reduced(int64_t step, const at::Tensor& flat, double seconds, bool begun,
                                             v1::ReduceResponse& response);
  // A reduction in flight given up, and its group with it.
  void Abandon();
  // The threads of reductions that have ended, joined.
  void JoinEnded();
  // FAILED_PRECONDITION unless a sum of `step` is held.
  absl::Status CheckHeld(int64_t step) const;
  // The held and reduced sums dropped (and any reduction in flight given up).
  void DropSums();

  // A reduction started by StartReduce: its thread holds the group and the buffer until it ends.
  struct Flight {
    int64_t step = -1;
    std::shared_ptr<PeerGroup> group;
    std::shared_ptr<at::Tensor> flat;  // the host copy, summed in place (set by the thread before `done`)
    std::shared_future<std::pair<absl::Status, double>> done;  // the status and seconds
  };

  int64_t held_step_ = -1;
  Tensors held_;               // the step's summed gradients, on the stage's device
  int64_t reduced_step_ = -1;  // the step whose reduced gradients `reduced_` holds
  Tensors reduced_;            // on the stage's device
  std::shared_ptr<PeerGroup> group_;
  std::optional<Flight> flight_;
  // Every reduction's thread with its outcome (ready once it ended): joined when ended, all by the destructor.
  std::vector<std::pair<std::thread, std::shared_future<std::pair<absl::Status, double>>>> reductions_;
  std::optional<OptimizerConfig> config_;  // from the last JoinGroup
  std::string settings_bytes_;             // its settings, serialized (new ones rebuild the optimizer)
  std::unique_ptr<Optimizer> optimizer_;   // built by the first Update after a Load or new settings
  bool has_state_ = false;                 // Load was called since the last Reset
  Tensors loaded_;  // state from Load, taken by the first Update (the optimizer needs the job's settings to be built)
};

}  // namespace baton

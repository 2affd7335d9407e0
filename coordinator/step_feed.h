// The steps' inputs, each prepared and pushed to its replicas' stages (ReplicaSet::Prefetch) in the background while
// the step before it runs, so that at the boundary only the new adapters travel. The feed keeps no record of what the
// stages hold: each pipeline does (StagePipeline::Prefetch), and forgets it itself when a recovery empties its stages'
// inboxes, so a lost step needs nothing from the feed.
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <cstdint>
#include <functional>
#include <future>

#include "coordinator/replica_set.h"

namespace baton {

// Not thread-safe: the training loop's (Take, then Ahead for the next step).
class StepFeed {
 public:
  // `prepare`: a step's inputs (PrepareStepInputs: deterministic, so a step prepared twice is the same step).
  // `replicas` outlives the feed; a push in flight longer than `stall_timeout` is cancelled (the step feeds it).
  using Prepare = std::function<absl::StatusOr<StepInputs>(int64_t step)>;
  StepFeed(Prepare prepare, ReplicaSet& replicas, absl::Duration stall_timeout);
  ~StepFeed();  // waits for the work in the background

  // Step `step`'s inputs: the ones prepared ahead (waited for), or prepared now (none ahead, or another step's: a
  // rollback went back).
  absl::StatusOr<StepInputs> Take(int64_t step);
  // Step `step`'s inputs prepared and pushed early, in the background.
  void Ahead(int64_t step);

 private:
  Prepare prepare_;
  ReplicaSet& replicas_;
  const absl::Duration stall_timeout_;
  int64_t ahead_step_ = -1;
  std::future<absl::StatusOr<StepInputs>> ahead_;
};

}  // namespace baton

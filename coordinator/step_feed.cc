#include "coordinator/step_feed.h"

#include <chrono>

#include "core/util/log.h"

namespace baton {

StepFeed::StepFeed(Prepare prepare, ReplicaSet& replicas, absl::Duration stall_timeout)
    : prepare_(std::move(prepare)), replicas_(replicas), stall_timeout_(stall_timeout) {}

StepFeed::~StepFeed() {
  if (ahead_.valid()) ahead_.wait();
}

void StepFeed::Ahead(int64_t step) {
  if (ahead_.valid()) ahead_.wait();
  ahead_step_ = step;
  ahead_ = std::async(std::launch::async, [this, step]() -> absl::StatusOr<StepInputs> {
    absl::StatusOr<StepInputs> inputs = prepare_(step);
    if (!inputs.ok()) return inputs;
    // A push that failed (a stage lost after the step before succeeded) costs nothing: the step feeds its data, and
    // its pipeline finds the lost stage and recovers it.
    if (absl::Status pushed = replicas_.Prefetch(step, *inputs); !pushed.ok()) {
      LogWarning("step ", step + 1, ": the early push of its inputs failed (", pushed.message(),
                 "); feeding them with the step");
    }
    return inputs;
  });
}

absl::StatusOr<StepInputs> StepFeed::Take(int64_t step) {
  if (!ahead_.valid()) return prepare_(step);
  while (ahead_.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
    if (replicas_.OldestPushSeconds() > absl::ToDoubleSeconds(stall_timeout_)) replicas_.CancelAll();  // steps re-arm
  }
  absl::StatusOr<StepInputs> inputs = ahead_.get();
  if (ahead_step_ != step || !inputs.ok()) return prepare_(step);  // another step's, or an error to be said again
  return inputs;
}

}  // namespace baton

// What a stage is doing in its current step, for the RunStep heartbeat (StageHeartbeat): the step's thread sets
// it at every wait and computation, the heartbeat thread reads it. The coordinator compares the heartbeats of all
// stages to tell a stalled stage (no heartbeat) or link (a push in flight for long) from a slow one.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#include <chrono>
#include <string>

#include "baton/v1/stage.pb.h"

namespace baton {

// waiting_on values besides a stage index.
inline constexpr int kWaitingOnCoordinator = -1;
inline constexpr int kNotWaiting = -2;

class ProgressBoard {
 public:
  void Set(std::string activity, int waiting_on = kNotWaiting) {
    absl::MutexLock lock(&mu_);
    activity_ = std::move(activity);
    waiting_on_ = waiting_on;
    since_ = std::chrono::steady_clock::now();
  }
  // activity, activity_seconds and waiting_on (the push fields are the runner's to fill in).
  v1::StageHeartbeat Snapshot() const {
    absl::MutexLock lock(&mu_);
    v1::StageHeartbeat p;
    p.set_activity(activity_);
    p.set_activity_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count());
    p.set_waiting_on(waiting_on_);
    return p;
  }

 private:
  mutable absl::Mutex mu_;
  std::string activity_ ABSL_GUARDED_BY(mu_) = "starting the step";
  int waiting_on_ ABSL_GUARDED_BY(mu_) = kNotWaiting;
  std::chrono::steady_clock::time_point since_ ABSL_GUARDED_BY(mu_) = std::chrono::steady_clock::now();
};

}  // namespace baton

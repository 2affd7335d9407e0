// Local stage workers that several pipelines run on at once (a sweep's members: many LoRAs on one loaded model).
// The first pipeline to start starts them; the others take the same ones. A pipeline that loses a worker restarts
// it; one that loses it too afterwards finds it restarted (Revive) rather than restarting it again. They outlive
// every pipeline: their owner (the sweep) stops them after the last one. Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <memory>
#include <string>
#include <vector>

#include "stage_driver/local_workers.h"

namespace baton {

class SharedStageWorkers {
 public:
  // The workers' addresses, started with `options` by the first caller (the others' options are not used).
  absl::StatusOr<std::vector<std::string>> Start(int n, const LocalWorkerOptions& options) ABSL_LOCKS_EXCLUDED(mu_);
  // Worker i, which the caller knew at `known` and lost: its new address when another pipeline has already restarted
  // it (alive at another address), else restarted now (LocalWorkers::Restart).
  absl::StatusOr<std::string> Revive(int i, const std::string& known, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Null before Start.
  LocalWorkers* workers() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks nothing of the workers (their pipelines have ended): stops the processes. Idempotent.
  absl::Status Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;  // held across a start or a restart, so that one pipeline does it
  std::unique_ptr<LocalWorkers> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton

#include "stage_driver/shared_workers.h"

#include <absl/strings/str_cat.h>

#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::vector<std::string>> SharedStageWorkers::Start(int n, const LocalWorkerOptions& options) {
  absl::MutexLock lock(&mu_);
  if (!workers_) {
    ASSIGN_OR_RETURN(workers_, LocalWorkers::Start(n, options));
  } else if (workers_->size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("a pipeline of ", n, " stages cannot share ", workers_->size(),
                                                   " stage workers: every member needs the same stages"));
  }
  return workers_->addresses();
}

absl::StatusOr<std::string> SharedStageWorkers::Revive(int i, const std::string& known, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!workers_) return absl::FailedPreconditionError("shared stage workers: Revive before Start");
  const std::string current = workers_->addresses()[i];
  if (current != known && workers_->Alive(i)) return current;
  return workers_->Restart(i, timeout);
}

LocalWorkers* SharedStageWorkers::workers() {
  absl::MutexLock lock(&mu_);
  return workers_.get();
}

absl::Status SharedStageWorkers::Stop() {
  absl::MutexLock lock(&mu_);
  return workers_ ? workers_->Stop() : absl::OkStatus();
}

}  // namespace baton

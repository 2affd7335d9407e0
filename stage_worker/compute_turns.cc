#include "stage_worker/compute_turns.h"

namespace baton {

ComputeTurns::Turn ComputeTurns::Take(Kind kind) {
  absl::MutexLock lock(&mu_);
  const std::pair<int, uint64_t> me{static_cast<int>(kind), next_ticket_++};
  waiting_.insert(me);
  auto mine = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_ && *waiting_.begin() == me; };
  mu_.Await(absl::Condition(&mine));
  waiting_.erase(me);
  busy_ = true;
  return Turn(this);
}

void ComputeTurns::Release() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

}  // namespace baton

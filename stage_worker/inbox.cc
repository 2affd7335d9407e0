#include "stage_worker/inbox.h"

#include <absl/strings/str_cat.h>

#include <chrono>

namespace baton {

void Inbox::Put(int64_t step, int32_t micro_batch, v1::EnvelopeHeader::Kind kind, TensorMap tensors, int32_t chunk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_[Key{step, micro_batch, static_cast<int>(kind), chunk}] = std::move(tensors);
  }
  cv_.notify_all();
}

absl::StatusOr<TensorMap> Inbox::Take(int64_t step, int32_t micro_batch, v1::EnvelopeHeader::Kind kind,
                                      absl::Duration timeout, const std::function<bool()>& cancelled,
                                      const std::string& from, int32_t chunk) {
  const Key key{step, micro_batch, static_cast<int>(kind), chunk};
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto it = items_.find(key);
    if (it != items_.end()) {
      TensorMap out = std::move(it->second);
      items_.erase(it);
      return out;
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat("cancelled while waiting for ", v1::EnvelopeHeader::Kind_Name(kind),
                                               " of step ", step, " micro-batch ", micro_batch,
                                               chunk ? absl::StrCat(" chunk ", chunk) : ""));
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no ", v1::EnvelopeHeader::Kind_Name(kind), " for step ", step, " micro-batch ", micro_batch,
          chunk ? absl::StrCat(" chunk ", chunk) : "", " from ", from, " within ", absl::FormatDuration(timeout)));
    }
    // Wake at least every 100 ms to notice cancellation.
    cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
}

void Inbox::DropBefore(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = items_.begin(); it != items_.end();) {
    it = std::get<0>(it->first) < step ? items_.erase(it) : std::next(it);
  }
}

void Inbox::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  items_.clear();
}

size_t Inbox::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

}  // namespace baton

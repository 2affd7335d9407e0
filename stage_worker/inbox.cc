#include "stage_worker/inbox.h"

#include <absl/strings/str_cat.h>

#include <chrono>
#include <cstdint>

namespace baton {

uint64_t BundleBytes(const TensorMap& tensors) {
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += t.defined() ? static_cast<uint64_t>(t.nbytes()) : 0;
  return bytes;
}

absl::Status Inbox::Put(int64_t step, int32_t micro_batch, v1::EnvelopeHeader::Kind kind, TensorMap tensors,
                        int32_t chunk) {
  const uint64_t bytes = BundleBytes(tensors);
  {
    absl::MutexLock lock(&mu_);
    const Key key{step, micro_batch, static_cast<int>(kind), chunk};
    auto it = items_.find(key);
    const uint64_t replaced = it == items_.end() ? 0 : BundleBytes(it->second);
    if (bytes_ - replaced + bytes > budget_) {
      return absl::ResourceExhaustedError(absl::StrCat("inbox full: ", v1::EnvelopeHeader::Kind_Name(kind), " of step ",
                                                       step, " (", bytes, " bytes) would exceed the ", budget_,
                                                       "-byte inbox budget (", bytes_ - replaced,
                                                       " bytes held; raise --inbox_bytes)"));
    }
    bytes_ = bytes_ - replaced + bytes;
    items_[key] = std::move(tensors);
  }
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> Inbox::Take(int64_t step, int32_t micro_batch, v1::EnvelopeHeader::Kind kind,
                                      absl::Duration timeout, const std::function<bool()>& cancelled,
                                      const std::string& from, int32_t chunk) {
  const Key key{step, micro_batch, static_cast<int>(kind), chunk};
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = items_.find(key);
    if (it != items_.end()) {
      TensorMap out = std::move(it->second);
      bytes_ -= BundleBytes(out);
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
    cv_.WaitWithTimeout(&mu_, absl::FromChrono(std::min(deadline, now + std::chrono::milliseconds(100)) - now));
  }
}

void Inbox::DropBefore(int64_t step) { DropOutside(step, INT64_MAX); }

void Inbox::DropStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  for (auto it = items_.begin(); it != items_.end();) {
    if (std::get<0>(it->first) != step) {
      ++it;
      continue;
    }
    bytes_ -= BundleBytes(it->second);
    it = items_.erase(it);
  }
}

void Inbox::DropOutside(int64_t first, int64_t last) {
  absl::MutexLock lock(&mu_);
  for (auto it = items_.begin(); it != items_.end();) {
    const int64_t step = std::get<0>(it->first);
    if (step >= first && step <= last) {
      ++it;
      continue;
    }
    bytes_ -= BundleBytes(it->second);
    it = items_.erase(it);
  }
}

void Inbox::Clear() {
  absl::MutexLock lock(&mu_);
  items_.clear();
  bytes_ = 0;
}

uint64_t Inbox::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

uint64_t Inbox::free_bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_ >= budget_ ? 0 : budget_ - bytes_;
}

size_t Inbox::size() const {
  absl::MutexLock lock(&mu_);
  return items_.size();
}

}  // namespace baton

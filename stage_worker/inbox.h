// The stage worker's inbox: envelopes pushed by the coordinator and neighbour stages wait here, keyed by
// (step, micro-batch, kind, chunk) -- chunk: the receiver's model chunk (interleaved schedule; else 0) -- until the
// step runner asks for them. Every wait is bounded by a deadline and can be cut short by cancellation, so a lost
// neighbour is an error, never a hang. The stored bytes are bounded by a budget: a Put over it is refused
// (RESOURCE_EXHAUSTED), so pushes nobody takes cannot exhaust the worker.
#pragma once

#include <ATen/ATen.h>
#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "baton/v1/stage.pb.h"

namespace baton {

using TensorMap = std::map<std::string, at::Tensor>;

class Inbox {
 public:
  static constexpr uint64_t kDefaultBudgetBytes = uint64_t{2} << 30;
  explicit Inbox(uint64_t budget_bytes = kDefaultBudgetBytes) : budget_(budget_bytes) {}

  // Stores a bundle; a second bundle for the same key replaces the first (a retried push). RESOURCE_EXHAUSTED
  // (nothing stored) when the inbox would then hold more than its budget.
  absl::Status Put(int64_t step, int32_t micro_batch, v1::EnvelopeHeader::Kind kind, TensorMap tensors,
                   int32_t chunk = 0);

  // Removes and returns the bundle for the key, waiting up to `timeout`. DeadlineExceeded names what was
  // awaited; Cancelled when `cancelled()` turns true while waiting.
  absl::StatusOr<TensorMap> Take(int64_t step, int32_t micro_batch, v1::EnvelopeHeader::Kind kind,
                                 absl::Duration timeout, const std::function<bool()>& cancelled,
                                 const std::string& from, int32_t chunk = 0);

  // Drops every bundle of steps before `step` (leftovers of an aborted step).
  void DropBefore(int64_t step);
  // Drops every bundle of exactly `step` (a forward-only pass's leftovers: passes use keys below 0).
  void DropStep(int64_t step);
  // Drops every bundle of steps outside [first, last] (a far-future push before the first step).
  void DropOutside(int64_t first, int64_t last);
  void Clear();
  size_t size() const;
  uint64_t bytes() const;
  // Bytes a new bundle may still take (0 when full).
  uint64_t free_bytes() const;
  uint64_t budget() const { return budget_; }

 private:
  using Key = std::tuple<int64_t, int32_t, int, int32_t>;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // a bundle arrived
  std::map<Key, TensorMap> items_ ABSL_GUARDED_BY(mu_);
  const uint64_t budget_;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // payload bytes in items_
};

// Payload bytes of a bundle.
uint64_t BundleBytes(const TensorMap& tensors);

}  // namespace baton

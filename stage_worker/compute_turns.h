// The turns a stage worker's pipelines (StageTenants) take on its compute: one forward or backward at a time. A
// waiting backward goes before a waiting forward -- it completes a micro-batch, frees its activations and unblocks
// the stage upstream, as 1F1B orders one pipeline's work -- and among equals the longest waiting goes first.
// Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#include <cstdint>
#include <set>
#include <utility>

namespace baton {

class ComputeTurns {
 public:
  enum class Kind { kBackward = 0, kForward = 1 };

  // Holds the compute from Take until destroyed.
  class Turn {
   public:
    Turn(Turn&& other) noexcept : turns_(std::exchange(other.turns_, nullptr)) {}
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() {
      if (turns_) turns_->Release();
    }

   private:
    friend class ComputeTurns;
    explicit Turn(ComputeTurns* turns) : turns_(turns) {}
    ComputeTurns* turns_;
  };

  // Waits for the compute (`kind` decides who goes first among the waiting).
  Turn Take(Kind kind) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::pair<int, uint64_t>> waiting_ ABSL_GUARDED_BY(mu_);  // (kind, ticket): the first goes next
};

}  // namespace baton

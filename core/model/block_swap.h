// Block swap inside a stage (job key offload: blocks): the frozen weights of some blocks live in host memory
// (page-locked on CUDA) and are copied in just before each use, the next block in the direction of travel started
// right after it (forward: up the blocks; the recompute of the backward: down), host to device only: frozen weights
// never go back, a used block's device copy is simply dropped. At most two swapped blocks are resident at once.
#pragma once

#include <ATen/ATen.h>
#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/device/transfer.h"

namespace baton {

class StageModel;

class BlockSwap {
 public:
  // Takes the frozen tensors of `blocks` (every parameter and buffer that is no LoRA adapter's) into host memory and
  // releases them on their device. `transfer` copies them in on CUDA (its upload side stream); on the CPU each use is
  // a real copy of the host master (clone), so a swapped run computes on copies exactly as a GPU run does.
  // The stage that owns the blocks owns this too: the blocks' device tensors stay empty between uses.
  BlockSwap(std::vector<torch::nn::Module*> blocks, std::shared_ptr<DeviceTransfer> transfer);
  BlockSwap(const BlockSwap&) = delete;
  BlockSwap& operator=(const BlockSwap&) = delete;

  // Block `b` is about to run: it is made resident (waiting for its prefetch, or copied now) and every other
  // resident block but the one prefetched is dropped. The callers run one piece at a time (a stage's compute turn).
  void Enter(size_t b);
  // Block `b` has run (its kernels queued): the next block in the direction of travel starts copying in.
  void Leave(size_t b);

  size_t blocks() const { return blocks_; }
  int64_t host_bytes() const { return host_bytes_; }  // the swapped blocks' frozen weights in host memory
  int resident() const;                               // swapped blocks resident now
  int peak_resident() const;                          // the most at once since construction

  // `piece` with block `b`'s weights resident while it runs.
  template <typename A>
  std::function<A(const A&)> Wrap(size_t b, std::function<A(const A&)> piece) {
    return [this, b, piece = std::move(piece)](const A& in) {
      Enter(b);
      A out = piece(in);
      Leave(b);
      return out;
    };
  }

 private:
  struct Unit {
    std::vector<at::Tensor> device;  // the module's tensors: storage swapped in and out with set_data
    std::vector<at::Tensor> host;    // their masters in host memory
    bool resident = false;
  };
  void CopyIn(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<DeviceTransfer> transfer_;  // null: CPU copies
  size_t blocks_ = 0;
  int64_t host_bytes_ = 0;
  mutable absl::Mutex mu_;
  std::vector<Unit> units_ ABSL_GUARDED_BY(mu_);
  int64_t last_entered_ ABSL_GUARDED_BY(mu_) = -1;  // and the block entered before it: the direction of travel
  int64_t entered_before_ ABSL_GUARDED_BY(mu_) = -1;
  int resident_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_resident_ ABSL_GUARDED_BY(mu_) = 0;
};

// `piece`, under `swap` when block `b` is one of its swapped blocks (null swap: `piece` itself).
template <typename A>
std::function<A(const A&)> SwappedPiece(const std::shared_ptr<BlockSwap>& swap, size_t b,
                                        std::function<A(const A&)> piece) {
  return swap != nullptr && b < swap->blocks() ? swap->Wrap(b, std::move(piece)) : piece;
}

// A stage's checks (throw, as a forward does): with `swap` (null: none) the first swap->blocks() of its `blocks` blocks
// must be recomputed, and a forward may not record a graph through them (their weights are gone once they ran).
void CheckSwappedBlocksRecomputed(const BlockSwap* swap, int64_t recompute_blocks, int64_t blocks);
void CheckNoGraphThroughSwappedBlocks(const BlockSwap* swap);

// Swaps the first `blocks` blocks of `stage`'s range (0: none). They must be recomputed: the stage refuses a
// checkpointed forward with fewer recompute_blocks, and a forward with a graph. Call once, after the weights loaded.
// Returns the swap (null for 0 blocks), which the stage keeps too: its figures are the caller's to report.
absl::StatusOr<std::shared_ptr<const BlockSwap>> SwapFirstBlocks(StageModel& stage, int64_t blocks,
                                                                 std::shared_ptr<DeviceTransfer> transfer);

}  // namespace baton

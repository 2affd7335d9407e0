// Turns the cache into each step's micro-batches, deterministically from (seed, step): which samples, which
// timesteps, which noise. The single-process trainer and the coordinator both call this, which is what lets
// an N-stage pipeline reproduce the single-process LoRA.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <vector>

#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/train/job.h"

namespace baton {

struct MicroBatch {
  int64_t step = 0;
  int64_t index = 0;             // micro-batch index within the step
  std::vector<int64_t> samples;  // cache record indices
  int64_t grid_h = 0, grid_w = 0;
  // The model's inputs by the upstream forward's argument names (ModelFamily::MicroBatchInputs), built from
  // x_t = (1-t)·x0 + t·ε, the prompt embeddings and t in (0, 1] (core/train/timesteps.h). FLUX.2: hidden_states
  // [b, Si, C], encoder_hidden_states [b, St, J], timestep [b], guidance [b] (with a guidance embedder), img_ids,
  // txt_ids.
  TensorMap model_inputs;
  at::Tensor target;          // ε − x0, the cached latents' shape with the batch first (FLUX.2: [b, Si, C])
  at::Tensor loss_mask;       // ModelFamily::LossMask: the target elements the loss covers; undefined = all
  uint64_t dropout_seed = 0;  // LoRA dropout masks for this micro-batch
};

// What the model checks of a cache (ModelFamily::CheckCacheFits).
CacheContents CacheContentsOf(const CacheIndex& index);

// LoRA dropout seed of micro-batch `index` of `step`: the same on every stage and in train-local.
uint64_t DropoutBaseSeed(uint64_t job_seed);
uint64_t MicroBatchDropoutSeed(uint64_t base, int64_t step, int64_t index);

// The records a validation holds out of training (job.validation.held_out() of them): the first `count` in the order
// of a hash of their ids, so the choice is deterministic, spread over the buckets, and stays the same when records are
// added to the cache (a new record is held out only if it sorts before a held-out one). Sorted by index.
// InvalidArgument when `count` leaves nothing to train on.
absl::StatusOr<std::vector<int64_t>> HeldOutRecords(const CacheIndex& index, int64_t count);

// Sampling: each epoch, the samples of every bucket (same token grid and text length) are shuffled and cut
// into micro-batches of micro_batch_size (a bucket's remainder is dropped for that epoch), then the list of
// micro-batches is shuffled. Step s takes micro-batches [s·m, (s+1)·m) of the endless epoch sequence, so a
// step can mix buckets (different sequence lengths) and resuming needs only the step number.
class StepSampler {
 public:
  // Fails when no bucket holds at least one micro-batch worth of samples. Records held out for validation
  // (HeldOutRecords) are never drawn.
  // `family` shapes each micro-batch's model inputs; it must outlive the sampler.
  static absl::StatusOr<StepSampler> Create(const CacheReader* cache, const JobConfig& job, const ModelFamily* family);
  // All micro-batches of `step`, inputs on CPU in fp32.
  absl::StatusOr<std::vector<MicroBatch>> Step(int64_t step) const;
  int64_t micro_batches_per_epoch() const { return per_epoch_; }

 private:
  // The record indices of global micro-batch g.
  std::vector<int64_t> MicroBatchSamples(int64_t g) const;

  const CacheReader* cache_ = nullptr;
  JobConfig job_;
  const ModelFamily* family_ = nullptr;
  std::vector<std::vector<int64_t>> buckets_;  // record indices per bucket, in index order
  int64_t per_epoch_ = 0;
};

}  // namespace baton

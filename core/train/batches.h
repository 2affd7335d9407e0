// Turns the cache into each step's micro-batches, deterministically from (seed, step): which samples, which
// timesteps, which noise. The single-process trainer and the coordinator both call this, which is what lets
// an N-stage pipeline reproduce the single-process LoRA.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/train/data_order.h"
#include "core/train/job.h"

namespace baton {

struct MicroBatch {
  int64_t step = 0;
  int64_t index = 0;                      // micro-batch index within the step
  std::vector<int64_t> samples;           // cache record indices
  std::vector<int64_t> dropped_captions;  // those of `samples` that trained on the empty caption
  int64_t grid_h = 0, grid_w = 0;
  // The model's inputs by the upstream forward's argument names (ModelFamily::MicroBatchInputs), built from
  // x_t = (1-t)·x0 + t·ε, the prompt embeddings and t in (0, 1] (core/train/timesteps.h). FLUX.2: hidden_states
  // [b, Si, C], encoder_hidden_states [b, St, J], timestep [b], guidance [b] (with a guidance embedder), img_ids,
  // txt_ids.
  TensorMap model_inputs;
  at::Tensor target;          // ε − x0, the cached latents' shape with the batch first (FLUX.2: [b, Si, C])
  at::Tensor loss_mask;       // ModelFamily::LossMask: the target elements the loss covers; undefined = all
  at::Tensor loss_weighting;  // [b]: each sample's loss weight by its sigma (the job's loss.weighting); undefined = 1
  uint64_t dropout_seed = 0;  // LoRA dropout masks for this micro-batch
};

// What the model checks of a cache (ModelFamily::CheckCacheFits).
CacheContents CacheContentsOf(const CacheIndex& index);

// The job's caches (JobConfig::Sources) opened as one (CacheReader::OpenAll), checked against the model
// (ModelFamily::CheckCacheFits); errors name the folders.
absl::StatusOr<std::unique_ptr<CacheReader>> OpenTrainingCache(const JobConfig& job, const ModelFamily& family);

// LoRA dropout seed of micro-batch `index` of `step`: the same on every stage and in train-local.
uint64_t DropoutBaseSeed(uint64_t job_seed);
uint64_t MicroBatchDropoutSeed(uint64_t base, int64_t step, int64_t index);

// The records a validation holds out of training: those of the first `count` (job.validation.held_out()) images in the
// order of a hash of their names (CacheRecordInfo::SampleName: one record each, or one per resolution), so the choice
// is deterministic, spread over the buckets, and stays the same when records are added to the cache (a new image is
// held out only if it sorts before a held-out one). Sorted by index. InvalidArgument when `count` leaves nothing to
// train on. Of several datasets (a CacheReader over `datasets:`), an image is its folder's: a.png in two folders is
// two images (the first folder's keep the one-folder order).
absl::StatusOr<std::vector<int64_t>> HeldOutRecords(const CacheIndex& index, int64_t count);
absl::StatusOr<std::vector<int64_t>> HeldOutRecords(const CacheReader& cache, int64_t count);

// Sampling: step s takes micro-batches [s·m, (s+1)·m) of the endless sequence core/train/data_order.h gives (epochs
// of shuffled, bucketed micro-batches over the job's datasets, with their repeats or weights), so a step can mix
// buckets (different sequence lengths) and resuming needs only the step number. A record whose caption the order
// drops trains on its cache's empty-caption embedding instead (caption dropout).
class StepSampler {
 public:
  // Fails when no bucket holds at least one micro-batch worth of samples, or when a dataset that drops captions has
  // no empty-caption embedding (or one of another text length than its records). Records held out for validation
  // (HeldOutRecords) are never drawn.
  // `family` shapes each micro-batch's model inputs; it must outlive the sampler.
  static absl::StatusOr<StepSampler> Create(const CacheReader* cache, const JobConfig& job, const ModelFamily* family);
  // All micro-batches of `step`, inputs on CPU in fp32.
  absl::StatusOr<std::vector<MicroBatch>> Step(int64_t step) const;
  int64_t micro_batches_per_epoch() const { return order_->per_epoch(); }

 private:
  const CacheReader* cache_ = nullptr;
  JobConfig job_;
  const ModelFamily* family_ = nullptr;
  std::shared_ptr<const DataOrder> order_;
  std::vector<at::Tensor> empty_prompts_;  // per dataset; undefined where it drops no caption
};

}  // namespace baton

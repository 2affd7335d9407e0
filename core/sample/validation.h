// The validation loss: held-out cache records evaluated forward only, at fixed timesteps with fixed noise, with the
// current adapters (through any Denoiser: this process or the stage workers). The same records, noise and timesteps
// every time, so the figures of two steps differ only by what the LoRA learned.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <vector>

#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/sample/denoiser.h"
#include "core/train/job.h"

namespace baton {

// Every (record, timestep) evaluation, prepared once: a micro-batch of one sample each.
struct ValidationSet {
  std::vector<double> timesteps;       // job.validation.timesteps
  std::vector<NoisyBatch> inputs;      // [record · T + timestep index]
  std::vector<at::Tensor> targets;     // ε − x0, the cached latents' shape with a batch of 1
  std::vector<at::Tensor> loss_masks;  // ModelFamily::LossMask of each input (undefined: the whole target)
  int64_t records = 0;
};

// The records: job.validation.dataset's first `samples` (0: all), or the records HeldOutRecords sets aside from the
// training cache. One noise ε per record, drawn from the job seed and the record's position, shared by its timesteps.
absl::StatusOr<ValidationSet> BuildValidationSet(const JobConfig& job, const ModelFamily& family,
                                                 const CacheReader& training_cache);

struct ValidationResult {
  std::vector<double> timesteps;
  std::vector<double> losses;  // mean flow-matching loss over the records, per timestep
  double mean = 0;             // over the timesteps
  double seconds = 0;
};

// Runs the set through `denoiser`, `micro_batches` evaluations per call (the stages' configured count).
absl::StatusOr<ValidationResult> RunValidation(const Denoiser& denoiser, const ValidationSet& set, int micro_batches);

}  // namespace baton

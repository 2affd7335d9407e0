#include "core/sample/validation.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <chrono>

#include "core/tensor/shape.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Which records of which cache: a separate validation cache, or the training cache's held-out records.
absl::StatusOr<std::vector<CacheSample>> ValidationRecords(const JobConfig& job, const ModelFamily& family,
                                                           const CacheReader& training_cache) {
  const ValidationConfig& v = job.validation;
  std::unique_ptr<CacheReader> own;
  const CacheReader* cache = &training_cache;
  std::vector<int64_t> picked;
  if (!v.dataset.empty()) {
    ASSIGN_OR_RETURN(own, CacheReader::Open(v.dataset));
    RETURN_IF_ERROR(Annotate(family.CheckCacheFits(CacheContentsOf(own->index())),
                             absl::StrCat("validation dataset ", v.dataset, " does not fit the model")));
    if (own->index().conditioning != training_cache.index().conditioning) {
      return absl::InvalidArgumentError(absl::StrCat("validation dataset ", v.dataset, " has conditioning '",
                                                     own->index().conditioning, "', the training cache '",
                                                     training_cache.index().conditioning, "'"));
    }
    cache = own.get();
    const int64_t n = static_cast<int64_t>(own->size());
    for (int64_t i = 0; i < (v.samples > 0 ? std::min(v.samples, n) : n); ++i) picked.push_back(i);
  } else {
    ASSIGN_OR_RETURN(picked, HeldOutRecords(training_cache, v.held_out()));
  }
  if (picked.empty()) return absl::InvalidArgumentError("validation: the validation dataset has no records");
  std::vector<CacheSample> out;
  for (int64_t i : picked) {
    ASSIGN_OR_RETURN(CacheSample s, cache->Load(static_cast<size_t>(i)));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

absl::StatusOr<ValidationSet> BuildValidationSet(const JobConfig& job, const ModelFamily& family,
                                                 const CacheReader& training_cache) {
  ASSIGN_OR_RETURN(std::vector<CacheSample> records, ValidationRecords(job, family, training_cache));
  ValidationSet set;
  set.timesteps = job.validation.timesteps;
  set.records = static_cast<int64_t>(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    const CacheSample& s = records[r];
    at::Tensor x0 = s.latents.unsqueeze(0);
    auto gen = at::detail::createCPUGenerator(MixSeed(MixSeed(job.seed, 0x7a11d), r));
    at::Tensor noise = at::randn(x0.sizes(), gen, at::kFloat);
    for (double t : set.timesteps) {
      NoisyBatch b;
      b.noisy = (1 - t) * x0 + t * noise;
      b.prompt_embeds = s.prompt_embeds.unsqueeze(0);
      b.conditioning = training_cache.index().conditioning;
      if (s.condition.defined()) b.condition = s.condition.unsqueeze(0);
      if (s.image_embeds.defined()) b.image_embeds = s.image_embeds.unsqueeze(0);
      b.timestep = at::full({1}, t, at::kFloat);
      b.grid_h = s.grid_h;
      b.grid_w = s.grid_w;
      b.guidance = job.guidance;
      if (s.loss_mask.defined()) b.loss_weights = s.loss_mask.unsqueeze(0);  // the loss the training step takes
      if (s.references.defined()) {
        b.references = s.references.reshape({1, -1, s.references.size(2)});
        b.reference_grids.assign(static_cast<size_t>(s.references.size(0)), {s.grid_h, s.grid_w});
      }
      set.loss_masks.push_back(family.LossMask(b));
      set.inputs.push_back(std::move(b));
      set.targets.push_back(noise - x0);
    }
  }
  return set;
}

absl::StatusOr<ValidationResult> RunValidation(const Denoiser& denoiser, const ValidationSet& set, int micro_batches) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = set.inputs.size(), per_call = static_cast<size_t>(std::max(micro_batches, 1));
  const size_t nt = set.timesteps.size();
  ValidationResult result;
  result.timesteps = set.timesteps;
  result.losses.assign(nt, 0.0);
  for (size_t begin = 0; begin < n; begin += per_call) {
    const size_t end = std::min(n, begin + per_call);
    std::vector<NoisyBatch> call(set.inputs.begin() + begin, set.inputs.begin() + end);
    ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, denoiser(call));
    if (outputs.size() != call.size()) {
      return absl::InternalError(absl::StrCat("validation: ", outputs.size(), " outputs for ", call.size(), " inputs"));
    }
    for (size_t i = begin; i < end; ++i) {
      const at::Tensor& out = outputs[i - begin];
      if (!out.sizes().equals(set.targets[i].sizes())) {
        return absl::InternalError(absl::StrCat("validation: the model output ", ShapeString(out.sizes()),
                                                " does not match the target ", ShapeString(set.targets[i].sizes())));
      }
      result.losses[i % nt] +=
          FlowMatchingLoss(out.to(set.targets[i].device(), at::kFloat), set.targets[i], set.loss_masks[i])
              .item<double>();
    }
  }
  for (double& l : result.losses) l /= static_cast<double>(set.records);
  for (double l : result.losses) result.mean += l / static_cast<double>(nt);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace baton

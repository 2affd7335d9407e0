#include "core/train/batches.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <functional>
#include <map>

#include "core/train/common.h"
#include "core/train/timesteps.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
CacheContents CacheContentsOf(const CacheIndex& index) {
  return {index.latent_channels, index.text_dim, index.conditioning, index.condition_channels, index.image_dim};
}

absl::StatusOr<std::unique_ptr<CacheReader>> OpenTrainingCache(const JobConfig& job, const ModelFamily& family) {
  const std::vector<std::string> dirs = job.SourcePaths();
  ASSIGN_OR_RETURN(std::unique_ptr<CacheReader> cache, CacheReader::OpenAll(dirs, job.SourceResolutions()));
  RETURN_IF_ERROR(Annotate(family.CheckCacheFits(CacheContentsOf(cache->index())),
                           absl::StrCat("cache ", absl::StrJoin(dirs, ", "), " does not fit the model")));
  return cache;
}

uint64_t DropoutBaseSeed(uint64_t job_seed) { return MixSeed(job_seed, 0xd509); }

uint64_t MicroBatchDropoutSeed(uint64_t base, int64_t step, int64_t index) {
  return MixSeed(base, MixSeed(static_cast<uint64_t>(step), static_cast<uint64_t>(index)));
}

namespace {

// HeldOutRecords with record i in folder source(i).
absl::StatusOr<std::vector<int64_t>> HeldOutBySource(const CacheIndex& index, int64_t count,
                                                     const std::function<int(size_t)>& source) {
  if (count <= 0) return std::vector<int64_t>{};
  // By image, not by record: an image cached at several resolutions is held out at all of them or at none.
  std::map<std::string, std::vector<int64_t>> by_name;
  for (size_t i = 0; i < index.records.size(); ++i) {
    const int k = source(i);
    const std::string name = index.records[i].SampleName();
    by_name[k == 0 ? name : absl::StrCat(k, "|", name)].push_back(static_cast<int64_t>(i));
  }
  const int64_t n = static_cast<int64_t>(by_name.size());
  if (count >= n) {
    return absl::InvalidArgumentError(absl::StrCat("validation.samples ", count, " would hold out every image of the ",
                                                   n, "-image cache: nothing would be left to train on"));
  }
  std::vector<std::pair<uint64_t, const std::vector<int64_t>*>> order;
  for (const auto& [name, records] : by_name) order.emplace_back(HashName(absl::StrCat("validation|", name)), &records);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->front() < b.second->front();
  });
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.insert(out.end(), order[i].second->begin(), order[i].second->end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> HeldOutRecords(const CacheIndex& index, int64_t count) {
  return HeldOutBySource(index, count, [](size_t) { return 0; });
}

absl::StatusOr<std::vector<int64_t>> HeldOutRecords(const CacheReader& cache, int64_t count) {
  return HeldOutBySource(cache.index(), count, [&cache](size_t i) { return cache.source(i); });
}

absl::StatusOr<StepSampler> StepSampler::Create(const CacheReader* cache, const JobConfig& job,
                                                const ModelFamily* family) {
  StepSampler s;
  s.cache_ = cache;
  s.job_ = job;
  s.family_ = family;
  ASSIGN_OR_RETURN(std::vector<int64_t> held_out, HeldOutRecords(*cache, job.validation.held_out()));
  ASSIGN_OR_RETURN(s.order_, DataOrder::Create(*cache, job, held_out));
  const std::vector<DatasetSource> sources = job.Sources();
  s.empty_prompts_.resize(sources.size());
  for (size_t k = 0; k < sources.size(); ++k) {
    if (job.CaptionDropout(sources[k]) <= 0) continue;
    ASSIGN_OR_RETURN(s.empty_prompts_[k], cache->EmptyPrompt(static_cast<int>(k)));
  }
  for (size_t i = 0; i < cache->size(); ++i) {
    const at::Tensor& empty = s.empty_prompts_[static_cast<size_t>(cache->source(i))];
    const CacheRecordInfo& r = cache->index().records[i];
    if (empty.defined() && empty.size(0) != r.text_len) {
      return absl::FailedPreconditionError(
          absl::StrCat("cache ", cache->dirs()[cache->source(i)], ": record ", r.id, " has ", r.text_len,
                       " text tokens and the empty caption ", empty.size(0),
                       ": caption dropout swaps one for the other, so both "
                       "need the encoder's max_sequence_length; rerun encoder_worker on the cache"));
    }
  }
  return s;
}

absl::StatusOr<std::vector<MicroBatch>> StepSampler::Step(int64_t step) const {
  std::vector<MicroBatch> out;
  for (int64_t i = 0; i < job_.micro_batches; ++i) {
    MicroBatch mb;
    mb.step = step;
    mb.index = i;
    mb.samples = order_->MicroBatch(step * job_.micro_batches + i);
    std::vector<at::Tensor> x0s, texts, conditions, images, masks, references;
    bool masked = false;
    for (int64_t idx : mb.samples) {
      ASSIGN_OR_RETURN(CacheSample s, cache_->Load(idx));
      mb.grid_h = s.grid_h;
      mb.grid_w = s.grid_w;
      x0s.push_back(s.latents);
      const bool dropped = order_->DropsCaption(step, idx);
      if (dropped) mb.dropped_captions.push_back(idx);
      texts.push_back(dropped ? empty_prompts_[static_cast<size_t>(cache_->source(idx))] : s.prompt_embeds);
      if (s.condition.defined()) conditions.push_back(s.condition);
      if (s.image_embeds.defined()) images.push_back(s.image_embeds);
      masked = masked || s.loss_mask.defined();
      masks.push_back(s.loss_mask.defined() ? s.loss_mask : at::ones({s.grid_h, s.grid_w}, at::kFloat));
      // A bucket's records carry the same number of references (CacheRecordInfo::BucketKey), each of their grid.
      if (s.references.defined()) references.push_back(s.references.reshape({-1, s.references.size(2)}));
    }
    at::Tensor x0 = at::stack(x0s);  // [b, <one cached sample's latents>]
    const int64_t b = x0.size(0), tokens = family_->LatentTokens(x0s[0].sizes());
    auto gen = at::detail::createCPUGenerator(MixSeed(MixSeed(job_.seed, step), i));
    at::Tensor t = SampleTimesteps(job_.timesteps, b, tokens, gen);
    at::Tensor noise = at::randn(x0.sizes(), gen, at::kFloat);
    std::vector<int64_t> per_sample(x0.dim(), 1);  // t broadcast over each sample, whatever the latents' rank
    per_sample[0] = b;
    at::Tensor tb = t.view(per_sample);
    NoisyBatch batch;
    batch.noisy = (1 - tb) * x0 + tb * noise;
    batch.prompt_embeds = at::stack(texts);
    batch.conditioning = cache_->index().conditioning;
    if (!conditions.empty()) batch.condition = at::stack(conditions);
    if (!images.empty()) batch.image_embeds = at::stack(images);
    batch.timestep = t;
    batch.grid_h = mb.grid_h;
    batch.grid_w = mb.grid_w;
    batch.guidance = job_.guidance;
    if (masked) batch.loss_weights = at::stack(masks);
    if (!references.empty()) {
      batch.references = at::stack(references);
      const int64_t n = cache_->index().records[static_cast<size_t>(mb.samples[0])].references;
      batch.reference_grids.assign(static_cast<size_t>(n), {mb.grid_h, mb.grid_w});
    }
    mb.target = noise - x0;
    ASSIGN_OR_RETURN(mb.model_inputs, family_->MicroBatchInputs(batch));
    mb.loss_mask = family_->LossMask(batch);
    mb.loss_weighting = LossWeighting(job_.loss_weighting, t);
    mb.dropout_seed = MicroBatchDropoutSeed(DropoutBaseSeed(job_.seed), step, i);
    out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace baton

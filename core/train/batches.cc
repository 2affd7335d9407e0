#include "core/train/batches.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <map>

#include "core/train/timesteps.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Deterministic Fisher–Yates with a generator, so the order is the same on every platform.
void Shuffle(std::vector<int64_t>& v, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) {
    int64_t j = at::randint(i + 1, {1}, gen, at::kLong).item<int64_t>();
    std::swap(v[i], v[j]);
  }
}

}  // namespace

CacheContents CacheContentsOf(const CacheIndex& index) {
  return {index.latent_channels, index.text_dim, index.conditioning, index.condition_channels, index.image_dim};
}

uint64_t DropoutBaseSeed(uint64_t job_seed) { return MixSeed(job_seed, 0xd509); }

uint64_t MicroBatchDropoutSeed(uint64_t base, int64_t step, int64_t index) {
  return MixSeed(base, MixSeed(static_cast<uint64_t>(step), static_cast<uint64_t>(index)));
}

absl::StatusOr<std::vector<int64_t>> HeldOutRecords(const CacheIndex& index, int64_t count) {
  const int64_t n = static_cast<int64_t>(index.records.size());
  if (count <= 0) return std::vector<int64_t>{};
  if (count >= n) {
    return absl::InvalidArgumentError(absl::StrCat("validation.samples ", count, " would hold out every record of the ",
                                                   n, "-record cache: nothing would be left to train on"));
  }
  std::vector<std::pair<uint64_t, int64_t>> order;
  for (int64_t i = 0; i < n; ++i) order.emplace_back(HashName(absl::StrCat("validation|", index.records[i].id)), i);
  std::sort(order.begin(), order.end());
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(order[i].second);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<StepSampler> StepSampler::Create(const CacheReader* cache, const JobConfig& job,
                                                const ModelFamily* family) {
  StepSampler s;
  s.cache_ = cache;
  s.job_ = job;
  s.family_ = family;
  ASSIGN_OR_RETURN(std::vector<int64_t> held_out, HeldOutRecords(cache->index(), job.validation.held_out()));
  std::map<std::string, std::vector<int64_t>> by_key;
  for (size_t i = 0; i < cache->size(); ++i) {
    if (std::binary_search(held_out.begin(), held_out.end(), static_cast<int64_t>(i))) continue;
    by_key[cache->index().records[i].BucketKey()].push_back(i);
  }
  const int64_t b = job.micro_batch_size();
  for (auto& [key, members] : by_key) {
    s.per_epoch_ += static_cast<int64_t>(members.size()) / b;
    s.buckets_.push_back(members);
  }
  if (s.per_epoch_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no bucket of the cache holds ", b, " samples (batch_size / micro_batches); the cache has ",
                     cache->size(), " samples in ", s.buckets_.size(), " buckets",
                     held_out.empty() ? "" : absl::StrCat(", ", held_out.size(), " of them held out for validation")));
  }
  return s;
}

std::vector<int64_t> StepSampler::MicroBatchSamples(int64_t g) const {
  const int64_t epoch = g / per_epoch_, pos = g % per_epoch_;
  const int64_t b = job_.micro_batch_size();
  std::vector<std::vector<int64_t>> chunks;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    std::vector<int64_t> members = buckets_[k];
    Shuffle(members, MixSeed(MixSeed(job_.seed, 0x5eed), MixSeed(epoch, k)));
    for (size_t i = 0; i + b <= members.size(); i += b)
      chunks.emplace_back(members.begin() + i, members.begin() + i + b);
  }
  std::vector<int64_t> order(chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  Shuffle(order, MixSeed(MixSeed(job_.seed, 0x0dde), epoch));
  return chunks[order[pos]];
}

absl::StatusOr<std::vector<MicroBatch>> StepSampler::Step(int64_t step) const {
  std::vector<MicroBatch> out;
  for (int64_t i = 0; i < job_.micro_batches; ++i) {
    MicroBatch mb;
    mb.step = step;
    mb.index = i;
    mb.samples = MicroBatchSamples(step * job_.micro_batches + i);
    std::vector<at::Tensor> x0s, texts, conditions, images;
    for (int64_t idx : mb.samples) {
      ASSIGN_OR_RETURN(CacheSample s, cache_->Load(idx));
      mb.grid_h = s.grid_h;
      mb.grid_w = s.grid_w;
      x0s.push_back(s.latents);
      texts.push_back(s.prompt_embeds);
      if (s.condition.defined()) conditions.push_back(s.condition);
      if (s.image_embeds.defined()) images.push_back(s.image_embeds);
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
    mb.target = noise - x0;
    ASSIGN_OR_RETURN(mb.model_inputs, family_->MicroBatchInputs(batch));
    mb.loss_mask = family_->LossMask(batch);
    mb.dropout_seed = MicroBatchDropoutSeed(DropoutBaseSeed(job_.seed), step, i);
    out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace baton

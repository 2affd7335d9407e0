#include "core/train/data_order.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <map>

#include "core/util/seed.h"

namespace baton {
namespace {

// Deterministic Fisher–Yates with a generator, so the order is the same on every platform.
void ShuffleIndices(std::vector<int64_t>& v, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) {
    int64_t j = at::randint(i + 1, {1}, gen, at::kLong).item<int64_t>();
    std::swap(v[i], v[j]);
  }
}

// A uniform double in [0, 1) from 64 mixed bits.
double Uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

std::vector<std::vector<int64_t>> DataOrder::Pool::Epoch(int64_t epoch, int64_t micro_batch_size) const {
  const size_t b = static_cast<size_t>(micro_batch_size);
  std::vector<std::vector<int64_t>> chunks;
  for (size_t k = 0; k < buckets.size(); ++k) {
    std::vector<int64_t> members = buckets[k];
    ShuffleIndices(members, MixSeed(MixSeed(seed, 0x5eed), MixSeed(epoch, k)));
    for (size_t i = 0; i + b <= members.size(); i += b)
      chunks.emplace_back(members.begin() + i, members.begin() + i + b);
  }
  std::vector<int64_t> order(chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  ShuffleIndices(order, MixSeed(MixSeed(seed, 0x0dde), epoch));
  std::vector<std::vector<int64_t>> out;
  for (int64_t i : order) out.push_back(std::move(chunks[static_cast<size_t>(i)]));
  return out;
}

std::vector<int64_t> DataOrder::Take(size_t p, int64_t n) const {
  const Pool& pool = pools_[p];
  const int64_t epoch = n / pool.per_epoch, pos = n % pool.per_epoch;
  std::lock_guard<std::mutex> lock(epoch_mu_);
  auto& [cached, batches] = epochs_[p];
  if (cached != epoch) {
    batches = pool.Epoch(epoch, micro_batch_size_);
    cached = epoch;
  }
  return batches[static_cast<size_t>(pos)];
}

absl::StatusOr<std::unique_ptr<DataOrder>> DataOrder::Create(const CacheReader& cache, const JobConfig& job,
                                                             const std::vector<int64_t>& held_out) {
  std::unique_ptr<DataOrder> order(new DataOrder());
  order->micro_batch_size_ = job.micro_batch_size();
  order->seed_ = job.seed;
  const std::vector<DatasetSource> sources = job.Sources();
  if (cache.dirs().size() != sources.size()) {
    return absl::InternalError(
        absl::StrCat("the cache reads ", cache.dirs().size(), " folders, the job lists ", sources.size()));
  }
  const bool weighted = sources.front().weight > 0;
  std::vector<std::map<std::string, std::vector<int64_t>>> by_key(weighted ? sources.size() : 1);
  for (size_t i = 0; i < cache.size(); ++i) {
    const int k = cache.source(i);
    order->source_.push_back(k);
    order->record_key_.push_back(HashName(absl::StrCat(k, "/", cache.index().records[i].id)));
    if (std::binary_search(held_out.begin(), held_out.end(), static_cast<int64_t>(i))) continue;
    auto& members = by_key[weighted ? k : 0][cache.index().records[i].BucketKey()];
    for (int64_t r = 0; r < sources[k].repeats; ++r) members.push_back(static_cast<int64_t>(i));
  }
  double total_weight = 0;
  for (const DatasetSource& d : sources) {
    total_weight += d.weight;
    order->dropout_.push_back(job.CaptionDropout(d));
  }
  for (size_t p = 0; p < by_key.size(); ++p) {
    Pool pool;
    pool.name = weighted ? absl::StrCat("dataset ", sources[p].path)
                         : (sources.size() == 1 ? absl::StrCat("the cache") : std::string("the datasets"));
    // One pool keeps the seed the order always had; each weighted pool orders itself with a seed of its own.
    pool.seed = weighted ? MixSeed(job.seed, MixSeed(0xda7a, p)) : job.seed;
    int64_t records = 0;
    for (auto& [key, members] : by_key[p]) {
      pool.per_epoch += static_cast<int64_t>(members.size()) / order->micro_batch_size_;
      records += static_cast<int64_t>(members.size());
      pool.buckets.push_back(members);
    }
    if (pool.per_epoch == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no bucket of ", pool.name, " holds ", order->micro_batch_size_,
          " samples (batch_size / micro_batches); it has ", records, " samples to train in ", pool.buckets.size(),
          " buckets", held_out.empty() ? "" : absl::StrCat(", ", held_out.size(), " held out for validation")));
    }
    order->per_epoch_ += pool.per_epoch;
    if (weighted) order->cumulative_.push_back(total_weight > 0 ? sources[p].weight / total_weight : 0);
    order->pools_.push_back(std::move(pool));
  }
  for (size_t p = 1; p < order->cumulative_.size(); ++p) order->cumulative_[p] += order->cumulative_[p - 1];
  order->epochs_.assign(order->pools_.size(), {-1, {}});
  return order;
}

size_t DataOrder::PoolOfDraw(int64_t g) const {
  const double u = Uniform(MixSeed(MixSeed(seed_, 0x5a3e), static_cast<uint64_t>(g)));
  for (size_t p = 0; p + 1 < cumulative_.size(); ++p) {
    if (u < cumulative_[p]) return p;
  }
  return cumulative_.size() - 1;
}

std::pair<size_t, int64_t> DataOrder::Draw(int64_t g) const {
  const int64_t snapshot = g / kCountStride;
  std::vector<int64_t> counts;
  {
    std::lock_guard<std::mutex> lock(counts_mu_);
    if (counts_.empty()) counts_.push_back(std::vector<int64_t>(pools_.size(), 0));
    while (static_cast<int64_t>(counts_.size()) <= snapshot) {
      std::vector<int64_t> next = counts_.back();
      const int64_t from = (static_cast<int64_t>(counts_.size()) - 1) * kCountStride;
      for (int64_t h = from; h < from + kCountStride; ++h) ++next[PoolOfDraw(h)];
      counts_.push_back(std::move(next));
    }
    counts = counts_[snapshot];
  }
  for (int64_t h = snapshot * kCountStride; h < g; ++h) ++counts[PoolOfDraw(h)];
  const size_t p = PoolOfDraw(g);
  return {p, counts[p]};
}

std::vector<int64_t> DataOrder::MicroBatch(int64_t g) const {
  if (cumulative_.empty()) return Take(0, g);
  const auto [p, n] = Draw(g);
  return Take(p, n);
}

bool DataOrder::DropsCaption(int64_t step, int64_t record) const {
  const double p = dropout_[static_cast<size_t>(source_[static_cast<size_t>(record)])];
  if (p <= 0) return false;
  const uint64_t bits =
      MixSeed(MixSeed(MixSeed(seed_, 0xc4d0), static_cast<uint64_t>(step)), record_key_[static_cast<size_t>(record)]);
  return Uniform(bits) < p;
}

}  // namespace baton

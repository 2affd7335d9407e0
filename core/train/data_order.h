// Which cache records each micro-batch trains on, over the job's datasets (JobConfig::Sources), and which of them
// train on the empty caption: a pure function of the seed and the global micro-batch number (step · micro_batches +
// index), so every stage, every replica and a resumed run see the same order and the same dropped captions.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/data/cache.h"
#include "core/train/job.h"

namespace baton {

// Repeats (the default, every entry's `repeats`, 1 unless given): the records of every dataset form one pool, each
// record `repeats` times. Each epoch the pool's records of every bucket (same token grid, frames and text length) are
// shuffled and cut into micro-batches (a bucket's remainder is dropped for that epoch), then the epoch's micro-batches
// are shuffled. One dataset with repeats 1 gives exactly the order Baton always gave.
// Weights (every entry's `weight`): each dataset is a pool of its own, ordered as above; micro-batch g is drawn from
// dataset k with probability weight_k / Σ weights (a draw from the seed and g), and takes that dataset's next
// micro-batch. Either way a micro-batch never mixes buckets.
class DataOrder {
 public:
  // `held_out`: sorted record indices never drawn (validation's). InvalidArgument naming the dataset when a pool holds
  // no micro-batch of job.micro_batch_size() records.
  static absl::StatusOr<std::unique_ptr<DataOrder>> Create(const CacheReader& cache, const JobConfig& job,
                                                           const std::vector<int64_t>& held_out);
  // The record indices of global micro-batch g (≥ 0).
  std::vector<int64_t> MicroBatch(int64_t g) const;
  // Micro-batches in one epoch of the pool (with weights: of all pools together).
  int64_t per_epoch() const { return per_epoch_; }
  // Whether record `record` (of dataset cache.source(record)) trains on the empty caption in `step`: a draw from the
  // seed, the step and the record's dataset and id, below that dataset's caption dropout.
  bool DropsCaption(int64_t step, int64_t record) const;

 private:
  // One shuffled, bucketed sequence of micro-batches, epoch after epoch.
  struct Pool {
    std::string name;                           // for messages: the dataset, or "the datasets"
    std::vector<std::vector<int64_t>> buckets;  // record indices per bucket (with repeats), in index order
    int64_t per_epoch = 0;
    uint64_t seed = 0;
    // Epoch `epoch`'s micro-batches, in order.
    std::vector<std::vector<int64_t>> Epoch(int64_t epoch, int64_t micro_batch_size) const;
  };
  // Pool p's n-th micro-batch; the epoch it falls in is kept, as a step's micro-batches share one.
  std::vector<int64_t> Take(size_t p, int64_t n) const;
  DataOrder() = default;
  // With weights: the pool micro-batch g comes from, and how many earlier ones came from it.
  std::pair<size_t, int64_t> Draw(int64_t g) const;
  size_t PoolOfDraw(int64_t g) const;

  int64_t micro_batch_size_ = 1;
  uint64_t seed_ = 0;
  std::vector<Pool> pools_;
  std::vector<double> cumulative_;  // with weights: Σ normalised weights up to each pool; empty: one pool
  int64_t per_epoch_ = 0;
  std::vector<double> dropout_;       // per dataset
  std::vector<uint64_t> record_key_;  // per record: its dataset and id, hashed (the dropout draw's input)
  std::vector<int> source_;           // per record: its dataset
  // Per-pool counts of the draws before every kCountStride-th micro-batch, extended as later ones are asked for.
  static constexpr int64_t kCountStride = 4096;
  mutable std::mutex counts_mu_;
  mutable std::vector<std::vector<int64_t>> counts_;  // GUARDED_BY(counts_mu_)
  // The last epoch each pool was asked for, and its micro-batches (an epoch reshuffles every record once).
  mutable std::mutex epoch_mu_;
  mutable std::vector<std::pair<int64_t, std::vector<std::vector<int64_t>>>> epochs_;  // GUARDED_BY(epoch_mu_)
};

}  // namespace baton

// The job's encode step (`encode:`): before training, the encoder workers (re)build the cache `dataset` from
// `images`. One worker encodes into `dataset` itself. N workers each encode their share i of N (core/data/
// cache_shard.h) into a shard cache of their own, <dataset>.shards/i-of-N, all at once, and the shards are then merged
// into `dataset` (core/data/cache_merge.h: hard links, every record checked), the cache one worker writes, byte for
// byte. Each shard keeps its records across runs, so a rerun encodes only changed samples, and after a worker died
// mid-dataset only the records it had not yet written.
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <cstdint>
#include <string>

#include "core/train/job.h"

namespace baton {

// The step's totals, summed over the workers.
struct EncodeReport {
  int64_t workers = 0;
  int64_t samples = 0;  // samples the workers found (each its share)
  int64_t encoded = 0;  // encoded this run
  int64_t kept = 0;     // unchanged records kept
  int64_t failed = 0;   // files the workers could not encode (each named in a warning)
  double seconds = 0;   // wall time of the step, the merge included
};

// The shard cache of share `index` of `count` beside the cache `dataset`: <dataset>.shards/<index>-of-<count>. It
// must lie inside each worker's --cache_root, as `dataset` does.
std::string ShardCacheDir(const std::string& dataset, int64_t index, int64_t count);

// Runs the step for job.encode (job.encode.encoder_workers; a job without encode does nothing), printing aggregated
// progress unless `quiet`. A worker that cannot be reached, refuses or dies fails the step with an error naming it
// (every worker's failure, when several fail); the others run to the end and their records are kept. Fails too when
// the workers found no sample to encode.
absl::StatusOr<EncodeReport> RunEncodeStep(const JobConfig& job, absl::Duration timeout, bool quiet);

}  // namespace baton

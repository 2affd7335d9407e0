// What a checkpoint must agree on with the job that resumes it: an ordered list of (key, value) covering
// everything that changes the trained numbers and nothing that does not (JobFingerprint lists both). Stored in
// each checkpoint (state.json extra.fingerprint); compared on resume.
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <utility>
#include <vector>

#include "core/data/cache.h"
#include "core/train/job.h"

namespace baton {

// In: data content (and the datasets' repeats, weights and caption dropout), weights content, LoRA spec and init,
// optimizer and its schedule, timesteps, guidance, seed, batch layout, dtype, quantization, wire compression. Out:
// recompute, paths, threads, devices, stages, pipeline schedule and chunks, steps, checkpoint_every, name, memory
// budgets, save_bfl, encode settings — the cache content covers those. The pipeline schedule is left out because every
// schedule accumulates gradients in micro-batch order and is bitwise equal to train-local (tests/pipeline_test.cc,
// tests/resume_test.cc); `steps` because extending a run is allowed.
using JobFingerprint = std::vector<std::pair<std::string, std::string>>;

// `weight_files`: the model's safetensors files (Flux2Checkpoint::FilePaths()). Reads only each file's header,
// its size and a few small blocks of its data (a 64 GB model costs milliseconds), plus init_lora and
// model_config in full. Paths and mtimes never enter it.
absl::StatusOr<JobFingerprint> MakeJobFingerprint(const JobConfig& job, const std::vector<std::string>& weight_files,
                                                  const CacheIndex& cache);

// Content identity of safetensors files: sha256 over each file's header, size and 16 blocks of 4 KiB spread
// over its data, in the given order; "sha256:<32 hex> (<n> files, <bytes> bytes)".
absl::StatusOr<std::string> WeightsIdentity(const std::vector<std::string>& files);

// Content identity of an encoded cache: its encoder, dimensions and every record's content hash, size, grid,
// text length and bucket, in index order (ids and file names left out).
std::string CacheIdentity(const CacheIndex& cache);

// "key: old → new" for each key whose value differs, "key: (absent) → new" / "key: old → (absent)" for keys
// in only one of them; in `now`'s order, then keys only in `was`. Empty when equal.
std::vector<std::string> FingerprintDifferences(const JobFingerprint& was, const JobFingerprint& now);

}  // namespace baton

// A training job, read from YAML. The same file drives `baton train-local` and `coordinator`. Validation
// is strict: unknown keys, wrong types and out-of-range values are errors that give the file and line.
//
//   model: out/demo/pipeline            # diffusers transformer or pipeline folder, or a BFL .safetensors
//   model_config: ""                    # config.json for a BFL single file
//   dataset: out/demo/cache             # encoded cache (core/data/cache.h)
//   lora: {rank: 8, alpha: 8, targets: attention, dropout: 0.0}
//   optimizer: {lr: 1e-3, weight_decay: 0.0, betas: [0.9, 0.999], eps: 1e-8, clip: 1.0, warmup_steps: 0}
//   timesteps: {sampling: logit_normal, logit_mean: 0.0, logit_std: 1.0, shift: auto}
//   steps: 30, batch_size: 4, micro_batches: 4, schedule: 1f1b, recompute: true, seed: 42
//   checkpoint_every: 10, dtype: fp32, devices: [cpu, cpu], guidance: 3.5, save_bfl: false, threads: 1
//   memory_per_stage: [24GB, 24GB]      # optional: the partitioner keeps every stage within its budget
//   encode: {images: data/, encoder_worker: host:5000, resolution: 1024}  # optional: build the cache first
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/lora/lora.h"

namespace baton {

struct OptimizerConfig {
  double lr = 1e-4;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double clip = 1.0;  // global grad-norm clip; 0 disables
  int64_t warmup_steps = 0;
};

struct TimestepConfig {
  std::string sampling = "logit_normal";  // logit_normal | uniform
  double logit_mean = 0.0;
  double logit_std = 1.0;
  // "auto": FLUX.2's resolution-dependent shift exp(mu), mu linear in image tokens (256 → 0.5, 4096 → 1.15);
  // "none": no shift; a number: that fixed shift.
  std::string shift = "auto";
};

// Optional: have an encoder worker (re)build `dataset` from images before training. The worker reads
// `images` and writes the cache on its own disk, so it must share storage with the coordinator.
struct EncodeConfig {
  std::string images;          // dataset folder (images + .txt captions) as the encoder worker sees it
  std::string encoder_worker;  // host:port of `encoder_worker --listen`
  int64_t resolution = 1024;   // bucket target area = resolution²
  std::string trigger;
};

struct JobConfig {
  std::string source;  // the YAML file (for messages)
  std::string model;
  std::string model_config;
  std::string dataset;
  LoraSpec lora;  // targets resolved; seed = job seed
  std::string lora_targets = "attention";
  OptimizerConfig optimizer;
  TimestepConfig timesteps;
  int64_t steps = 100;
  int64_t batch_size = 1;
  int64_t micro_batches = 1;
  std::string schedule = "1f1b";  // gpipe | 1f1b
  bool recompute = true;
  uint64_t seed = 0;
  int64_t checkpoint_every = 0;      // 0: only at the end
  std::string dtype = "fp32";        // fp32 | bf16
  std::vector<std::string> devices;  // per stage; empty = cpu everywhere
  double guidance = 3.5;             // used when the model has a guidance embedder
  bool save_bfl = false;             // also write lora_bfl.safetensors (BFL/ComfyUI keys)
  int threads = 1;                   // compute threads per process
  // Memory budget per stage for the partitioner ("24GB"; one for all or one per stage); empty = unlimited.
  std::vector<std::string> memory_per_stage;
  EncodeConfig encode;  // encode.encoder_worker empty = use `dataset` as it is

  int64_t micro_batch_size() const { return batch_size / micro_batches; }
};

absl::StatusOr<JobConfig> ParseJobYaml(const std::string& text, const std::string& source = "<job>");
absl::StatusOr<JobConfig> LoadJob(const std::string& path);
// A stable hash of everything that changes the numbers (stages check they were configured for this job).
std::string JobHash(const JobConfig& job);

}  // namespace baton

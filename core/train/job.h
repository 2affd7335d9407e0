// A training job, read from YAML. The same file drives `baton train-local` and `coordinator`. Validation
// is strict: unknown keys, wrong types and out-of-range values are errors that give the file and line.
#pragma once

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/lora/lora.h"
#include "core/pipeline/stage_memory.h"
#include "core/util/limits.h"

namespace baton {

// An exponential moving average of the adapters (`ema:`), kept as diffusers' EMAModel keeps one
// (training_utils.py, the same argument names and defaults but `decay`, which has none here): after optimizer step
// k (1-based), ema −= (1 − d)·(ema − param), d = min(decay, (1 + j)/(10 + j)) or with use_ema_warmup
// min(decay, 1 − (1 + j/inv_gamma)^−power), at least min_decay, j = k − update_after_step − 1 (d = 0 while j ≤ 0).
struct EmaConfig {
  double decay = 0;  // 0: no EMA
  double min_decay = 0;
  int64_t update_after_step = 0;
  bool use_ema_warmup = false;
  double inv_gamma = 1.0;
  double power = 2.0 / 3.0;
  // What the validation and sample passes run with (`evals: trained|ema|both`): the trained adapters, their EMA (the
  // lines and images marked "weights": "ema"), or both (the EMA's images in samples/step-N-ema).
  enum class Evals { kTrained, kEma, kBoth };
  Evals evals = Evals::kTrained;
  bool enabled() const { return decay > 0; }
  bool evals_trained() const { return evals != Evals::kEma; }
  bool evals_ema() const { return enabled() && evals != Evals::kTrained; }
};

// transformers' Adafactor (optimization.py), its arguments and defaults: eps = (eps1, eps2), beta1 < 0 for None (no
// first moment). With relative_step the rate is min(1e-2 or 1e-6·k with warmup_init, 1/√k) at step k, not `lr`.
struct AdafactorConfig {
  double eps1 = 1e-30;
  double eps2 = 1e-3;
  double clip_threshold = 1.0;
  double decay_rate = -0.8;
  double beta1 = -1;
  bool relative_step = true;
  bool scale_parameter = true;
  bool warmup_init = false;
};

// prodigyopt's Prodigy, its arguments and defaults (betas, eps and weight_decay are OptimizerConfig's; beta3 < 0 for
// None: √beta2). Its `lr` is 1 unless the job gives one.
struct ProdigyConfig {
  double beta3 = -1;
  double d0 = 1e-6;
  double d_coef = 1.0;
  double growth_rate = std::numeric_limits<double>::infinity();
  bool use_bias_correction = false;
  bool safeguard_warmup = false;
  bool decouple = true;
};

struct OptimizerConfig {
  // The update rule: "adamw" (torch.optim.AdamW), "adamw8bit" (bitsandbytes' AdamW8bit), "adafactor" (transformers'
  // Adafactor) or "prodigy" (prodigyopt's).
  std::string type = "adamw";
  int64_t min_8bit_size = 4096;  // adamw8bit: tensors of fewer elements keep fp32 moments
  AdafactorConfig adafactor;
  ProdigyConfig prodigy;
  double lr = 1e-4;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double clip = 1.0;  // global grad-norm clip; 0 disables
  // The learning-rate schedule, as diffusers' get_scheduler(schedule, num_warmup_steps, num_training_steps = the run's
  // steps, num_cycles, power) (core/train/lr_schedule.h LearningRate): constant (with warmup_steps:
  // constant_with_warmup), constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial.
  std::string schedule = "constant";
  int64_t warmup_steps = 0;
  double cycles = -1;  // cosine: 0.5, cosine_with_restarts: 1 when not given (< 0)
  double power = 1.0;  // polynomial
  // LoRA+ (the job's `lora: {plus_ratio}`, musubi-tuner's loraplus_lr_ratio): the up projections (lora_B) learn at
  // plus_ratio × the rate; 1: plain LoRA.
  double plus_ratio = 1.0;
  EmaConfig ema;  // the job's `ema:`, kept with the optimizer's state
};

// How each micro-batch's flow-matching t (sigma: x_t = (1 − t)·x0 + t·ε) is drawn; core/train/timesteps.h
// does it. The names, formulas and defaults are those of diffusers' FLUX.2 LoRA trainer
// (train_dreambooth_lora_flux2.py: --weighting_scheme none, --logit_mean 0, --logit_std 1, --mode_scale 1.29,
// and no shift), so a default job samples as that trainer does. u is drawn by the scheme, then
// t = 1 − floor(1000·u)/1000 (the scheduler's training table: large u, little noise), then shifted.
struct TimestepConfig {
  // "none" (alias "uniform"): u ~ U[0, 1).
  // "logit_normal": u = sigmoid(N(logit_mean, logit_std²)) (SD3); logit_mean > 0 means less noise, as in diffusers.
  // "mode": u = 1 − v − mode_scale·(cos²(π·v/2) − 1 + v), v ~ U[0, 1) (SD3's mode sampling with heavy tails);
  //   mode_scale in [−1, 1/(π/2 − 1) ≈ 1.75] keeps u monotone in [0, 1].
  std::string sampling = "none";
  double logit_mean = 0.0;
  double logit_std = 1.0;
  double mode_scale = 1.29;
  // "none": t as drawn (what the diffusers trainer does).
  // "flux2_empirical": s = exp(mu), mu = compute_empirical_mu(image tokens, shift_steps) from diffusers'
  //   Flux2Pipeline: the shift FLUX.2 uses at inference for that many steps.
  // "flux1_linear": s = exp(mu), mu linear in image tokens (256 → 0.5, 4096 → 1.15): FLUX.1's calculate_shift.
  // A positive number: that fixed s.  The shifted t is s·t / (1 + (s − 1)·t).
  std::string shift = "none";
  int64_t shift_steps = 50;  // num_steps of compute_empirical_mu (Flux2Pipeline's default num_inference_steps)
  // The range the (shifted) t is mapped into, linearly: t' = min + (max − min)·t. A Wan 2.2 A14B expert trains only
  // its side of the pipeline's boundary (high noise: [boundary, 1]; low noise: [0, boundary]), as DiffSynth-Studio's
  // min/max_timestep_boundary do. [0, 1] (the default) leaves t as drawn, bitwise.
  double min = 0.0;
  double max = 1.0;
};

// Optional: have an encoder worker (re)build `dataset` from images before training. The worker reads
// `images` and writes the cache on its own disk, so it must share storage with the coordinator. Several workers
// (`encoder_workers: [h:p, ...]`) each encode their share into <dataset>.shards/i-of-N, merged into `dataset`.
struct EncodeConfig {
  std::string images;          // dataset folder (images + .txt captions) as the encoder worker sees it
  std::string encoder_worker;  // host:port of `encoder_worker --listen`; the first of encoder_workers (sample prompts)
  std::vector<std::string> encoder_workers;  // every worker, in share order (`encoder_worker:` gives one)
  int64_t resolution = 1024;                 // bucket target area = resolution²
  std::vector<int64_t> resolutions;          // `resolution: [512, 1024]`: each image at each (else empty)
  std::string trigger;
  std::string control;  // FLUX.2 reference images: the control folder as the encoder worker sees it ("" = none)
  // Wan clips (encoder_worker --frames, --frame_extraction, --clips_per_video, --slide_stride; docs/wan.md): frame
  // buckets (each 4k+1; empty: the largest up to 81), how a long video becomes clips, and their count and stride.
  std::vector<int64_t> frames;
  std::string frame_extraction = "head";
  int64_t clips_per_video = 0;
  int64_t slide_stride = 1;
  // The text encoder's precision the cache must be made with (encoder_worker --quantize): "none" | "int8" | "fp8";
  // "" (absent) = whatever the worker runs. A worker started with another precision refuses the job.
  std::string quantize;
};

// One entry of `datasets:`: an encoded cache folder and how much of each epoch it takes (core/train/data_order.h).
// `repeats: N`: every record N times per epoch (kohya's and musubi-tuner's num_repeats); `weight: W` in (0, 1]: the
// share of micro-batches drawn from it (SimpleTuner's probability). The entries of one job give repeats or weights,
// not both. `caption_dropout` (< 0: the job's) is the probability that a record of this folder trains on the empty
// caption.
struct DatasetSource {
  std::string path;
  int64_t repeats = 1;
  double weight = 0;  // 0: not given
  double caption_dropout = -1;
  std::vector<int64_t> resolutions;  // of a cache encoded at several: the ones trained (empty: the job's)
};

// Optional: a validation loss over held-out cache records, forward only, at fixed timesteps and fixed noise
// (core/sample/validation.h). `samples` records are set aside from `dataset` deterministically (never trained on),
// unless `dataset` names a separate cache, whose first `samples` records (0: all) are used.
struct ValidationConfig {
  int64_t every = 0;  // 0: off; else after every `every` steps, before the first step and after the last
  int64_t samples = 4;
  std::vector<double> timesteps = {0.1, 0.3, 0.5, 0.7, 0.9};  // flow-matching t in (0, 1]
  std::string dataset;
  bool enabled() const { return every > 0; }
  // Records set aside from the training cache.
  int64_t held_out() const { return enabled() && dataset.empty() ? samples : 0; }
};

// Optional: sample images (FLUX.2; core/sample/flux2_sampler.h) or videos (Wan, K.mp4) rendered with the current
// LoRA, written to <output>/samples/step-N/K.png with a contact sheet, before the first step, after every `every` steps
// and after the last. Rendering never changes training: the LoRA of a run with samples equals the LoRA without them.
struct SamplesConfig {
  int64_t every = 0;  // 0: off
  std::vector<std::string> prompts;
  int64_t steps = 28;
  double guidance = 4.0;
  int64_t width = 1024, height = 1024;  // `size: [W, H]`, multiples of 16
  uint64_t seed = 0;                    // prompt K's noise is drawn from seed + K (baton sample --seed S+K)
  int64_t max_sequence_length = 0;      // text tokens; 0: the training cache's
  // Wan videos (core/sample/wan_sample_renderer.h): frames per video (4k + 1), the classifier-free guidance negative
  // prompt (guidance > 1), and for image-to-video models the first frame: an image file, resized to `size`.
  int64_t frames = 17;
  std::string negative_prompt;
  std::string image;
  // FLUX.2 reference images (editing) for every prompt, as Flux2Pipeline's image=[...]
  // (core/sample/flux2_references.h).
  std::vector<std::string> references;
  bool enabled() const { return every > 0; }
};

// A job file, with example values (docs/jobs.md's tables hold every key with its default and range):
//   model: out/demo/pipeline            # diffusers transformer or pipeline folder, or a BFL .safetensors
//   model_config: ""                    # config.json for a BFL single file
//   expert: both                        # Wan 2.2 A14B: high | low | both (one LoRA per expert, core/train/experts.h)
//   dataset: out/demo/cache             # encoded cache (core/data/cache.h)
//   datasets: [{path: cache/a, repeats: 2}, {path: cache/b, caption_dropout: 0.2}]  # instead of `dataset:`
//   caption_dropout: 0.1                # probability that a record trains on the empty caption (core/train/batches.h)
//   lora: {rank: 8, alpha: 8, targets: attention, dropout: 0.0}
//   init_lora: ""                       # optional LoRA file to start from (same targets and rank as `lora`)
//   optimizer: {lr: 1e-3, weight_decay: 0.0, betas: [0.9, 0.999], eps: 1e-8, clip: 1.0, warmup_steps: 0}
//   optimizer: {..., schedule: cosine, warmup_steps: 100, cycles: 0.5, power: 1.0}  # diffusers' get_scheduler
//   timesteps: {sampling: none, logit_mean: 0.0, logit_std: 1.0, mode_scale: 1.29, shift: none, shift_steps: 50}
//   steps: 30, batch_size: 4, micro_batches: 4, schedule: 1f1b, recompute: auto, seed: 42
//   checkpoint_every: 10, dtype: fp32, devices: [cpu, cpu], guidance: 3.5, save_bfl: false, threads: 1
//   lora_dtype: fp32                    # the adapters' math: the job's dtype (default) or fp32 (under dtype: bf16)
//   loss: {weighting: sigma_sqrt}       # none | sigma_sqrt | cosmap (core/train/common.h)
//   ema: {decay: 0.999, evals: both}    # optional: an EMA of the adapters (core/train/optimizer.h)
//   offload: {blocks: 8}                # block swap on each stage: none | auto | {blocks: N}
//   replica_exchange: auto, state_every: 20, wire_dtype: none, deterministic: true
//   resolutions: [512, 1024]            # of a cache encoded at several resolutions, the ones trained
//   quantize: none                      # none | int8 | fp8: the blocks' frozen Linear weights in 8 bits
//   schedule: interleaved, chunks: 2    # interleaved 1F1B: chunks (2..26, default 2) model chunks per stage
//   memory_per_stage: [24GB, 24GB]      # optional: the partitioner keeps every stage within its budget
//   replicas: 2, replica_split: speed   # data-parallel pipelines; replica_stages: [1, 2] when they differ in stages
//   encode: {images: data/, encoder_worker: host:5000, resolution: 1024, quantize: none}  # optional: build the cache
//   encode: {..., control: data/control}  # FLUX.2 editing: reference images (encoder_worker --control)
//   encode: {..., frames: [1, 33, 81], frame_extraction: chunk, clips_per_video: 4, slide_stride: 8}  # Wan clips
//   validation: {every: 20, samples: 4, timesteps: [0.1, 0.3, 0.5, 0.7, 0.9]}  # optional: held-out loss
//   samples: {every: 20, prompts: ["a dog"], steps: 28, guidance: 4.0, size: [512, 512], seed: 0}  # optional
//   samples: {..., references: [ref/cat.png]}  # FLUX.2 editing: reference images for every prompt
//   sweep: {optimizer.lr: [1e-4, 3e-4], lora.rank: [8, 16]}  # optional: one run per combination (core/train/sweep.h)
struct JobConfig {
  std::string source;  // the YAML file (for messages)
  std::string name;    // the job's `name:` key; empty = JobName() uses the file's stem
  std::string model;
  std::string model_config;
  // Wan 2.2 A14B (two experts): which the job trains, "high" | "low" | "both" (core/train/experts.h); "" = the folder's
  // default transformer, its timesteps as configured.
  std::string expert;
  std::string dataset;  // empty when `datasets:` lists the caches
  // `datasets:` (several caches, with repeats or weights); empty: `dataset` alone. Sources() gives either as a list.
  std::vector<DatasetSource> datasets;
  // The probability that a record trains on the empty caption instead of its own (ai-toolkit's caption_dropout_rate,
  // SimpleTuner's caption_dropout_probability), for the datasets that do not set their own. Validation never drops.
  double caption_dropout = 0;
  // Of caches encoded at several resolutions (encoder_worker --resolution 512,768,1024): the ones trained, for the
  // datasets that name none; empty: all.
  std::vector<int64_t> resolutions;
  LoraSpec lora;  // targets resolved; seed = job seed
  std::string lora_targets = "attention";
  std::string init_lora;  // empty: adapters start from the seeded init (core/train/init_lora.h)
  OptimizerConfig optimizer;
  TimestepConfig timesteps;
  int64_t steps = 100;
  int64_t batch_size = 1;
  int64_t micro_batches = 1;
  // Data-parallel replicas of the pipeline (coordinator/replica_set.h): each step's micro-batches are dealt out to
  // them, their LoRA gradients summed in replica order. `replica_split`: speed (in proportion to each replica's
  // measured seconds per micro-batch) | equal. What is learned does not depend on either (float summation order).
  int64_t replicas = 1;
  std::string replica_split = "speed";
  // Stages per replica where they differ (`replica_stages: [1, 2]`: a one-stage replica beside a two-stage one);
  // sets `replicas` and overrides the coordinator's --stages. `devices` and `memory_per_stage` then list every
  // worker, replica after replica.
  std::vector<int64_t> replica_stages;
  // Where the optimizer runs: `auto` (the default: `allreduce`, or `coordinator` for replicas of different stage
  // counts, which only it can serve), `allreduce` (each stage keeps its adapters' fp32 masters and AdamW moments and
  // steps them on its own device; with replicas, stage s of every replica first sums its gradients with the others'
  // over a c10d Gloo group; per step only the squared norms go up and the clip factor and learning rate come down;
  // replicas of equal stage counts only; coordinator/peer_exchange.h) or `coordinator` (each step every stage sends
  // its gradients to the coordinator, which steps AdamW and sends the adapters back: the whole LoRA twice per step over
  // the links). The LoRA is the same either way. With `allreduce` the coordinator reads the state back for every
  // checkpoint, validation and sample pass, and every `state_every` steps; a stage that loses it (a killed worker)
  // costs the steps since then, redone bit for bit (docs/failure-semantics.md), where `coordinator` costs the one step.
  std::string replica_exchange = "auto";
  // With `allreduce`: the most steps a lost stage costs. The read is the adapters and both moments (3x the LoRA: at
  // FLUX.2-dev's rank 16, 0.9 GB, ~7.5 s over 1 GbE, ~0.4 s a step spread over 20); 0: only at the evaluations and
  // checkpoints.
  int64_t state_every = 20;
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int64_t chunks = 1;             // model chunks per stage: 1, or >= 2 (default 2) with interleaved
  // auto: the planner recomputes the first blocks of a stage only where its memory budget requires it;
  // true: every block (per-block activation checkpointing); false: none.
  RecomputePolicy recompute = RecomputePolicy::kAuto;
  // Block swap on each stage (`offload: {blocks: N}` or `offload: auto`): the first N blocks' frozen weights live in
  // host memory and are copied in for each use (core/model/block_swap.h); auto: the fewest that fit memory_per_stage
  // (core/pipeline/partition.h "Block swap"). The LoRA is bitwise the same; 0: none.
  static constexpr int64_t kOffloadAuto = -1;
  int64_t offload_blocks = 0;
  // Activations and their gradients between stages: none (exact) | bf16 | fp8 (per-token scale); lossy,
  // for slow links (wire/wire_compression.h).
  std::string wire_dtype = "none";
  uint64_t seed = 0;
  int64_t checkpoint_every = 0;  // 0: only at the end
  std::string dtype = "fp32";    // fp32 | bf16
  // The LoRA adapters' math (their down and up projections): the compute dtype (the default: bf16 runs them on
  // tensor cores, as PEFT does) or fp32 (today's math over a bf16 base, for whoever wants it). The adapters, their
  // gradients summed over micro-batches and the optimizer's moments are fp32 either way (LoraLinearImpl::math_dtype).
  std::string lora_dtype = "fp32";   // fp32 | the job's dtype; set from `dtype` when absent
  std::string quantize = "none";     // none | int8 | fp8 (core/quant/weight_quant.h), validated on parse
  std::vector<std::string> devices;  // per stage (replica 0's, then replica 1's ...); empty = each worker's --device
  double guidance = 3.5;             // used when the model has a guidance embedder
  // `loss: {weighting}`: how each sample's loss counts by its sigma, diffusers' compute_loss_weighting_for_sd3 (none |
  // sigma_sqrt | cosmap; core/train/common.h LossWeighting).
  std::string loss_weighting = "none";
  bool save_bfl = false;  // also write bfl/lora_bfl.safetensors (BFL/ComfyUI keys)
  int threads = 1;        // compute threads per process
  // CUDA only: deterministic kernels (bitwise redo, resume and recompute; core/device/determinism.h). false
  // trades those promises for the faster non-deterministic kernels. CPU computation is deterministic either way.
  bool deterministic = true;
  // Memory budget per stage for the partitioner ("24GB"; one for all or one per stage); empty = unlimited.
  std::vector<std::string> memory_per_stage;
  EncodeConfig encode;  // encode.encoder_worker empty = use `dataset` as it is
  ValidationConfig validation;
  SamplesConfig samples;
  // `sweep:` (core/train/sweep.h): keys (optimizer.lr, lora.rank, lora.alpha, seed, dataset) and their values as
  // written, in file order; every combination is one member, all trained at once over the same stage workers.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  // A sweep member's name ("lr=1e-4_rank=8"; empty for any other job): part of its JobHash, so that the stage workers
  // tell the members apart.
  std::string sweep_member;
  bool lora_alpha_set = false;  // `lora.alpha` was given (else it follows lora.rank, also in a sweep)

  int64_t micro_batch_size() const { return batch_size / micro_batches; }
  // The caches the job trains on: `datasets:`, or `dataset` as one entry (repeats 1, the job's caption dropout).
  std::vector<DatasetSource> Sources() const;
  std::vector<std::string> SourcePaths() const;
  // Per source, the resolutions it trains (its own, else the job's; empty: all): CacheReader::OpenAll's filter.
  std::vector<std::vector<int64_t>> SourceResolutions() const;
  // Source k's caption dropout probability (its own, else the job's).
  double CaptionDropout(const DatasetSource& source) const {
    return source.caption_dropout >= 0 ? source.caption_dropout : caption_dropout;
  }
};

// Limits on what a job file may ask for, checked before and while it is parsed (the job service parses what any
// client submits, and a YAML node costs hundreds of bytes: a 50 MB list once took 5.7 GB), each from what the value
// means. Errors give file:line.
// The whole file: kMaxJobFileBytes (core/util/limits.h).
// Any one value: a path (PATH_MAX), a prompt (the text encoders read at most 512 tokens).
inline constexpr size_t kMaxJobStringBytes = 4096;
inline constexpr int64_t kMaxJobSteps = 1000000;   // steps (and --steps): the service keeps a record of each
inline constexpr int64_t kMaxJobBatchSize = 4096;  // samples per step
inline constexpr int64_t kMaxJobThreads = 1024;    // compute threads per process
// devices, memory_per_stage, lora.targets: one entry per stage (or target name); a stage holds at least one block,
// and FLUX.2 has 56, Wan 2.x 40.
inline constexpr size_t kMaxJobStages = 64;
// validation.timesteps: each is one forward pass per held-out record at every validation, and one noisy copy of
// each record in memory; 32 points resolve the loss-over-t curve (the default has 5).
inline constexpr size_t kMaxValidationTimesteps = 32;
// samples.prompts: each renders `steps` denoising passes at every rendering and a picture on the contact sheet.
inline constexpr size_t kMaxSamplePrompts = 64;
// datasets: one cache folder each, opened together.
inline constexpr size_t kMaxJobDatasets = 64;
inline constexpr int64_t kMaxDatasetRepeats = 10000;
// encode.encoder_workers: one connection, one stream and one shard folder each; past 64 the merge's per-shard
// overhead outgrows a share of any dataset worth splitting.
inline constexpr size_t kMaxEncoderWorkers = 64;

// Refuses text over kMaxJobFileBytes before any YAML is built.
absl::StatusOr<JobConfig> ParseJobYaml(const std::string& text, const std::string& source = "<job>");
// Reads at most kMaxJobFileBytes (a bigger file, a FIFO or a device is refused before a byte is read).
absl::StatusOr<JobConfig> LoadJob(const std::string& path);
// What the job is called in metrics (label job) and listings: its `name:` key, else the YAML file's stem
// ("jobs/flux2-dog.yaml" → "flux2-dog"), else "job".
std::string JobName(const JobConfig& job);
// A stable hash of everything that changes the numbers (stages check they were configured for this job).
std::string JobHash(const JobConfig& job);

}  // namespace baton

// Partitioner: splits FLUX.2's blocks into contiguous pipeline stages, balancing compute and respecting a
// per-worker memory budget, from the config alone (no weights are touched, so FLUX.2-dev can be planned
// for 2x24 GB on a laptop). Global block index: double-stream blocks are 0..num_layers-1, single-stream
// blocks follow. Stage 0 also holds x_embedder/context_embedder; the last stage holds norm_out/proj_out.
//
// Cost model (balances time): a stage's cost is the multiply-accumulates one micro-batch's training step
// spends on it. Per token, a double-stream block and a single-stream block do the same linear work,
// 4·D² + 3·M·D MACs (M = mlp hidden): in a double block every token passes through its own stream's
// q/k/v/out and feed-forward only, so the second stream doubles the parameters but not the FLOPs. Both
// attend over all T tokens (2·T²·D). So with T tokens:
//   block    = T·(4·D² + 3·M·D) + 2·T²·D, x (2 + recompute): forward, input-gradient backward (frozen weights
//              need no weight gradient; LoRA's is negligible), and the recomputed forward
//   embedders = (T_img·in_channels + T_txt·joint_attention_dim)·D, x (1 + recompute): no backward, the
//              inputs need no gradient
//   head     = T_img·D·out_dim, x (2 + recompute)
// The parameter count, which weighs a double block as two single blocks, is the memory model's input
// only: balancing by it put 2 double blocks alone against 4 single ones, and the measured pipeline bubble
// rose from 0.16 to 0.27 (BENCHMARKS.md, bench_pipeline).
//
// Memory model (an ESTIMATE for planning, not a measurement; real use adds allocator slack):
//   frozen   = frozen params held by the stage (`params`) x bytes_per_param
//   lora     = LoRA params on the stage's blocks x 4 bytes (fp32) x 2 (weight + gradient); the optimizer
//              state lives on the coordinator, not on stages
//   act      = (in_flight x blocks + kBlockWorkingFactor) x A, with A = tokens_per_micro_batch x D x
//              activation_bytes: per-block recompute keeps, for each in-flight micro-batch, the input of
//              every block of this stage (its checkpoints), plus one block's full forward+backward
//              working set (~32 hidden-sized tensors per token; assumes a
//              flash/memory-efficient attention kernel, i.e. no seq^2 term). in_flight is the schedule's
//              peak for that stage (1F1B: min(p-s, m); GPipe: m). This is what the stage worker's
//              per-block recompute (Flux2Stage::ForwardCheckpointed / BackwardFromCheckpoints) holds.
//              Without recompute every in-flight micro-batch keeps every block's graph:
//              act = in_flight x blocks x kBlockWorkingFactor x A.
//   overhead = overhead_bytes (CUDA context, communication buffers, fragmentation)
//   est_memory_bytes = frozen + lora + act + overhead
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/flux2_config.h"
#include "core/pipeline/schedule.h"

namespace baton {

constexpr int64_t kBlockWorkingFactor = 32;

struct StageSpec {
  int index = 0;
  int64_t block_begin = 0;  // global block indices [begin, end)
  int64_t block_end = 0;
  bool has_embedders = false;  // x_embedder + context_embedder
  bool has_head = false;       // norm_out.linear + proj_out
  double cost = 0;             // MACs per micro-batch training step (see cost model)
  int64_t params = 0;          // frozen parameters held
  int64_t param_bytes = 0;     // params x bytes_per_param
  int64_t lora_params = 0;
  int64_t activation_bytes = 0;  // the `act` term of the memory model
  int64_t est_memory_bytes = 0;
  int64_t budget_bytes = 0;  // 0 = unlimited
};

struct PartitionOptions {
  int stages = 1;
  // Empty = unlimited; one entry = the same budget for every stage; else exactly one per stage.
  std::vector<int64_t> memory_budget_bytes;
  int bytes_per_param = 2;  // frozen weights: bf16 = 2, fp32 = 4, int8/fp8 = 1
  int64_t lora_rank = 16;
  // false: diffusers' FLUX.2 defaults (double: to_q/k/v, to_out.0; single: to_qkv_mlp_proj, to_out).
  // true: every block linear (adds add_q/k/v_proj, to_add_out and both feed-forwards of double blocks).
  bool all_linear = false;
  int64_t tokens_per_micro_batch = 4608;      // (image + text tokens) x samples: 1024x1024 + 512 text tokens
  int64_t text_tokens_per_micro_batch = 512;  // the text part of tokens_per_micro_batch
  bool recompute = true;                      // the cost model counts the recomputed forward
  int activation_bytes = 2;                   // bf16 activations
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int micro_batches = 0;  // for the in-flight term; 0 = assume >= stages
  int64_t overhead_bytes = 1000'000'000;
};

struct Plan {
  std::vector<StageSpec> stages;
  double max_cost = 0;    // MACs per micro-batch on the busiest stage
  double total_cost = 0;  // summed over stages
  bool fits = false;
  std::string message;  // when !fits: which stage is over by how much, and what would fit
  PartitionOptions options;
};

// LoRA parameters one block carries at `rank` (r x (in + out) per targeted linear).
int64_t DoubleBlockLoraParams(const Flux2Config& config, int64_t rank, bool all_linear);
int64_t SingleBlockLoraParams(const Flux2Config& config, int64_t rank, bool all_linear);

// Contiguous split minimizing the largest stage cost subject to every stage's estimate fitting its
// budget; ties go to the split with the smallest sum of squared stage costs. If no split fits, returns a
// plan with fits=false (the split with the smallest worst overrun) and a message. Errors on bad options:
// stages < 1 or > number of blocks, wrong budget count, negative budgets, bytes_per_param not in 1..4.
absl::StatusOr<Plan> PartitionFlux2(const Flux2Config& config, const PartitionOptions& options);

// MACs of one micro-batch's training step on blocks [begin, end) plus the embedders / head (cost model).
double StageComputeCost(const Flux2Config& config, const PartitionOptions& options, int64_t block_begin,
                        int64_t block_end, bool embedders, bool head);

// Human table: stage, blocks ("double 0-7, single 0-11"), params, memory estimate vs budget, compute share.
std::string RenderPlan(const Flux2Config& config, const Plan& plan);
// "double 0-7, single 0-11" (single-stream blocks numbered from 0, as in diffusers).
std::string DescribeBlocks(const Flux2Config& config, int64_t block_begin, int64_t block_end);

// "24GB" (10^9), "24GiB" (2^30), "512MB", "1.5TB", "24G" (= GB), "24Gi" (= GiB), "4096" (bytes). Units are
// case-insensitive, a space before the unit is allowed; fractions need a unit and round to whole bytes.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);
std::string FormatByteSize(int64_t bytes);  // "64.4 GB" (decimal units, matching ParseByteSize's GB)

}  // namespace baton

// Partitioner: splits FLUX.2's blocks into contiguous pipeline stages, balancing compute and respecting a
// per-worker memory budget, from the config alone (no weights are touched, so FLUX.2-dev can be planned
// for 2x24 GB on a laptop). Global block index: double-stream blocks are 0..num_layers-1, single-stream
// blocks follow. Stage 0 also holds x_embedder/context_embedder; the last stage holds norm_out/proj_out.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/lora/adapter_type.h"
#include "core/model/flux2_config.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/stage_memory.h"
#include "core/quant/weight_quant.h"

namespace baton {

constexpr int64_t kBlockWorkingFactor = 32;
constexpr int64_t kOffloadHeadroomBytes = 1'000'000'000;  // see "Block swap" below

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
// Dispatch term (CPU stages only): a CPU runs each operation synchronously, so every forward or backward pass
// of a block also costs a fixed time per token stream it runs (its norms, modulations, projections, attention
// and residuals, each a dispatched operation), kCpuStreamPassMacs in multiply-add equivalents: ~1.75 ms per
// stream and pass on one thread of an Intel Xeon at ~60 GMAC/s (measured with the demo's tiny FLUX.2, where it
// is ~90 % of a block's time: a double block, two streams, took ~2.2x a single block's time, not the same).
// At FLUX.2-dev's size it is under 0.1 % of a block; on CUDA, launches are asynchronous and hidden behind
// the kernels of the models that need a GPU, so the term is 0 there.
//   block    += streams x kCpuStreamPassMacs per pass (2 + recompute passes), on CPU stages
//
// Memory model (an ESTIMATE for planning; bench/bench_memory holds it to measured peaks on CPU):
//   weights  = the stage's frozen parameters, each FrozenParamBytes: block linears 1 byte/element + an fp32
//              scale per output row under `quantize: int8|fp8`, everything else bytes_per_param (stage_memory.h)
//   lora     = LoRA params on the stage's blocks x 4 bytes (fp32) x 2 (weight + gradient); the optimizer
//              state (AdamW's two moments) lives on the coordinator, not on stages -- but with a stage-local
//              optimizer (`replica_exchange: allreduce`) x (4 + its state's copies): also the held sum and the
//              reduced one and the optimizer's state (AdamW: two moments, x 6 in all; an EMA: one more)
//   act      = per in-flight micro-batch, with A = tokens_per_micro_batch x D x activation_bytes: a block
//              run with its graph keeps ~kBlockWorkingFactor x A (every intermediate of its forward); a
//              recomputed block keeps only its input, 1 x A (its checkpoint), and the stage then needs one
//              block's graph, kBlockWorkingFactor x A, while it recomputes. With r of the stage's n blocks
//              recomputed (the first r, see Flux2Stage::ForwardCheckpointed):
//                act = in_flight x (r + (n - r) x kBlockWorkingFactor) x A + (r > 0 ? kBlockWorkingFactor x A : 0)
//              in_flight is the schedule's peak for that stage (1F1B: min(p-s, m); GPipe: m). Assumes a
//              flash/memory-efficient attention kernel (no seq^2 term).
//              A block run with its graph also keeps, under a compute dtype narrower than fp32, the fp32 copy of
//              each adapted linear's input that the adapter path makes (PEFT's numerics: the adapters are fp32):
//              PlanModel::block_lora_input elements x 4 bytes, added to that block's graph; LoHa's [out, in]
//              matrices too (AdapterMatrixBytes).
//   transient = with 8-bit weights, one linear's weight dequantized to the compute dtype for its matmul (the
//              largest: PlanModel::largest_quantized_linear), plus one fp32 tile of the dequantization
//              (kDequantTileBytes) when the compute dtype is narrower; one at a time, so once per stage; and DoRA's
//              two [out, in] matrices of the largest adapted linear (AdapterMatrixBytes)
//   overhead = the stage's device's fixed per-process cost (DeviceProcessBytes: measured on CPU, estimated on
//              CUDA), unless overhead_bytes overrides it
//   est_memory_bytes = weights + lora + act + transient + overhead
// Recompute: `recompute: true` recomputes every block (r = n), false none (r = 0), auto the smallest r with
// which the stage fits its budget (0 without a budget); the compute cost counts the r recomputed forwards.
// Block swap (`offload`, core/model/block_swap.h): the first s blocks' frozen weights live in host memory and are
// copied in for each use, at most two at once (the one computing and the next, copying): the `weights` term loses
// their bytes and gains min(s, 2) x the largest of them (the prefetch buffers); host_bytes counts them on the host.
// They must be recomputed: r >= s. offload_blocks: s for every stage (at most its blocks), or kOffloadAuto: 0 when
// the stage fits its budget without (or has none), else the smallest s with which it fits with kOffloadHeadroomBytes
// to spare (at most a tenth of the budget). Swapping one or two blocks saves nothing (their buffers are as big); the
// copies themselves are not in the cost (they overlap the compute).
struct StageSpec {
  int index = 0;
  int64_t block_begin = 0;  // global block indices [begin, end)
  int64_t block_end = 0;
  bool has_embedders = false;  // x_embedder + context_embedder
  bool has_head = false;       // norm_out.linear + proj_out
  double cost = 0;             // MACs per micro-batch training step (see cost model)
  int64_t params = 0;          // frozen parameters held
  int64_t param_bytes = 0;     // the `weights` term: their bytes on the device (quantized where `quantize` says)
  int64_t lora_params = 0;
  int64_t lora_bytes = 0;        // the `lora` term (weight + gradient, fp32; + optimizer state when stage-local)
  int in_flight = 0;             // peak micro-batches held at once under the schedule
  int64_t recompute_blocks = 0;  // the first this-many blocks of the stage are recomputed (0 = none)
  int64_t activation_bytes = 0;  // the `act` term of the memory model, with recompute_blocks
  int64_t activation_bytes_per_mb_no_recompute = 0;  // one in-flight micro-batch's `act` share, r = 0
  int64_t activation_bytes_per_mb_recompute = 0;     // the same with every block recomputed (r = n)
  int64_t overhead_bytes = 0;
  int64_t transient_bytes = 0;  // the `transient` term
  int64_t offload_blocks = 0;   // the first this-many blocks are swapped in from host memory (0 = none)
  int64_t host_bytes = 0;       // their frozen weights, held in (page-locked) host memory
  PlanDevice device = PlanDevice::kCuda;
  int64_t est_memory_bytes = 0;
  int64_t budget_bytes = 0;  // 0 = unlimited
};

// What one more pipeline on the same stage costs (many LoRAs on one loaded model): its `lora` and `act` terms; the
// weights, transient and overhead terms are the stage's once.
inline int64_t MemberBytes(const StageSpec& s) { return s.lora_bytes + s.activation_bytes; }

struct PartitionOptions {
  int stages = 1;
  // Empty = unlimited; one entry = the same budget for every stage; else exactly one per stage.
  std::vector<int64_t> memory_budget_bytes;
  int bytes_per_param = 2;  // frozen weights' compute dtype: bf16 = 2, fp32 = 4 (1 = everything 8-bit)
  WeightQuant quantize = WeightQuant::kNone;  // block linears in 8 bits (int8/fp8), the rest bytes_per_param
  int64_t lora_rank = 16;
  AdapterType lora_type = AdapterType::kLora;  // the adapters' parameters per type (core/lora/adapter_type.h)
  int64_t lokr_factor = -1;
  // false: diffusers' FLUX.2 defaults (double: to_q/k/v, to_out.0; single: to_qkv_mlp_proj, to_out).
  // true: every block linear (adds add_q/k/v_proj, to_add_out and both feed-forwards of double blocks).
  bool all_linear = false;
  int64_t tokens_per_micro_batch = 4608;      // (image + text tokens) x samples: 1024x1024 + 512 text tokens
  int64_t text_tokens_per_micro_batch = 512;  // the text part of tokens_per_micro_batch
  // FLUX.2 reference images' part of the image tokens: they run through every block; the head predicts the rest.
  int64_t reference_tokens_per_micro_batch = 0;
  RecomputePolicy recompute = RecomputePolicy::kAll;  // see "Recompute" above
  static constexpr int64_t kOffloadAuto = -1;
  int64_t offload_blocks = 0;  // see "Block swap" above: blocks per stage, or kOffloadAuto
  int activation_bytes = 2;    // bf16 activations
  // The adapters' math (job key lora_dtype): fp32 masters cast each adapted input up (an fp32 copy the block's graph
  // keeps under a narrower compute dtype); in the compute dtype they read the input itself, and only LoRA dropout
  // keeps a copy (the dropped input, in the compute dtype).
  bool lora_fp32 = true;
  bool lora_dropout = false;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int micro_batches = 0;  // for the in-flight term; 0 = assume >= stages
  PlanDevice device = PlanDevice::kCuda;
  std::vector<PlanDevice> devices;  // per stage; empty = `device` for every stage
  int64_t overhead_bytes = -1;      // -1: each stage's device's fixed per-process cost (DeviceProcessBytes)
  bool local_optimizer = false;     // the stages hold AdamW's state and the step's gradient sums (`lora` above)
  // Full fp32 copies of the adapters the stage-local optimizer keeps as its state: AdamW's two moments, an EMA one
  // more; Adafactor's factored second moment counts as none, its first moment as one (OptimizerStateCopies).
  double optimizer_state_copies = 2;
  double LoraCopies() const { return local_optimizer ? 4 + optimizer_state_copies : 2; }
  PlanDevice StageDevice(int k) const {
    return k >= 0 && static_cast<size_t>(k) < devices.size() ? devices[static_cast<size_t>(k)] : device;
  }
};

class ModelFamily;

// The planner's numbers for one model under one set of options (quantize, bytes per parameter, LoRA rank and targets
// and token counts change them): frozen sizes and LoRA parameters per block, and forward multiply-accumulates of one
// micro-batch. Blocks do the same multiply-adds per micro-batch (FLUX.2's double and single blocks do the same linear
// work per token; Wan has one block kind), so one block figure serves every block; they differ in token streams.
struct PlanModel {
  std::string name;     // "FLUX.2", "Wan"
  std::string summary;  // "56 blocks (8 double, 48 single)"
  int64_t hidden_size = 0;
  FrozenSizes frozen;
  std::vector<int64_t> block_lora;  // [num_blocks] LoRA parameters
  double block_macs = 0, embed_macs = 0, head_macs = 0;
  // [num_blocks] token streams each block runs (FLUX.2: double 2, single 1); empty: 1 each. The dispatch term.
  std::vector<int> block_streams;
  int Streams(int64_t b) const { return block_streams.empty() ? 1 : block_streams[static_cast<size_t>(b)]; }
  int64_t largest_quantized_linear = 0;  // elements of the largest block linear stored in 8 bits under `quantize`
  // Per micro-batch, the elements of the adapted linears' inputs in the block that has the most (tokens x
  // in_features summed over its adapted linears; each gets its own fp32 copy: see the memory model).
  int64_t block_lora_input = 0;
  // out x in elements of the adapted linears: summed in the block that has the most, and the largest one (LoHa keeps
  // three such matrices per linear in a block's graph, DoRA builds two at a time: see AdapterMatrixBytes).
  int64_t block_adapted_elements = 0;
  int64_t largest_adapted = 0;
  std::function<std::string(int64_t begin, int64_t end)> describe;  // "double 0-7, single 0-11"
  int64_t num_blocks() const { return static_cast<int64_t>(block_lora.size()); }
};
// Builds the PlanModel for a set of options (the planner asks again with other options to explain a miss).
using PlanSource = std::function<absl::StatusOr<PlanModel>(const PartitionOptions&)>;
PlanSource Flux2PlanSource(const Flux2Config& config);
// Any family, through ModelFamily's BlockPlanInfo; `model` must outlive the source. Under `quantize` the block
// linears count 1 byte per weight (the per-row scales, ~1/D of that, are left out).
PlanSource FamilyPlanSource(const ModelFamily& model);
// What the planner sizes `model` with: FamilyPlanSource, except that FLUX.2 keeps the planner's exact model of its
// frozen bytes (8-bit weights with their per-row fp32 scales, held to bench/bench_memory's measurements), which
// BlockPlanInfo's parameter counts do not carry.
absl::StatusOr<PlanSource> PlanSourceFor(const ModelFamily& model);

struct Plan {
  std::vector<StageSpec> stages;
  std::shared_ptr<const PlanModel> model;  // what was planned (RenderPlan names its blocks)
  double max_cost = 0;                     // MACs per micro-batch on the busiest stage
  double total_cost = 0;                   // summed over stages
  bool fits = false;
  std::string message;  // when !fits: which stage is over by how much, and what would fit
  PartitionOptions options;
};

// The memory model's extra terms (StageSpec): one block graph's fp32 copies of the adapters' inputs, and `transient`.
int64_t LoraInputCopyBytes(const PlanModel& model, const PartitionOptions& options);
int64_t TransientBytes(const PlanModel& model, const PartitionOptions& options);
// The [out, in] matrices the adapter type adds, in the adapters' math dtype: LoHa's block graph keeps w1a·w1b,
// w2a·w2b and ΔW for each adapted linear (`graph`, added to one block's graph); DoRA builds B·A and W + s·B·A for
// one linear at a time (`transient`). Plain LoRA and LoKr build none.
int64_t AdapterMatrixBytes(const PlanModel& model, const PartitionOptions& options, bool graph);

// LoRA parameters one block carries at `rank` (r x (in + out) per targeted linear).
int64_t DoubleBlockLoraParams(const Flux2Config& config, int64_t rank, bool all_linear,
                              AdapterType type = AdapterType::kLora, int64_t lokr_factor = -1);
int64_t SingleBlockLoraParams(const Flux2Config& config, int64_t rank, bool all_linear,
                              AdapterType type = AdapterType::kLora, int64_t lokr_factor = -1);

// Contiguous split minimizing the largest stage cost subject to every stage's estimate fitting its
// budget; ties go to the split with the smallest sum of squared stage costs. If no split fits, returns a
// plan with fits=false (the split with the smallest worst overrun) and a message. Errors on bad options:
// stages < 1 or > number of blocks, wrong budget count, negative budgets, bytes_per_param not in 1..4.
absl::StatusOr<Plan> Partition(const PlanSource& source, const PartitionOptions& options);
absl::StatusOr<Plan> PartitionFlux2(const Flux2Config& config, const PartitionOptions& options);

// MACs of one micro-batch's training step on blocks [begin, end) plus the embedders / head (cost model),
// with the first `recompute_blocks` blocks recomputed (-1: as options.recompute says for all blocks, i.e. all
// of them under true, none otherwise), on options.device (the dispatch term on a CPU).
double StageComputeCost(const PlanModel& model, const PartitionOptions& options, int64_t block_begin, int64_t block_end,
                        bool embedders, bool head, int64_t recompute_blocks = -1);
double StageComputeCost(const Flux2Config& config, const PartitionOptions& options, int64_t block_begin,
                        int64_t block_end, bool embedders, bool head, int64_t recompute_blocks = -1);

// Human table: stage, blocks ("double 0-7, single 0-11"), params, memory estimate vs budget, compute share.
std::string RenderPlan(const Plan& plan);
std::string RenderPlan(const Flux2Config& config, const Plan& plan);  // the same (the plan knows its model)

// "24GB" (10^9), "24GiB" (2^30), "512MB", "1.5TB", "24G" (= GB), "24Gi" (= GiB), "4096" (bytes). Units are
// case-insensitive, a space before the unit is allowed; fractions need a unit and round to whole bytes.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);
std::string FormatByteSize(int64_t bytes);  // "64.4 GB" (decimal units, matching ParseByteSize's GB)

}  // namespace baton

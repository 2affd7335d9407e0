// The planner's memory model, piece by piece: what a stage's frozen weights take (per parameter, in the
// compute dtype or 8-bit per `quantize`), the fixed cost of a stage process on its device, and the
// recompute policy (none, all blocks, or the planner's per-stage choice). partition.h combines them.
// The fixed costs are measured (bench/bench_memory on CPU, BENCHMARKS.md) where we could measure them.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/flux2_config.h"
#include "core/quant/weight_quant.h"

namespace baton {

// `recompute:` in the job. kAll is per-block recompute everywhere; kAuto lets the planner recompute the
// first k blocks of a stage, k minimal such that the stage fits its budget (0 when it fits without).
enum class RecomputePolicy { kNone, kAll, kAuto };
// "auto" | "true" | "false"; anything else is InvalidArgument naming the allowed values.
absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view text);
std::string RecomputePolicyName(RecomputePolicy policy);  // "auto" | "true" | "false"

enum class PlanDevice { kCpu, kCuda };
// "cpu" | "cuda" | "cuda:N".
absl::StatusOr<PlanDevice> ParsePlanDevice(absl::string_view text);
std::string PlanDeviceName(PlanDevice device);

// Fixed bytes of one stage process besides weights and activations.
// CPU: measured by bench/bench_memory (BENCHMARKS.md): a stage_worker is 395 MB resident once it listens,
// before it is configured (libtorch's CPU+CUDA wheel libraries, gRPC, protobuf, thread stacks), and its
// peak then exceeds that + weights + LoRA + activations by ~50 MB (allocator arenas, the tensors on the
// wire in both directions) on both measured configs: 450 MB.
// CUDA: device memory for the CUDA context, cuBLAS workspaces and caching-allocator fragmentation. An
// ESTIMATE, not measured (no GPU here): the context alone is ~0.3-0.6 GB with lazy module loading, and the
// caching allocator's slack grows with the activation churn. (The host-side RSS is not in the budget.)
constexpr int64_t kCpuProcessBytes = 450'000'000;
constexpr int64_t kCudaProcessBytes = 1000'000'000;
int64_t DeviceProcessBytes(PlanDevice device);

// Frozen parameters a stage can hold, by piece, with their bytes. Stage 0 holds the embedders, the last
// stage proj_out (norm_out.linear belongs to the coordinator's shell, like the modulations).
struct FrozenSizes {
  std::vector<int64_t> block_params;  // [num_blocks], global block order
  std::vector<int64_t> block_bytes;   // [num_blocks]
  int64_t embed_params = 0, embed_bytes = 0;
  int64_t head_params = 0, head_bytes = 0;
};
// Sums FrozenParamBytes over Flux2ParameterShapes: block linears 8-bit when quantize != none, the rest
// (norms, embedders, head) in the compute dtype (`compute_bytes` per element).
FrozenSizes ComputeFrozenSizes(const Flux2Config& config, WeightQuant quantize, int compute_bytes);

}  // namespace baton

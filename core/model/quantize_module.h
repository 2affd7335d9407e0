// 8-bit frozen weights for a FLUX.2 module (a pipeline stage): which Linears switch to 8-bit storage, and
// how they are filled from a checkpoint one tensor at a time, so that the stage's peak memory is its 8-bit
// weights plus ONE full-precision tensor, never a full-precision copy of the stage.
#pragma once

#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/model/flux2_weights.h"
#include "core/quant/weight_quant.h"

namespace baton {

// The storage a stage uses, from the job's `quantize` and what the checkpoint holds:
//   requested none, checkpoint full precision → none;  requested int8|fp8, full precision → requested;
//   checkpoint pre-quantized, requested none or the same kind → the checkpoint's kind (its 8-bit weights are
//   used as stored: a pre-quantized checkpoint needs no `quantize:`);
//   requested int8 over an fp8 checkpoint (or the reverse) → InvalidArgument naming both and the path.
absl::StatusOr<WeightQuant> ResolveWeightQuant(WeightQuant requested, const Flux2Checkpoint& checkpoint);

// Switches every LoraLinear of `module` whose weight IsQuantizedFlux2Param to 8-bit storage of kind `q`
// (uninitialized; call before loading, before LoRA is attached). Returns how many switched.
int UseQuantizedFlux2Weights(torch::nn::Module& module, WeightQuant q);

// Fills the 8-bit weights of `module` (after UseQuantizedFlux2Weights) from `checkpoint`: a weight stored
// in 8 bits of the same kind is copied as stored; a full-precision one is read as fp32, quantized and
// dropped before the next. Missing or mis-shaped keys are errors naming the key and the checkpoint.
absl::Status LoadQuantizedFlux2Weights(torch::nn::Module& module, const Flux2Checkpoint& checkpoint);

// The same for any family: `quantized` picks the weights (diffusers names) that switch to 8 bits.
int UseQuantizedBlockWeights(torch::nn::Module& module, WeightQuant q,
                             const std::function<bool(const std::string& weight_name)>& quantized);
// Where LoadQuantizedWeights reads a family's weights: shapes, the stored 8-bit form (optional; nullopt = stored in
// full precision) and the fp32 weight, each by diffusers name; `path` names the checkpoint in errors.
struct WeightSource {
  std::string path;
  std::function<absl::StatusOr<std::vector<int64_t>>(const std::string&)> shape;
  std::function<absl::StatusOr<std::optional<QuantizedWeight>>(const std::string&)> load_quantized;
  std::function<absl::StatusOr<at::Tensor>(const std::string&)> load_fp32;
};
absl::Status LoadQuantizedWeights(torch::nn::Module& module, const WeightSource& source);

// Bytes of a module's frozen tensors as held (parameters and buffers that are not LoRA adapters).
int64_t FrozenBytes(torch::nn::Module& module);

}  // namespace baton

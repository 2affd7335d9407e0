// A bias-free Linear layer with a frozen weight and an optional adapter (PEFT semantics), plain LoRA:
//   y = x·Wᵀ + (alpha/rank) · B(A(dropout(x)))
// or DoRA, LoHa or LoKr (adapter_type.h), each under PEFT's parameter names.
// Every Linear inside the FLUX.2 blocks is one of these, so LoRA can target any of them by its diffusers
// name. The frozen weight never requires grad; the adapter matrices are fp32 whatever the compute dtype (the
// optimizer's masters) and are the only trainable parameters. Their math runs in fp32 or in the compute dtype.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/lora/adapter_type.h"
#include "core/quant/weight_quant.h"

namespace baton {

// Whether a module tensor name is an adapter's ("....lora_A.weight", "....hada_w1_a", ...), not a frozen weight.
bool IsLoraParameterName(const std::string& name);

class LoraLinearImpl : public torch::nn::Module {
 public:
  // Allocates an uninitialized [out, in] weight with `options` (use the meta device for shape-only models).
  LoraLinearImpl(int64_t in_features, int64_t out_features, const at::TensorOptions& options);

  at::Tensor forward(const at::Tensor& x);

  // Creates lora_A [rank, in] (Kaiming-uniform, a=√5, as PEFT; drawn from a generator seeded by `init_seed`)
  // and lora_B [out, rank] (zeros), both fp32 on the weight's device, requiring grad.
  void AttachLora(int64_t rank, double alpha, double dropout, uint64_t init_seed);
  // Attaches an adapter of `type` initialised as peft does (seeded as above): DoRA's magnitude is the frozen weight's
  // row norms; LoHa's w2_b and LoKr's w1 are zeros and the other factors Kaiming-uniform (a=√5). `dropout` must be
  // 0 for LoHa and LoKr (peft's have none); `lokr_factor` is LoKr's decompose_factor (-1: near √dim).
  void AttachAdapter(AdapterType type, int64_t rank, double alpha, double dropout, int64_t lokr_factor,
                     uint64_t init_seed);
  // Attaches an adapter of `type` holding fp32 copies of `tensors` (PEFT names after the module, the shapes a file
  // gives them) at `scale`: inference with a loaded file. Shapes are the caller's to check (AttachLoraWeights).
  void AttachAdapterTensors(AdapterType type, double scale, const std::map<std::string, at::Tensor>& tensors);
  bool has_lora() const { return !adapter_params_.empty(); }
  AdapterType adapter_type() const { return type_; }
  // The adapter's parameters by their name after the module ("lora_A.weight", "hada_w1_a", ...), fp32.
  const std::vector<std::pair<std::string, at::Tensor>>& adapter_parameters() const { return adapter_params_; }
  int64_t rank() const { return rank_; }
  double scale() const { return scale_; }
  at::Tensor& lora_A() { return lora_A_; }  // [rank, in] fp32
  at::Tensor& lora_B() { return lora_B_; }  // [out, rank] fp32

  // The dtype of the adapter's math. kFloat (the default): the adapters as stored, the input promoted to them (fp32
  // math over a bf16 base). Another dtype (the compute dtype, bf16): A and B cast to it inside the graph for each
  // forward, so the down and up projections run on tensor cores as PEFT's do (it casts adapters to the base dtype),
  // while the gradients flow back through the cast into the fp32 adapters and are summed over micro-batches in fp32.
  void set_math_dtype(at::ScalarType dtype) { math_dtype_ = dtype; }
  at::ScalarType math_dtype() const { return math_dtype_; }

  // Dropout masks are drawn from a generator seeded by (seed, this layer's id) so that a recomputed
  // forward, or the same micro-batch on another process, sees the same mask.
  void set_dropout_seed(uint64_t seed) { dropout_seed_ = seed; }
  void set_layer_id(uint64_t id) { layer_id_ = id; }

  // The frozen weight [out, in] in the compute dtype, as forward() multiplies by it: `weight` itself, or,
  // with 8-bit storage (quantize: int8 | fp8), `weight` dequantized here, one layer at a time, so a
  // full-precision copy of a whole stage never exists (the temporary lives for one matmul).
  at::Tensor frozen_weight() const;
  // x [..., in] · frozen_weight()ᵀ, as forward() computes it. With 8-bit storage the autograd graph keeps the
  // 8-bit weight, not its dequantized copy (core/quant/quantized_matmul.h), so a stage trained without
  // recompute still never holds a full-precision copy of its weights. Use this rather than
  // matmul(x, frozen_weight().t()) wherever a graph may be recorded.
  at::Tensor frozen_matmul(const at::Tensor& x) const;

  // Switches to 8-bit storage before any weight is loaded: the full-precision `weight` parameter is dropped
  // and `weight` becomes a buffer [out, in] int8 | float8_e4m3fn with a buffer `weight_scale` [out] fp32,
  // both uninitialized (the loader fills them) on the same device. Buffers: they never require grad and
  // never appear among the LoRA parameters. `q` must not be kNone; calling it twice is a bug.
  void UseQuantizedWeight(WeightQuant q);
  WeightQuant weight_quant() const { return quant_; }

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  at::Tensor weight;        // [out, in] frozen: the compute dtype, or 8-bit after UseQuantizedWeight
  at::Tensor weight_scale;  // [out] fp32 per-row scale; undefined unless 8-bit

 private:
  // y plus the adapter's delta for input x (generic path: any dtype, dropout, device).
  at::Tensor AddLora(const at::Tensor& x, at::Tensor y);
  // LoHa's or LoKr's factors (type_, rank_ set), initialised as peft does.
  void AttachFactors(int64_t lokr_factor, uint64_t init_seed);
  // y = x·Wᵀ with the adapter of any type applied.
  at::Tensor AddAdapter(const at::Tensor& x, const at::Tensor& y);
  at::Tensor AddDora(const at::Tensor& x, const at::Tensor& y);
  // x promoted to the adapter's math dtype, dropout-masked in training.
  at::Tensor AdapterInput(const at::Tensor& x) const;
  // An adapter parameter as the math uses it: as stored, or cast to math_dtype_ (a differentiable cast).
  at::Tensor Math(const at::Tensor& t) const;
  at::Tensor& Param(const std::string& name);

  int64_t in_features_, out_features_;
  at::ScalarType compute_dtype_;  // what frozen_weight() returns
  WeightQuant quant_ = WeightQuant::kNone;
  int64_t rank_ = 0;
  double scale_ = 0.0;
  double dropout_ = 0.0;
  uint64_t dropout_seed_ = 0;
  uint64_t layer_id_ = 0;
  at::ScalarType math_dtype_ = at::kFloat;
  at::Tensor lora_A_, lora_B_;
  AdapterType type_ = AdapterType::kLora;
  std::vector<std::pair<std::string, at::Tensor>> adapter_params_;
};
TORCH_MODULE(LoraLinear);

// Every LoraLinear in a module tree with its full name (e.g. "transformer_blocks.3.attn.to_q").
std::vector<std::pair<std::string, LoraLinear>> NamedLoraLinears(torch::nn::Module& root);

// LoRA dropout's keep mask (1 with probability `keep`, else 0) shaped and typed like `like` [...], on its device,
// a pure function of `seed` for a device kind. On the CPU: mt19937 over fp32, as every CPU run before drew it.
at::Tensor DropoutKeepMask(const at::Tensor& like, double keep, uint64_t seed);

}  // namespace baton

#include "core/lora/lora_linear.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>

#include <cmath>
#include <mutex>
#include <optional>

#include "core/lora/adapter_math.h"
#include "core/lora/cpu_linear.h"
#include "core/lora/lora_linear_function.h"
#include "core/quant/quantize_tensor.h"
#include "core/quant/quantized_matmul.h"
#include "core/util/seed.h"

namespace baton {

bool IsLoraParameterName(const std::string& name) { return IsAdapterParameterName(name); }

std::vector<std::pair<std::string, LoraLinear>> NamedLoraLinears(torch::nn::Module& root) {
  std::vector<std::pair<std::string, LoraLinear>> out;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    if (auto impl = std::dynamic_pointer_cast<LoraLinearImpl>(item.value())) {
      out.emplace_back(item.key(), LoraLinear(impl));
    }
  }
  return out;
}

at::Tensor DropoutKeepMask(const at::Tensor& like, double keep, uint64_t seed) {
  if (like.is_cpu()) {
    auto gen = at::detail::createCPUGenerator(seed);
    return at::bernoulli(at::full(like.sizes(), keep, at::kFloat), gen).to(like.scalar_type());
  }
  // Drawn where the activation lives (no host mask, no copy), from a generator of that device seeded by `seed` alone:
  // a recompute, a redo and a resumed step draw the same mask on the same kind of device (the kernel's launch shape
  // follows the device). These masks are not the CPU's (Philox on CUDA, mt19937 on the CPU): LoRA trained on a GPU
  // equals LoRA trained on the CPU only with dropout 0.
  std::optional<at::Generator> gen;
  if (!like.is_meta()) {  // meta tensors hold no values: nothing to draw
    at::Generator device_default = at::globalContext().defaultGenerator(like.device());
    std::lock_guard<std::mutex> lock(device_default.mutex());
    gen = device_default.clone();
    gen->set_current_seed(seed);
  }
  return at::empty(like.sizes(), like.options()).bernoulli_(keep, gen);
}

LoraLinearImpl::LoraLinearImpl(int64_t in_features, int64_t out_features, const at::TensorOptions& options)
    : in_features_(in_features), out_features_(out_features), compute_dtype_(options.dtype().toScalarType()) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options), /*requires_grad=*/false);
}

at::Tensor LoraLinearImpl::frozen_weight() const {
  if (quant_ == WeightQuant::kNone) return weight;
  return DequantizeWeight(weight, weight_scale, compute_dtype_);
}

at::Tensor LoraLinearImpl::frozen_matmul(const at::Tensor& x) const {
  if (quant_ == WeightQuant::kNone) return at::matmul(x, frozen_weight().t());
  return QuantizedMatmul(x, weight, weight_scale, compute_dtype_);
}

void LoraLinearImpl::UseQuantizedWeight(WeightQuant q) {
  TORCH_CHECK(q != WeightQuant::kNone && quant_ == WeightQuant::kNone, "UseQuantizedWeight: bad call");
  const at::Device device = weight.device();
  // parameters_ is the Module's own registry (public in libtorch); erasing drops the full-precision tensor
  // before it was ever written, so its pages were never touched.
  parameters_.erase("weight");
  weight = register_buffer("weight", at::empty({out_features_, in_features_},
                                               at::TensorOptions().dtype(QuantStorageDtype(q)).device(device)));
  weight_scale =
      register_buffer("weight_scale", at::empty({out_features_}, at::TensorOptions(at::kFloat).device(device)));
  quant_ = q;
}

void LoraLinearImpl::AttachLora(int64_t rank, double alpha, double dropout, uint64_t init_seed) {
  AttachAdapter(AdapterType::kLora, rank, alpha, dropout, -1, init_seed);
}

void LoraLinearImpl::AttachAdapter(AdapterType type, int64_t rank, double alpha, double dropout, int64_t lokr_factor,
                                   uint64_t init_seed) {
  TORCH_CHECK(adapter_params_.empty(), "AttachAdapter: this Linear already has an adapter");
  TORCH_CHECK(dropout == 0.0 || type == AdapterType::kLora || type == AdapterType::kDora,
              "AttachAdapter: ", AdapterTypeName(type), " has no input dropout");
  type_ = type;
  rank_ = rank;
  scale_ = alpha / static_cast<double>(rank);
  if (type != AdapterType::kLora && type != AdapterType::kDora) {
    AttachFactors(lokr_factor, init_seed);
    return;
  }
  dropout_ = dropout;
  // Generated on CPU so the values do not depend on the device.
  auto gen = at::detail::createCPUGenerator(init_seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features_));  // kaiming_uniform(a=√5)
  at::Tensor a = at::rand({rank, in_features_}, gen, at::kFloat).mul_(2 * bound).sub_(bound);
  auto opts = at::TensorOptions().dtype(at::kFloat).device(weight.device());
  // Submodules named lora_A / lora_B holding "weight", so parameter names read ...to_q.lora_A.weight (PEFT).
  auto holder_a = std::make_shared<torch::nn::Module>();
  auto holder_b = std::make_shared<torch::nn::Module>();
  lora_A_ = holder_a->register_parameter("weight", a.to(opts.device()), /*requires_grad=*/true);
  lora_B_ = holder_b->register_parameter("weight", at::zeros({out_features_, rank}, opts), /*requires_grad=*/true);
  register_module("lora_A", holder_a);
  register_module("lora_B", holder_b);
  adapter_params_ = {{"lora_A.weight", lora_A_}, {"lora_B.weight", lora_B_}};
  if (type == AdapterType::kDora) {
    at::NoGradGuard no_grad;
    at::Tensor magnitude =
        weight.is_meta() ? at::empty({out_features_}, opts) : DoraInitialMagnitude(frozen_weight()).to(opts.device());
    adapter_params_.emplace_back("lora_magnitude_vector",
                                 register_parameter("lora_magnitude_vector", magnitude, /*requires_grad=*/true));
  }
}

void LoraLinearImpl::AttachFactors(int64_t lokr_factor, uint64_t init_seed) {
  dropout_ = 0.0;
  // Drawn on the CPU in the order of AdapterParameterShapes, so the values do not depend on the device.
  auto gen = at::detail::createCPUGenerator(init_seed);
  for (const auto& [name, shape] : AdapterParameterShapes(type_, in_features_, out_features_, rank_, lokr_factor)) {
    const bool zeros = name == "hada_w2_b" || name == "lokr_w1";
    const double bound = 1.0 / std::sqrt(static_cast<double>(shape[1]));  // kaiming_uniform(a=√5), fan_in
    at::Tensor t = zeros ? at::zeros(shape, at::kFloat) : at::rand(shape, gen, at::kFloat).mul_(2 * bound).sub_(bound);
    adapter_params_.emplace_back(name, register_parameter(name, t.to(weight.device()), /*requires_grad=*/true));
  }
}

void LoraLinearImpl::AttachAdapterTensors(AdapterType type, double scale,
                                          const std::map<std::string, at::Tensor>& tensors) {
  TORCH_CHECK(adapter_params_.empty(), "AttachAdapterTensors: this Linear already has an adapter");
  auto opts = at::TensorOptions().dtype(at::kFloat).device(weight.device());
  at::NoGradGuard no_grad;
  if (type == AdapterType::kLora || type == AdapterType::kDora) {
    const int64_t r = tensors.at("lora_A.weight").size(0);
    AttachAdapter(type, r, scale * static_cast<double>(r), 0.0, -1, 0);
    for (auto& [name, t] : adapter_params_) t.copy_(tensors.at(name));
    return;
  }
  type_ = type;
  scale_ = scale;
  rank_ = type == AdapterType::kLoha ? tensors.at("hada_w1_b").size(0) : 0;
  for (const auto& [name, t] : tensors) {  // sorted: the order of AdapterParameterShapes
    adapter_params_.emplace_back(name, register_parameter(name, t.to(opts).clone(), /*requires_grad=*/true));
  }
}

at::Tensor& LoraLinearImpl::Param(const std::string& name) {
  for (auto& [n, t] : adapter_params_) {
    if (n == name) return t;
  }
  TORCH_CHECK(false, "no adapter parameter ", name);
}

at::Tensor LoraLinearImpl::Math(const at::Tensor& t) const {
  return math_dtype_ == at::kFloat || t.scalar_type() == math_dtype_ ? t : t.to(math_dtype_);
}

at::Tensor LoraLinearImpl::forward(const at::Tensor& x) {
  // 8-bit weights: the quantized matmul keeps only the 8-bit weight for backward (never a dequantized copy).
  if (quant_ != WeightQuant::kNone) return AddAdapter(x, frozen_matmul(x));
  const at::Tensor w = frozen_weight();
  const bool onednn = UsesOnednn(x, w);
  // The fused path covers the common case (adapter math in the compute dtype, no dropout); the rest stays generic.
  if (onednn && type_ == AdapterType::kLora && lora_A_.defined() && (dropout_ == 0.0 || !is_training())) {
    const at::Tensor a = Math(lora_A_);
    if (a.scalar_type() == x.scalar_type()) return LoraLinearOnednn(x, w, a, Math(lora_B_), scale_);
  }
  return AddAdapter(x, onednn ? FrozenLinearOnednn(x, w) : at::matmul(x, w.t()));
}

at::Tensor LoraLinearImpl::AddAdapter(const at::Tensor& x, const at::Tensor& y) {
  if (adapter_params_.empty()) return y;
  switch (type_) {
    case AdapterType::kLora:
      return AddLora(x, y);
    case AdapterType::kDora:
      return AddDora(x, y);
    case AdapterType::kLoha: {
      const at::Tensor dw = LohaDeltaWeight(Math(Param("hada_w1_a")), Math(Param("hada_w1_b")),
                                            Math(Param("hada_w2_a")), Math(Param("hada_w2_b")), scale_);
      return y + at::matmul(AdapterInput(x), dw.t()).to(y.scalar_type());
    }
    case AdapterType::kLokr: {
      const at::Tensor w1 = Math(Param("lokr_w1"));
      const bool full = adapter_params_.size() == 2;
      const at::Tensor w2 =
          full ? Math(Param("lokr_w2")) : at::matmul(Math(Param("lokr_w2_a")), Math(Param("lokr_w2_b")));
      return y + LokrDelta(AdapterInput(x), w1, w2, scale_).to(y.scalar_type());
    }
  }
  return y;
}

at::Tensor LoraLinearImpl::AdapterInput(const at::Tensor& x) const {
  // fp32 masters (fp64 in gradient checks) as stored, or the compute dtype.
  const at::ScalarType math = math_dtype_ == at::kFloat ? adapter_params_.front().second.scalar_type() : math_dtype_;
  at::Tensor h = x.to(at::promote_types(x.scalar_type(), math));
  if (dropout_ > 0.0 && is_training()) {
    h = h * DropoutKeepMask(h, 1.0 - dropout_, MixSeed(dropout_seed_, layer_id_)) / (1.0 - dropout_);
  }
  return h;
}

at::Tensor LoraLinearImpl::AddDora(const at::Tensor& x, const at::Tensor& y) {
  const at::Tensor a = Math(lora_A_), b = Math(lora_B_), m = Math(Param("lora_magnitude_vector"));
  const at::Tensor h = AdapterInput(x);
  const at::Tensor w = frozen_weight().to(h.scalar_type());
  const at::Tensor base = y.to(h.scalar_type());
  const bool dropped = dropout_ > 0.0 && is_training();
  const at::Tensor base_dropped = dropped ? at::matmul(h, w.t()) : base;
  return DoraOutput(base, base_dropped, h, w, a, b, m, scale_).to(y.scalar_type());
}

at::Tensor LoraLinearImpl::AddLora(const at::Tensor& x, at::Tensor y) {
  if (!lora_A_.defined()) return y;
  const at::Tensor a = Math(lora_A_), b = Math(lora_B_);
  const at::Tensor h = AdapterInput(x);
  at::Tensor delta = at::matmul(at::matmul(h, a.t()), b.t()) * scale_;
  return y + delta.to(y.scalar_type());
}

}  // namespace baton

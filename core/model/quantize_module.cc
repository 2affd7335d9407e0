#include "core/model/quantize_module.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "core/lora/lora_linear.h"
#include "core/model/flux2_model.h"
#include "core/quant/quantize_tensor.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<WeightQuant> ResolveWeightQuant(WeightQuant requested, const Flux2Checkpoint& checkpoint) {
  const WeightQuant stored = checkpoint.stored_quant();
  if (stored == WeightQuant::kNone || requested == WeightQuant::kNone || requested == stored) {
    return stored == WeightQuant::kNone ? requested : stored;
  }
  return absl::InvalidArgumentError(absl::StrCat("quantize: ", WeightQuantName(requested), " does not match ",
                                                 checkpoint.path(), ", which is pre-quantized as ",
                                                 WeightQuantName(stored), " (use quantize: ", WeightQuantName(stored),
                                                 " or none, or a full-precision checkpoint)"));
}

int UseQuantizedFlux2Weights(torch::nn::Module& module, WeightQuant q) {
  // Block linears (2-D weights inside transformer_blocks / single_transformer_blocks).
  return UseQuantizedBlockWeights(module, q, [](const std::string& weight_name) {
    return IsQuantizedFlux2Param(weight_name, {0, 0});
  });
}

absl::Status LoadQuantizedFlux2Weights(torch::nn::Module& module, const Flux2Checkpoint& checkpoint) {
  WeightSource source;
  source.path = checkpoint.path();
  source.shape = [&](const std::string& key) { return checkpoint.Shape(key); };
  source.load_quantized = [&](const std::string& key) { return checkpoint.LoadQuantized(key); };
  source.load_fp32 = [&](const std::string& key) { return checkpoint.Load(key, at::kFloat); };
  return LoadQuantizedWeights(module, source);
}

int UseQuantizedBlockWeights(torch::nn::Module& module, WeightQuant q,
                             const std::function<bool(const std::string& weight_name)>& quantized) {
  if (q == WeightQuant::kNone) return 0;
  int n = 0;
  for (auto& [name, linear] : NamedLoraLinears(module)) {
    if (!quantized(name + ".weight")) continue;
    linear->UseQuantizedWeight(q);
    ++n;
  }
  return n;
}

absl::Status LoadQuantizedWeights(torch::nn::Module& module, const WeightSource& source) {
  for (auto& [name, linear] : NamedLoraLinears(module)) {
    const WeightQuant q = linear->weight_quant();
    if (q == WeightQuant::kNone) continue;
    const std::string key = name + ".weight";
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, source.shape(key));
    if (shape != linear->weight.sizes().vec()) {
      return absl::InvalidArgumentError(absl::StrCat(source.path, ": ", key, " has shape ", ShapeString(shape),
                                                     ", the model expects ", ShapeString(linear->weight.sizes())));
    }
    std::optional<QuantizedWeight> stored;
    if (source.load_quantized) {
      ASSIGN_OR_RETURN(stored, source.load_quantized(key));
    }
    QuantizedWeight qw;
    if (stored) {
      ASSIGN_OR_RETURN(WeightQuant stored_kind, QuantOfStorageDtype(stored->data.scalar_type()));
      if (stored_kind != q) {
        return absl::InvalidArgumentError(absl::StrCat(source.path, ": ", key, " is stored as ",
                                                       WeightQuantName(stored_kind), ", the stage holds ",
                                                       WeightQuantName(q)));
      }
      qw = std::move(*stored);
    } else {
      // fp32: quantization must not depend on the compute dtype (the stored file is quantized the same way).
      ASSIGN_OR_RETURN(at::Tensor full, source.load_fp32(key));
      RETURN_IF_ERROR(TorchCall(key.c_str(), [&] { qw = QuantizeWeight(full, q); }));
    }
    RETURN_IF_ERROR(TorchCall(key.c_str(), [&, &linear = linear] {  // clang 14 cannot capture a binding
      linear->weight.copy_(qw.data);
      linear->weight_scale.copy_(qw.scale);
    }));
  }
  return absl::OkStatus();
}

int64_t FrozenBytes(torch::nn::Module& module) {
  int64_t bytes = 0;
  auto count = [&](const std::string& name, const at::Tensor& t) {
    if (IsLoraParameterName(name)) return;
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const auto& p : module.named_parameters()) count(p.key(), p.value());
  for (const auto& b : module.named_buffers()) count(b.key(), b.value());
  return bytes;
}

}  // namespace baton

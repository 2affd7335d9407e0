#include "core/model/stage_build.h"

#include <absl/strings/str_cat.h>

#include "core/lora/lora.h"
#include "core/lora/lora_linear.h"
#include "core/model/quantize_module.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {

at::Device StageBuildDevice(at::Device device, WeightQuant storage) {
  return storage == WeightQuant::kNone ? device : at::Device(at::kCPU);
}

FrozenTensors FrozenStageTensors(torch::nn::Module& module) {
  FrozenTensors frozen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!IsLoraParameterName(item.key())) frozen.emplace(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) frozen.emplace(item.key(), item.value());
  return frozen;
}

// Makes every frozen tensor of `module` (built, not loaded, without adapters) the same-named one of `shared`.
static absl::Status ShareFrozen(torch::nn::Module& module, const FrozenTensors& shared, const std::string& what) {
  FrozenTensors mine = FrozenStageTensors(module);
  if (mine.size() != shared.size()) {
    return absl::InternalError(
        absl::StrCat(what, ": ", mine.size(), " frozen tensors, the stage it shares holds ", shared.size()));
  }
  for (auto& [name, tensor] : mine) {
    auto it = shared.find(name);
    if (it == shared.end() || !it->second.sizes().equals(tensor.sizes()) ||
        it->second.scalar_type() != tensor.scalar_type()) {
      return absl::InternalError(absl::StrCat(what, ": frozen tensor ", name, " differs from the stage it shares"));
    }
    tensor.set_data(it->second);
  }
  return absl::OkStatus();
}

absl::Status BuildStageModule(const StageBuild& build, const std::string& what, at::ScalarType dtype, at::Device device,
                              WeightQuant storage, const LoraSpec* lora, bool train, const FrozenTensors* shared) {
  const at::Device build_device = shared ? at::Device(at::kCPU) : StageBuildDevice(device, storage);
  std::shared_ptr<torch::nn::Module> module;
  RETURN_IF_ERROR(TorchCall(absl::StrCat("building ", what).c_str(), [&] {
    module = build.construct(at::TensorOptions().dtype(dtype).device(build_device));
    UseQuantizedBlockWeights(*module, storage, build.quantized);
  }));
  if (shared) {
    absl::Status share;
    RETURN_IF_ERROR(TorchCall(absl::StrCat("sharing the frozen weights of ", what).c_str(),
                              [&] { share = ShareFrozen(*module, *shared, what); }));
    RETURN_IF_ERROR(share);
  } else {
    RETURN_IF_ERROR(build.load(*module));
  }
  if (build_device != device) {
    RETURN_IF_ERROR(
        TorchCall(absl::StrCat("moving ", what, " to ", device.str()).c_str(), [&] { module->to(device); }));
  }
  if (lora) {
    ASSIGN_OR_RETURN(int attached, AttachLora(*module, *lora));
    (void)attached;  // a stage may legitimately hold no targeted Linear (e.g. only embedders)
  }
  module->train(train);
  return absl::OkStatus();
}

}  // namespace baton

#include "core/model/stage_build.h"

#include <absl/strings/str_cat.h>

#include "core/lora/lora.h"
#include "core/model/quantize_module.h"
#include "core/util/status.h"

namespace baton {

at::Device StageBuildDevice(at::Device device, WeightQuant storage) {
  return storage == WeightQuant::kNone ? device : at::Device(at::kCPU);
}

absl::Status BuildStageModule(const StageBuild& build, const std::string& what, at::ScalarType dtype, at::Device device,
                              WeightQuant storage, const LoraSpec* lora, bool train) {
  const at::Device build_device = StageBuildDevice(device, storage);
  std::shared_ptr<torch::nn::Module> module;
  RETURN_IF_ERROR(TorchCall(absl::StrCat("building ", what).c_str(), [&] {
    module = build.construct(at::TensorOptions().dtype(dtype).device(build_device));
    UseQuantizedBlockWeights(*module, storage, build.quantized);
  }));
  RETURN_IF_ERROR(build.load(*module));
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

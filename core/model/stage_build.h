// The one way every family builds a stage module, so that an 8-bit stage (`quantize: int8 | fp8`) never exists on
// its device in full precision: its tensors are created on the CPU (where the full-precision weights it drops
// unwritten were never resident: large allocations are lazily mapped pages), switched to 8 bits, filled one tensor at
// a time, and only then moved. A full-precision stage is created on its device directly.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/quant/weight_quant.h"

namespace baton {

struct LoraSpec;

struct StageBuild {
  // Creates the module with uninitialized tensors of `options` (the family keeps its typed holder).
  std::function<std::shared_ptr<torch::nn::Module>(const at::TensorOptions& options)> construct;
  // The frozen weights (diffusers names) stored in 8 bits when the stage is quantized.
  std::function<bool(const std::string& weight_name)> quantized;
  // Fills every frozen tensor, full-precision and 8-bit, on the device the module was created on.
  std::function<absl::Status(torch::nn::Module& module)> load;
};

// A built stage's frozen tensors (every parameter and buffer but the adapters', by module path): what another stage of
// the same model, blocks, dtype, quantization and device shares instead of loading its own copy (many LoRAs on one
// loaded model: each holds its own adapters over one copy of the base).
using FrozenTensors = std::map<std::string, at::Tensor>;
FrozenTensors FrozenStageTensors(torch::nn::Module& module);

// The device a stage's tensors are created and filled on: `device` in full precision, else the CPU.
at::Device StageBuildDevice(at::Device device, WeightQuant storage);

// Creates (on StageBuildDevice), switches the `quantized` weights to `storage`, loads, moves to `device`, attaches
// `lora` (null: none) and sets train/eval. Errors name `what` ("the FLUX.2 stage"). With `shared` (FrozenStageTensors
// of a stage built with the same arguments) nothing is loaded: the module is created on the CPU (its untouched pages
// are never resident) and every frozen tensor is made the shared one; only the adapters are new.
absl::Status BuildStageModule(const StageBuild& build, const std::string& what, at::ScalarType dtype, at::Device device,
                              WeightQuant storage, const LoraSpec* lora, bool train,
                              const FrozenTensors* shared = nullptr);

}  // namespace baton

// The whole transformer in this process, with a LoRA file's adapters attached (--lora, --lora-scale): what
// `baton sample` denoises with when it drives no stage workers (FLUX.2 images and Wan videos alike).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <memory>

#include "client/args.h"
#include "core/model/model_family.h"

namespace baton {

// Named apart from core/train/local_step.h's LocalModel (one name, two layouts, would break the one-definition rule).
struct LoadedModel {
  std::unique_ptr<ModelFamily> family;
  std::unique_ptr<ShellModel> shell;
  std::unique_ptr<StageModel> stage;
};

// --model's family, shell and one stage holding every block on the CPU in `dtype`; --lora attached at --lora-scale.
absl::StatusOr<LoadedModel> OpenLocalModel(const Args& args, at::ScalarType dtype);
// `model` (a folder or file OpenModel takes) with `lora` ("" = none) attached at `lora_scale`.
absl::StatusOr<LoadedModel> OpenLocalModelAt(const std::string& model, const std::string& lora, double lora_scale,
                                             at::ScalarType dtype);

}  // namespace baton

// Starting a job's LoRA from a file (job key `init_lora`) instead of the seeded init. Both trainers call this
// on their fp32 master weights: `baton train-local` after building its stage, the coordinator after collecting
// the stages' adapters. The file (diffusers/PEFT or BFL/ComfyUI, anything LoadLoraFile reads) must hold exactly
// the adapters the job's `lora` spec attaches, at its rank; the file's scale is folded into lora_B so the job's
// own alpha/r gives the same ΔW.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <map>
#include <string>

#include "core/lora/lora.h"

namespace baton {

// `seeded`: the job's adapter parameters by PEFT name (as from LoraParameters), giving the expected names and
// shapes. Returns the file's weights under the same names and shapes. Any mismatch (a module only one side
// has, another rank, other in/out sizes) is an InvalidArgument error naming the file and the modules.
absl::StatusOr<std::map<std::string, at::Tensor>> LoadInitLora(const std::string& path, const LoraSpec& spec,
                                                               const std::map<std::string, at::Tensor>& seeded);

}  // namespace baton

// A LoRA file rewritten between the diffusers/PEFT naming and the original/ComfyUI naming (BFL for FLUX.2), the model
// family told from the keys. Wan files may also be kohya/musubi ("lora_unet_…" with ".alpha"); the output always has
// alpha/rank folded into lora_B. `baton lora-convert` and the browser view's BFL/ComfyUI download use it.
#pragma once

#include <absl/status/statusor.h>

#include <string>

namespace baton {

// Reads `in`, writes `out` in `to` naming ("diffusers" or "original"); returns what it wrote, in words
// ("412 FLUX.2 LoRA adapters in BFL/original naming").
absl::StatusOr<std::string> ConvertLoraFile(const std::string& in, const std::string& out, const std::string& to);

}  // namespace baton

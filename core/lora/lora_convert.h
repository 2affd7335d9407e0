// A LoRA file rewritten between Baton's own naming (diffusers/PEFT for lora and dora, LyCORIS for loha and lokr) and
// the original/ComfyUI naming (BFL for FLUX.2; original_adapters.h), the model family told from the keys. Wan files
// may also be kohya/musubi ("lora_unet_…" with ".alpha"); the output always has each scale folded into its linear
// factor. `baton lora-convert` and the browser view's BFL/ComfyUI download use it.
#pragma once

#include <absl/status/statusor.h>

#include <string>

namespace baton {

// Reads `in`, writes `out` in `to` naming ("diffusers": Baton's own, or "original"); returns what it wrote, in words
// ("412 FLUX.2 LoRA adapters in BFL/original naming", "28 FLUX.2 LoHa adapters in original (ComfyUI) naming").
absl::StatusOr<std::string> ConvertLoraFile(const std::string& in, const std::string& out, const std::string& to);

}  // namespace baton

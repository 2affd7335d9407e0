// `baton lora-convert --in FILE --out FILE --to diffusers|original`: rewrites a LoRA file between the diffusers/PEFT
// naming and the original/ComfyUI naming (BFL for FLUX.2), the model family told from the keys. Wan files may also
// be kohya/musubi ("lora_unet_…" with ".alpha"); the output always has alpha/rank folded into lora_B.
#pragma once

#include "client/commands.h"

namespace baton {

Command LoraConvertCommand();

}  // namespace baton

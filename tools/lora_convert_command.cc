#include "tools/lora_convert_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>
#include <string>

#include "core/lora/lora_convert.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::Status LoraConvert(const Args& args) {
  const std::string in = args.Get("in"), out = args.Get("out"), to = args.Get("to");
  if (to != "diffusers" && to != "original") {
    return absl::InvalidArgumentError(absl::StrCat("--to must be diffusers or original, not '", to, "'"));
  }
  ASSIGN_OR_RETURN(std::string wrote, ConvertLoraFile(in, out, to));
  std::printf("wrote %s: %s\n", out.c_str(), wrote.c_str());
  return absl::OkStatus();
}

}  // namespace

Command LoraConvertCommand() {
  return {"lora-convert",
          "Rewrite a LoRA file (Wan or FLUX.2, told from its keys) in diffusers or original/ComfyUI naming.",
          {{"in",
            "LoRA .safetensors (lora, dora, loha, lokr): diffusers/PEFT, LyCORIS (lycoris_), original/ComfyUI "
            "(diffusion_model.) or kohya (lora_unet_)",
            "", true},
           {"out", "output .safetensors", "", true},
           {"to", "diffusers (Baton's own: LyCORIS for loha and lokr) | original", "", true}},
          LoraConvert};
}

}  // namespace baton

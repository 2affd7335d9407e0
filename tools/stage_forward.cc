#include "tools/stage_forward.h"

#include <cstdio>
#include <string>

#include "core/lora/lora.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {

absl::Status AttachLoraFromArgs(const Args& args, StageModel& stage) {
  if (!args.Has("lora")) return absl::OkStatus();
  ASSIGN_OR_RETURN(double lora_scale, args.GetDouble("lora-scale"));
  ASSIGN_OR_RETURN(auto lora, LoadLoraFile(args.Get("lora")));
  auto attached = AttachLoraWeights(stage.module(), lora, lora_scale);
  if (!attached.ok()) return Annotate(attached.status(), args.Get("lora"));
  std::printf("applied %d LoRA adapters from %s (scale %g)\n", *attached, args.Get("lora").c_str(), lora_scale);
  return absl::OkStatus();
}

absl::Status ForwardAndWriteOutput(const Args& args, StageModel& stage, const ShellOutputs& shell_out,
                                   absl::string_view note) {
  TensorMap constants = shell_out.constants;
  for (const auto& [name, table] : shell_out.tables) constants[name] = table;
  at::Tensor out;
  RETURN_IF_ERROR(TorchCall("forward", [&] {
    at::NoGradGuard no_grad;
    out = stage.Forward(shell_out.inputs, constants).at("output");
  }));
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), {{"output", out}}));
  std::printf("wrote %s: output %s %s%s\n", args.Get("output").c_str(), ShapeString(out.sizes()).c_str(),
              args.Get("dtype").c_str(), std::string(note).c_str());
  return absl::OkStatus();
}

}  // namespace baton

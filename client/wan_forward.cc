#include "client/wan_forward.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cstdio>

#include "core/lora/lora.h"
#include "core/model/wan_family.h"
#include "core/tensor/safetensors.h"
#include "core/train/common.h"
#include "core/util/status.h"
#include "core/util/threads.h"

namespace baton {

absl::Status WanForward(const Args& args) {
  SetComputeThreads(1);
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  ASSIGN_OR_RETURN(WeightQuant quant, ParseWeightQuant(args.Get("quantize")));
  const std::string expert = args.Get("expert");
  if (expert != "high" && expert != "low") return absl::InvalidArgumentError("--expert must be high or low");
  ASSIGN_OR_RETURN(auto model, OpenWanModel(args.Get("model"), args.Get("config"),
                                            expert == "low" ? WanExpert::kLowNoise : WanExpert::kDefault));
  ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("inputs")));
  ASSIGN_OR_RETURN(auto shell, model->BuildShell(dtype, at::kCPU));
  const StageRange full{0, model->num_blocks(), true, true};
  ASSIGN_OR_RETURN(auto stage, model->BuildStage(full, dtype, at::kCPU, nullptr, false, quant));
  if (args.Has("lora")) {
    ASSIGN_OR_RETURN(double lora_scale, args.GetDouble("lora-scale"));
    ASSIGN_OR_RETURN(auto lora, LoadLoraFile(args.Get("lora")));
    auto attached = AttachLoraWeights(stage->module(), lora, lora_scale);
    if (!attached.ok()) return Annotate(attached.status(), args.Get("lora"));
    std::printf("applied %d LoRA adapters from %s (scale %g)\n", *attached, args.Get("lora").c_str(), lora_scale);
  }
  auto shell_out = shell->Run(inputs, dtype);
  if (!shell_out.ok()) return Annotate(shell_out.status(), args.Get("inputs"));
  TensorMap constants = shell_out->constants;
  constants.insert(shell_out->tables.begin(), shell_out->tables.end());
  at::Tensor out;
  RETURN_IF_ERROR(TorchCall("forward", [&] {
    at::NoGradGuard no_grad;
    out = stage->Forward(shell_out->inputs, constants).at("output");
  }));
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), {{"output", out}}));
  std::printf("wrote %s: output [%s] %s (wan)\n", args.Get("output").c_str(), absl::StrJoin(out.sizes(), ", ").c_str(),
              args.Get("dtype").c_str());
  return absl::OkStatus();
}

}  // namespace baton

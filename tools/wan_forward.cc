#include "tools/wan_forward.h"

#include "core/device/threads.h"
#include "core/model/wan_family.h"
#include "core/tensor/safetensors.h"
#include "core/train/common.h"
#include "core/util/status.h"
#include "tools/stage_forward.h"

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
  ASSIGN_OR_RETURN(auto stage, model->BuildStage(model->FullRange(), dtype, at::kCPU, nullptr, false, quant));
  RETURN_IF_ERROR(AttachLoraFromArgs(args, *stage));
  auto shell_out = shell->Run(inputs, dtype);
  if (!shell_out.ok()) return Annotate(shell_out.status(), args.Get("inputs"));
  return ForwardAndWriteOutput(args, *stage, *shell_out, " (wan)");
}

}  // namespace baton

#include "client/local_model.h"

#include "core/lora/lora.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<LoadedModel> OpenLocalModel(const Args& args, at::ScalarType dtype) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.family, OpenModel(args.Get("model")));
  ASSIGN_OR_RETURN(m.shell, m.family->BuildShell(dtype, at::kCPU));
  ASSIGN_OR_RETURN(m.stage,
                   m.family->BuildStage(m.family->FullRange(), dtype, at::kCPU, nullptr, false, WeightQuant::kNone));
  if (args.Has("lora")) {
    ASSIGN_OR_RETURN(double scale, args.GetDouble("lora-scale"));
    ASSIGN_OR_RETURN(auto lora, LoadLoraFile(args.Get("lora")));
    auto attached = AttachLoraWeights(m.stage->module(), lora, scale);
    if (!attached.ok()) return Annotate(attached.status(), args.Get("lora"));
  }
  return m;
}

}  // namespace baton

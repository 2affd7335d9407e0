#include "tools/local_model.h"

#include "core/lora/lora.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<LoadedModel> OpenLocalModel(const Args& args, at::ScalarType dtype) {
  ASSIGN_OR_RETURN(double scale, args.GetDouble("lora-scale"));
  return OpenLocalModelAt(args.Get("model"), args.Has("lora") ? args.Get("lora") : "", scale, dtype);
}

absl::StatusOr<LoadedModel> OpenLocalModelAt(const std::string& model, const std::string& lora_file, double lora_scale,
                                             at::ScalarType dtype) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.family, OpenModel(model));
  ASSIGN_OR_RETURN(m.shell, m.family->BuildShell(dtype, at::kCPU));
  ASSIGN_OR_RETURN(m.stage,
                   m.family->BuildStage(m.family->FullRange(), dtype, at::kCPU, nullptr, false, WeightQuant::kNone));
  if (!lora_file.empty()) {
    ASSIGN_OR_RETURN(auto lora, LoadLoraFile(lora_file));
    auto attached = AttachLoraWeights(m.stage->module(), lora, lora_scale);
    if (!attached.ok()) return Annotate(attached.status(), lora_file);
  }
  return m;
}

}  // namespace baton

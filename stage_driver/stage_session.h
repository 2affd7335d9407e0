// A forward-only session over stage workers outside any training run: `baton sample --stages N` (or --workers) tries
// an adapter on a model too large for one process. The blocks are planned for the sample's tokens, the workers
// started (or connected) and configured as a training run's would be, the adapter of a LoRA file pushed to them, and
// the session serves a Denoiser (core/sample/denoiser.h) through forward-only passes.
#pragma once

#include <absl/status/statusor.h>

#include <map>
#include <memory>
#include <string>

#include "core/model/model_family.h"
#include "stage_driver/driver_options.h"
#include "stage_driver/stage_denoiser.h"
#include "stage_driver/stage_pipeline.h"
#include "stage_driver/stage_plan.h"

namespace baton {

struct StageSessionOptions {
  std::string model, model_config;
  // A LoRA file (diffusers/PEFT or BFL/ComfyUI keys; any ranks and alphas); empty: the base model.
  std::string lora;
  std::string dtype = "fp32", quantize = "none";
  int threads = 1;
  int micro_batches = 1;  // per pass (the Denoiser splits larger calls)
  SampleTokens tokens;    // one sample's tokens, for the planner
};

class StageSession {
 public:
  static absl::StatusOr<std::unique_ptr<StageSession>> Start(const StageSessionOptions& session,
                                                             const StageDriverOptions& options);
  ~StageSession();

  const ModelFamily& family() const { return *model_; }
  Denoiser denoiser() { return denoiser_->AsDenoiser(); }
  // Shuts local workers down (the destructor does it too, ignoring errors).
  absl::Status Stop();

 private:
  StageSession() = default;
  // What the stages hold: the model, and a LoRA spec that fits every module of the file.
  absl::Status MakeSpec(const StageSessionOptions& session);

  PipelineSpec spec_;
  StageDriverOptions options_;
  at::ScalarType dtype_ = at::kFloat;
  std::unique_ptr<ModelFamily> model_;
  std::unique_ptr<ShellModel> shell_;  // the frozen shell, on the CPU
  std::unique_ptr<StagePipeline> pipeline_;
  std::map<std::string, at::Tensor> master_;       // the adapter, PEFT names, padded to one rank
  std::map<std::string, at::Tensor> file_params_;  // from the LoRA file (empty: the stages' zero-B init)
  std::unique_ptr<StageDenoiser> denoiser_;
  bool stopped_ = false;
};

}  // namespace baton

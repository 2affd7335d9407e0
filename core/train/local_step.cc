#include "core/train/local_step.h"

#include "core/lora/lora.h"
#include "core/train/common.h"
#include "core/train/finite_check.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<LocalGradients> RunLocalForwardBackward(LocalModel& model,
                                                       const std::vector<MicroBatch>& micro_batches) {
  const at::Device device = model.device;
  const at::ScalarType dtype = model.dtype;
  LocalGradients out;
  for (const MicroBatch& mb : micro_batches) {
    TensorMap model_inputs;
    RETURN_IF_ERROR(TorchCall("moving the inputs", [&] {
      for (const auto& [name, t] : mb.model_inputs) model_inputs[name] = t.to(device);
    }));
    // The frozen shell (no graph): the stage's inputs, its constants and tables, which the stage takes merged.
    ASSIGN_OR_RETURN(ShellOutputs shell, model.shell->Run(model_inputs, dtype));
    TensorMap constants = shell.constants;
    for (const auto& [name, t] : shell.tables) constants[name] = t;
    RETURN_IF_ERROR(TorchCall("training step", [&] {
      SetLoraDropoutSeed(model.stage->module(), mb.dropout_seed);
      at::Tensor loss =
          FlowMatchingLoss(model.stage->Forward(shell.inputs, constants).at("output"), mb.target, mb.loss_mask);
      // The same float scale the pipeline's StepPlan.loss_scale carries, so both paths round alike.
      const float loss_scale = 1.0f / static_cast<float>(micro_batches.size());
      (loss * static_cast<double>(loss_scale)).backward();
      out.losses.push_back(loss.item<double>());
      out.samples += static_cast<int64_t>(mb.samples.size());
    }));
  }
  out.grads = CloneToCpuFloat(LoraGradients(model.stage->module()));
  ZeroLoraGradients(model.stage->module());
  return out;
}

absl::StatusOr<LocalStepResult> RunLocalStep(LocalModel& model, const std::vector<MicroBatch>& micro_batches,
                                             int64_t step, const OptimizerConfig& optimizer_config, AdamW& optimizer,
                                             std::map<std::string, at::Tensor>& master) {
  ASSIGN_OR_RETURN(LocalGradients g, RunLocalForwardBackward(model, micro_batches));
  LocalStepResult result;
  result.samples = g.samples;
  result.lr = LearningRate(optimizer_config, step);
  RETURN_IF_ERROR(CheckStepFinite(step + 1, result.lr, g.losses, 0, {g.grads}));
  double loss_sum = 0.0;
  for (double l : g.losses) loss_sum += l;  // the same order of additions as before
  result.loss = loss_sum / static_cast<double>(micro_batches.size());
  result.grad_norm = ClipGradNorm(g.grads, optimizer_config.clip);
  RETURN_IF_ERROR(optimizer.Step(master, g.grads, result.lr));
  RETURN_IF_ERROR(AssignLoraParameters(model.stage->module(), master));
  return result;
}

}  // namespace baton

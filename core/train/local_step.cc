#include "core/train/local_step.h"

#include "core/lora/lora.h"
#include "core/train/common.h"
#include "core/train/finite_check.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<LocalStepResult> RunLocalStep(LocalModel& model, const std::vector<MicroBatch>& micro_batches,
                                             int64_t step, const OptimizerConfig& optimizer_config, AdamW& optimizer,
                                             std::map<std::string, at::Tensor>& master) {
  const at::Device device = model.device;
  const at::ScalarType dtype = model.dtype;
  LocalStepResult result;
  std::vector<double> micro_batch_losses;
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
      at::Tensor loss = FlowMatchingLoss(model.stage->Forward(shell.inputs, constants).at("output"), mb.target);
      // The same float scale the pipeline's StepPlan.loss_scale carries, so both paths round alike.
      const float loss_scale = 1.0f / static_cast<float>(micro_batches.size());
      (loss * static_cast<double>(loss_scale)).backward();
      micro_batch_losses.push_back(loss.item<double>());
      result.samples += static_cast<int64_t>(mb.samples.size());
    }));
  }
  std::map<std::string, at::Tensor> grads = CloneToCpuFloat(LoraGradients(model.stage->module()));
  ZeroLoraGradients(model.stage->module());
  result.lr = LearningRate(optimizer_config, step);
  RETURN_IF_ERROR(CheckStepFinite(step + 1, result.lr, micro_batch_losses, 0, {grads}));
  double loss_sum = 0.0;
  for (double l : micro_batch_losses) loss_sum += l;  // the same order of additions as before
  result.loss = loss_sum / static_cast<double>(micro_batches.size());
  result.grad_norm = ClipGradNorm(grads, optimizer_config.clip);
  RETURN_IF_ERROR(optimizer.Step(master, grads, result.lr));
  RETURN_IF_ERROR(AssignLoraParameters(model.stage->module(), master));
  return result;
}

}  // namespace baton

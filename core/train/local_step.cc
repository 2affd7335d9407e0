#include "core/train/local_step.h"

#include "core/device/readback.h"
#include "core/lora/lora.h"
#include "core/tensor/torch_call.h"
#include "core/train/common.h"
#include "core/train/finite_check.h"
#include "core/train/grad_norm.h"
#include "core/train/lr_schedule.h"
#include "core/util/status.h"

namespace baton {
namespace {

// A micro-batch's tensors on the model's device: its floating inputs, target, loss mask and weighting, each copied
// once from pinned memory on the transfer's side stream (no synchronization; the compute stream waits for the copy
// on the device). Integer metadata (FLUX.2's position ids, Wan's grid) stays on the host, where the shell reads it
// as numbers: on a device every read would be a synchronization.
MicroBatch Uploaded(DeviceTransfer& transfer, const MicroBatch& mb) {
  MicroBatch out = mb;
  auto up = [&](const at::Tensor& t) { return t.defined() ? transfer.Upload(t) : t; };
  for (auto& [name, t] : out.model_inputs) {
    if (t.is_floating_point()) t = up(t);
  }
  out.target = up(mb.target);
  out.loss_mask = up(mb.loss_mask);
  out.loss_weighting = up(mb.loss_weighting);
  return out;
}

// The forward and backward passes of every micro-batch: the gradients of the mean loss summed into the adapters'
// .grad, each micro-batch's loss as a device scalar (fp32). Nothing is read back. The next micro-batch's upload is
// queued once this one's passes are, so on a GPU it travels while they compute.
absl::StatusOr<std::vector<at::Tensor>> ForwardBackward(LocalModel& model, const std::vector<MicroBatch>& micro_batches,
                                                        int64_t& samples) {
  const at::ScalarType dtype = model.dtype;
  if (!model.transfer) model.transfer = std::make_unique<DeviceTransfer>(model.device);
  std::vector<at::Tensor> losses;
  MicroBatch next;
  RETURN_IF_ERROR(TorchCall("uploading the inputs", [&] {
    if (!micro_batches.empty()) next = Uploaded(*model.transfer, micro_batches[0]);
  }));
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const MicroBatch mb = std::move(next);
    // The frozen shell (no graph): the stage's inputs, its constants and tables, which the stage takes merged.
    ASSIGN_OR_RETURN(ShellOutputs shell, model.shell->Run(mb.model_inputs, dtype));
    TensorMap constants = shell.constants;
    for (const auto& [name, t] : shell.tables) constants[name] = t;
    RETURN_IF_ERROR(TorchCall("training step", [&] {
      SetLoraDropoutSeed(model.stage->module(), mb.dropout_seed);
      at::Tensor loss = FlowMatchingLoss(model.stage->Forward(shell.inputs, constants).at("output"), mb.target,
                                         mb.loss_mask, mb.loss_weighting);
      // The same float scale the pipeline's StepPlan.loss_scale carries, so both paths round alike.
      const float loss_scale = 1.0f / static_cast<float>(micro_batches.size());
      (loss * static_cast<double>(loss_scale)).backward();
      losses.push_back(loss.detach().to(at::kFloat));
      samples += static_cast<int64_t>(mb.samples.size());
      if (i + 1 < micro_batches.size()) next = Uploaded(*model.transfer, micro_batches[i + 1]);
    }));
  }
  return losses;
}

}  // namespace

absl::StatusOr<LocalGradients> RunLocalForwardBackward(LocalModel& model,
                                                       const std::vector<MicroBatch>& micro_batches) {
  LocalGradients out;
  ASSIGN_OR_RETURN(std::vector<at::Tensor> losses, ForwardBackward(model, micro_batches, out.samples));
  const at::Tensor host = ReadBack(at::stack(losses));
  for (int64_t i = 0; i < host.numel(); ++i) out.losses.push_back(host[i].item<double>());
  out.grads = CloneToCpuFloat(LoraGradients(model.stage->module()));
  ZeroLoraGradients(model.stage->module());
  return out;
}

absl::StatusOr<LocalStepResult> RunLocalStep(LocalModel& model, const std::vector<MicroBatch>& micro_batches,
                                             int64_t step, int64_t total_steps, const OptimizerConfig& optimizer_config,
                                             Optimizer& optimizer, std::map<std::string, at::Tensor>& master) {
  LocalStepResult result;
  ASSIGN_OR_RETURN(std::vector<at::Tensor> losses, ForwardBackward(model, micro_batches, result.samples));
  std::map<std::string, at::Tensor> grads = LoraGradients(model.stage->module());
  std::vector<at::Tensor> grad_list;
  for (const auto& [name, g] : grads) grad_list.push_back(g);
  // The step's one readback: the losses and the gradients' squared norms, in one small copy.
  const int64_t m = static_cast<int64_t>(losses.size());
  at::Tensor host;
  RETURN_IF_ERROR(TorchCall("reading the step's losses and norms", [&] {
    host = ReadBack(at::cat({at::stack(losses).to(at::kDouble), SquaredNorms(grad_list)}));
  }));
  const double* values = host.data_ptr<double>();
  std::vector<double> loss_values(values, values + m);
  std::map<std::string, double> squared;
  int64_t i = m;
  for (const auto& [name, g] : grads) squared[name] = values[i++];
  result.lr = LearningRate(optimizer_config, step, total_steps);
  RETURN_IF_ERROR(CheckStepFinite(step + 1, result.lr, loss_values, 0, {squared}));
  double loss_sum = 0.0;
  for (double l : loss_values) loss_sum += l;  // the same order of additions as before
  result.loss = loss_sum / static_cast<double>(micro_batches.size());
  result.grad_norm = GlobalNorm(squared);
  RETURN_IF_ERROR(TorchCall("the optimizer step", [&] {
    absl::Status stepped = ClipAndStep(optimizer, optimizer_config.clip, result.grad_norm, master, grads, result.lr);
    TORCH_CHECK(stepped.ok(), std::string(stepped.message()));
  }));
  ZeroLoraGradients(model.stage->module());
  return result;
}

}  // namespace baton

#include "core/sample/model_denoiser.h"

#include "core/tensor/torch_call.h"
#include "core/train/common.h"
#include "core/util/status.h"

namespace baton {

Denoiser ModelDenoiser(const ModelFamily& family, ShellModel& shell, StageModel& stage, at::ScalarType dtype,
                       at::Device device) {
  return [&family, &shell, &stage, dtype,
          device](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
    at::NoGradGuard no_grad;
    torch::nn::Module& module = stage.module();
    const bool was_training = module.is_training();
    module.eval();  // no LoRA dropout
    std::vector<at::Tensor> outputs;
    absl::Status status = absl::OkStatus();
    for (const NoisyBatch& batch : batches) {
      absl::StatusOr<TensorMap> inputs = family.MicroBatchInputs(batch);
      if (!inputs.ok()) {
        status = inputs.status();
        break;
      }
      TensorMap on_device;
      status = TorchCall("moving the inputs", [&] {
        for (const auto& [name, t] : *inputs) on_device[name] = t.is_floating_point() ? t.to(device) : t;
      });
      if (!status.ok()) break;
      absl::StatusOr<ShellOutputs> shell_out = shell.Run(on_device, dtype);
      if (!shell_out.ok()) {
        status = shell_out.status();
        break;
      }
      TensorMap constants = shell_out->constants;
      for (const auto& [name, t] : shell_out->tables) constants[name] = t;
      status = TorchCall("forward", [&] {
        outputs.push_back(stage.Forward(shell_out->inputs, constants).at("output").to(at::kFloat));
      });
      if (!status.ok()) break;
    }
    module.train(was_training);
    if (!status.ok()) return status;
    return outputs;
  };
}

}  // namespace baton

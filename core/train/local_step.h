// One optimizer step of the single-process trainer on micro-batches already drawn: per micro-batch the shell's
// constants (no grad), the stage's forward with LoRA, the flow-matching loss and its backward (scaled by 1/m, as the
// pipeline's StepPlan.loss_scale scales it); then clipping and AdamW on the adapters themselves (the fp32 masters),
// all on the model's device, with one readback per step (the losses and the gradients' squared norms together).
// `baton train-local` runs it every step; bench/bench_vs_pytorch times exactly this function against PyTorch.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device/transfer.h"
#include "core/model/model_family.h"
#include "core/train/batches.h"
#include "core/train/job.h"
#include "core/train/optimizer.h"

namespace baton {

// The whole model of one process, LoRA attached to `stage`.
struct LocalModel {
  std::unique_ptr<ShellModel> shell;
  std::unique_ptr<StageModel> stage;  // every block, the embedders and the head
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  std::unique_ptr<DeviceTransfer> transfer;  // the micro-batches' uploads; made on the first step
};

struct LocalStepResult {
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t samples = 0;
};

// The forward and backward passes of one step without the optimizer: each micro-batch's loss and the fp32 LoRA
// gradients of their mean (the adapters' .grad is zeroed again). `baton step-grads` hands them to the referees.
struct LocalGradients {
  std::vector<double> losses;  // per micro-batch
  std::map<std::string, at::Tensor> grads;
  int64_t samples = 0;
};
absl::StatusOr<LocalGradients> RunLocalForwardBackward(LocalModel& model, const std::vector<MicroBatch>& micro_batches);

// `step` is 0-based; with the run's `total_steps` it picks the learning rate (LearningRate). `master` holds the fp32
// LoRA masters by PEFT name: the stage's adapter parameters themselves (LoraParameters), updated in place on their
// device.
absl::StatusOr<LocalStepResult> RunLocalStep(LocalModel& model, const std::vector<MicroBatch>& micro_batches,
                                             int64_t step, int64_t total_steps, const OptimizerConfig& optimizer_config,
                                             Optimizer& optimizer, std::map<std::string, at::Tensor>& master);

}  // namespace baton

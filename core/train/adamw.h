// AdamW on fp32 master weights, where they live: libtorch's fused AdamW kernel (the one torch.optim.AdamW(fused=True)
// runs) over every parameter at once, on the CPU or the GPU. Elementwise, so a parameter's update does not depend on
// which others share the call: the coordinator, `baton train-local` and the stages' own optimizers agree bitwise.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/train/grad_norm.h"
#include "core/train/job.h"

namespace baton {

// The names of AdamW's state (StateDict): "<param>.exp_avg" and "<param>.exp_avg_sq" for each stepped parameter, and
// the step count.
inline constexpr char kAdamWStepKey[] = "__step__";
std::vector<std::string> MomentKeys(const std::string& param);
// The parameter a moment key belongs to; "" for the step count or any other key.
std::string MomentParam(const std::string& key);

// Learning rate of optimizer step `step` (0-based) of a run of `total_steps`: opt.lr times diffusers' schedule
// (get_scheduler's lr_lambda for opt.schedule, num_training_steps = total_steps) after `step` scheduler steps, as a
// diffusers trainer that steps its scheduler after each optimizer step runs it (a warm-up's first step runs at 0).
double LearningRate(const OptimizerConfig& opt, int64_t step, int64_t total_steps);
// The schedules LearningRate knows (diffusers' names).
const std::vector<std::string>& LearningRateSchedules();

class AdamW {
 public:
  explicit AdamW(const OptimizerConfig& opt) : opt_(opt) {}

  // One update of `params` (fp32, modified in place, all on one device) from `grads` (same names, fp32; moved to the
  // params' device when elsewhere) at learning rate `lr`. The moments live beside the params. Nothing is read back.
  absl::Status Step(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                    double lr);

  int64_t steps() const { return steps_; }
  // Moments as tensors named "<param>.exp_avg" / ".exp_avg_sq", plus "__step__" (checkpointing).
  std::map<std::string, at::Tensor> StateDict() const;
  absl::Status LoadStateDict(const std::map<std::string, at::Tensor>& state);

 private:
  OptimizerConfig opt_;
  int64_t steps_ = 0;
  std::map<std::string, at::Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace baton

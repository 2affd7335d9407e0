// AdamW on fp32 master weights, with global grad-norm clipping. Tensors are addressed by name and always
// visited in sorted-name order, so a step is bitwise repeatable wherever the gradients were computed.
// The coordinator owns one of these for the whole pipeline; `baton train-local` uses the same class.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/train/job.h"

namespace baton {

// Scales `grads` in place so their global L2 norm is at most max_norm (no-op when max_norm ≤ 0).
// Returns the norm before clipping.
double ClipGradNorm(std::map<std::string, at::Tensor>& grads, double max_norm);

// The names of AdamW's state (StateDict): "<param>.exp_avg" and "<param>.exp_avg_sq" for each stepped parameter, and
// the step count.
inline constexpr char kAdamWStepKey[] = "__step__";
std::vector<std::string> MomentKeys(const std::string& param);
// The parameter a moment key belongs to; "" for the step count or any other key.
std::string MomentParam(const std::string& key);

// Learning rate at `step` (0-based): linear warm-up over warmup_steps, then constant.
double LearningRate(const OptimizerConfig& opt, int64_t step);

class AdamW {
 public:
  explicit AdamW(const OptimizerConfig& opt) : opt_(opt) {}

  // One update of `params` (fp32, modified in place) from `grads` (same names) at learning rate `lr`.
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

// Flow-matching samplers as diffusers steps them: UniPCMultistepScheduler with use_flow_sigmas (Wan pipelines'
// scheduler: UniP predictor + UniC corrector over a history of x0 predictions) and FlowMatchEulerDiscreteScheduler.
// The op sequence mirrors diffusers' step() on 0-d fp32 coefficient tensors, so dtype promotion (no upcast: a bf16
// model_output times an fp32 σ is a bf16 product) and rounding are libtorch's own, op for op, on any device.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/sample/flow_scheduler_config.h"

namespace baton {

// One sampling run's scheduler: SetTimesteps, then one Step per timestep, in order. Not thread-safe; the state
// (step index, history) belongs to one run: call SetTimesteps (or Reset) before the next run. Steps count from 0
// (diffusers' set_begin_index(0)); diffusers' step() instead finds its first index by timestep value, which differs
// only when the first two timesteps are equal (UniPC flow_shift 16 at ≥ 63 steps: both 999), where diffusers skips
// a step and then fails on its last.
class FlowScheduler {
 public:
  virtual ~FlowScheduler() = default;

  // diffusers' set_timesteps(num_inference_steps); also restarts the run. INVALID_ARGUMENT for steps < 1.
  virtual absl::Status SetTimesteps(int64_t num_inference_steps) = 0;

  // Restarts the run on the current schedule (history and step index cleared).
  virtual void Reset() = 0;

  // Advances one step: model_output = the velocity v the transformer predicts at sigmas()[step_index()] for
  // `sample` (same shape, same device; [B, C, ...] with at least 2 dims, as diffusers' einsum needs). Returns the
  // sample at sigmas()[step_index() + 1], in the dtype diffusers returns (UniPC: sample's; Euler: model_output's).
  // FAILED_PRECONDITION before SetTimesteps or after the last step; INVALID_ARGUMENT for mismatched tensors (the
  // state is unchanged); a libtorch error mid-step is INTERNAL and leaves the run to restart (Reset).
  virtual absl::StatusOr<at::Tensor> Step(const at::Tensor& model_output, const at::Tensor& sample) = 0;

  // [N] CPU: the timestep to give the transformer at step i, as diffusers computes it. UniPC: int64, truncated
  // int64(σ_i·num_train_timesteps) from fp64 σ (first 999 for 1000). Euler: fp32 σ_i·num_train_timesteps.
  const at::Tensor& timesteps() const { return timesteps_; }
  // [N + 1] fp32 CPU, decreasing: σ_i for each step, then the final σ (0, or UniPC's sigma_min option).
  const at::Tensor& sigmas() const { return sigmas_; }
  int64_t num_inference_steps() const { return timesteps_.defined() ? timesteps_.size(0) : 0; }
  int64_t step_index() const { return step_index_; }  // steps taken since SetTimesteps/Reset
  const FlowSchedulerConfig& config() const { return config_; }

 protected:
  explicit FlowScheduler(FlowSchedulerConfig config) : config_(std::move(config)) {}
  absl::Status CheckStep(const at::Tensor& model_output, const at::Tensor& sample) const;

  FlowSchedulerConfig config_;
  at::Tensor timesteps_;  // [N] int64 (UniPC) | fp32 (Euler), CPU
  at::Tensor sigmas_;     // [N + 1] fp32, CPU
  int64_t step_index_ = 0;
};

// diffusers' UniPCMultistepScheduler (use_flow_sigmas, flow_prediction, predict_x0): x̂0 = x − σ·v; α = 1 − σ,
// λ = ln α − ln σ; order min(solver_order, steps taken + 1), and 1 on the last step with lower_order_final; the
// corrector reruns the previous update with the new x̂0 on every step but the first (no extra model call).
class UniPCMultistepScheduler : public FlowScheduler {
 public:
  // `config` must be a UniPC config (CHECKed; MakeFlowScheduler picks the class from the config).
  explicit UniPCMultistepScheduler(FlowSchedulerConfig config);

  absl::Status SetTimesteps(int64_t num_inference_steps) override;
  void Reset() override;
  absl::StatusOr<at::Tensor> Step(const at::Tensor& model_output, const at::Tensor& sample) override;

 private:
  at::Tensor Predictor(const at::Tensor& sample, int64_t order) const;  // multistep_uni_p_bh_update
  at::Tensor Corrector(const at::Tensor& this_model_output, const at::Tensor& last_sample,
                       const at::Tensor& this_sample, int64_t order) const;  // multistep_uni_c_bh_update
  at::Tensor Lambda(int64_t sigma_index, const at::Device& device) const;    // 0-d fp32 ln(1 − σ) − ln σ

  std::vector<at::Tensor> model_outputs_;  // solver_order x̂0 predictions, oldest first (undefined: none yet)
  at::Tensor last_sample_;                 // the sample the last predictor started from (undefined: none)
  int64_t lower_order_nums_ = 0;
  int64_t this_order_ = 0;
};

// diffusers' FlowMatchEulerDiscreteScheduler (no dynamic shifting, deterministic): x ← float32(x) + (σ_{i+1} − σ_i)·v,
// cast to v's dtype. Its σ are not UniPC's for the same shift k: s = linspace(1, σ_min, N) with σ_min = shift_k(1/T)
// (the training table's shifted end, in fp32), then shifted again; σ₀ = 1 exactly. E.g. k = 5, N = 4: UniPC
// 0.999999, 0.938, 0.834, 0.626, 0; Euler 1, 0.910, 0.717, 0.024, 0. Timesteps are fp32 σ·T.
class FlowMatchEulerScheduler : public FlowScheduler {
 public:
  explicit FlowMatchEulerScheduler(FlowSchedulerConfig config);  // an Euler config (CHECKed)

  absl::Status SetTimesteps(int64_t num_inference_steps) override;
  void Reset() override;
  absl::StatusOr<at::Tensor> Step(const at::Tensor& model_output, const at::Tensor& sample) override;
};

// The scheduler the config's class names.
std::unique_ptr<FlowScheduler> MakeFlowScheduler(const FlowSchedulerConfig& config);

}  // namespace baton

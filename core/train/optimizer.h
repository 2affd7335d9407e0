// The adapters' optimizer, wherever it runs (the coordinator, `baton train-local`, each stage's stage-local
// optimizer): AdamW on the fp32 master weights by libtorch's fused kernel (the one torch.optim.AdamW(fused=True) runs)
// or transformers' Adafactor, LoRA+'s faster up projections, and an EMA of the adapters beside them. Every rule works
// parameter by parameter, so a parameter's update does not depend on which others share the call: the coordinator,
// `baton train-local` and the stages' own optimizers agree bitwise. Nothing is read back.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/train/adamw8bit.h"
#include "core/train/job.h"
#include "core/train/prodigy.h"

namespace baton {

// The optimizer's state (StateDict) by name: for each stepped parameter "<param>.exp_avg" and "<param>.exp_avg_sq"
// (AdamW's moments; Adafactor's first moment when it keeps one and its second, for a matrix factored into
// ".exp_avg_sq_row" and ".exp_avg_sq_col") and, with an EMA, "<param>.ema"; and the step count.
inline constexpr char kOptimizerStepKey[] = "__step__";
std::string EmaKey(const std::string& param);
// The state keys the optimizer of `opt` keeps for a parameter of `shape` once it has stepped, with their shapes.
std::map<std::string, std::vector<int64_t>> StateKeysOf(const OptimizerConfig& opt, const std::string& param,
                                                        at::IntArrayRef shape);
// The shape of state key `key` of a parameter of `param_shape` (a factored row or column, or the parameter's).
std::vector<int64_t> StateShape(const std::string& key, at::IntArrayRef param_shape);
// The parameter a state key belongs to; "" for the step count or any other key.
std::string StateParam(const std::string& key);
// The dtype of state key `key`: uint8 for AdamW8bit's codes, fp32 for the rest.
at::ScalarType StateDtype(const std::string& key);
// Whether `key` is the optimizer's (the step count, a moment, an EMA) rather than an adapter's.
bool IsOptimizerStateKey(const std::string& key);
// LoRA+: whether `param` is an up projection (PEFT's lora_B) or DoRA's magnitude (peft's LoRA+ groups 1-D parameters
// with lora_B), which learn at plus_ratio × the rate.
bool IsUpProjection(const std::string& param);
// The adapters' EMA as the evaluations use it (`ema: {evals}`): state[EmaKey(p)] for each of `params`, or the param
// itself where the state holds none yet (before the first step the EMA is the adapters). Shares their tensors.
std::map<std::string, at::Tensor> EmaWeights(const std::map<std::string, at::Tensor>& params,
                                             const std::map<std::string, at::Tensor>& state);
// The EMA's decay after optimizer step `step` (1-based): diffusers' EMAModel.get_decay.
double EmaDecay(const EmaConfig& ema, int64_t step);
// Full fp32 copies of the adapters the optimizer of `opt` keeps as its state (the planner's count): AdamW 2, AdamW8bit
// 0.51 (2.03 bytes per element), Adafactor 1 with a first moment and 0 without (its factored second moment is a row and
// a column per matrix), an EMA 1 more.
double OptimizerStateCopies(const OptimizerConfig& opt);
// The optimizer types (`optimizer: {type}`).
const std::vector<std::string>& OptimizerTypes();

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& opt) : opt_(opt), prodigy_(ProdigyScalars::Initial(opt.prodigy)) {}

  // One update of `params` (fp32, modified in place, all on one device) from `grads` (same names, fp32; moved to the
  // params' device when elsewhere) at learning rate `lr` (the up projections at opt.plus_ratio × lr); then the EMA
  // follows them. The state lives beside the params.
  absl::Status Step(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                    double lr);

  // Prodigy's step in two calls around its sum over every stage (the stage-local optimizer): the terms of `params`
  // at rate lr (ProdigyTerms: [n·2] double on the device, in name order; nothing changes), then StepProdigy with what
  // ProdigyNext made of every stage's terms.
  at::Tensor ProdigyEstimate(const std::map<std::string, at::Tensor>& params,
                             const std::map<std::string, at::Tensor>& grads, double lr) const;
  absl::Status StepProdigy(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                           double lr, const ProdigyOutcome& outcome);
  const ProdigyScalars& prodigy() const { return prodigy_; }

  int64_t steps() const { return steps_; }
  // The state as tensors named by StateKeysOf, plus "__step__" (checkpointing).
  std::map<std::string, at::Tensor> StateDict() const;
  // Refuses a key this optimizer does not keep (another type's, an EMA without `ema:`).
  absl::Status LoadStateDict(const std::map<std::string, at::Tensor>& state);
  // Whether `state` (LoadStateDict's) holds everything this optimizer keeps for `params` (names and shapes) after its
  // step count, and nothing else, as fp32 tensors of the right shapes; `where` starts each error.
  absl::Status CheckState(const std::map<std::string, at::Tensor>& params,
                          const std::map<std::string, at::Tensor>& state, const std::string& where) const;

 private:
  // The rule over `names` of params at rate lr (AdamW: one call of its fused kernel).
  void AdamWStep(std::map<std::string, at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 const std::vector<std::string>& names, double lr);
  void AdamW8bitStep(std::map<std::string, at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     const std::vector<std::string>& names, double lr);
  void AdafactorStep(std::map<std::string, at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     const std::vector<std::string>& names, double lr);
  // Loaded state (a resume, a rollback) arrives on the host: onto the parameters' device in a few copies before the
  // step, not one synchronizing copy per tensor as each is first taken.
  void MoveStateTo(at::Device device);
  // Step, with Prodigy's outcome given (StepProdigy) or made here.
  absl::Status StepWith(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                        double lr, const ProdigyOutcome* outcome);
  // Prodigy's two halves around its global sums (prodigy.h): in one process with one readback of the terms, or with
  // the outcome of every stage's (`given`).
  void ProdigyStep(std::map<std::string, at::Tensor>& params, std::vector<at::Tensor>& grads,
                   const std::vector<std::string>& names, double lr, const ProdigyOutcome* given);
  // The EMA after this step (diffusers' EMAModel.step), started from the params before the first.
  void EmaStep(const std::map<std::string, at::Tensor>& params);
  // state_[key], made as zeros of `shape` beside `like` when missing, moved there when elsewhere.
  at::Tensor& StateTensor(const std::string& key, at::IntArrayRef shape, const at::Tensor& like);

  OptimizerConfig opt_;
  int64_t steps_ = 0;
  std::map<std::string, at::Tensor> state_;               // by StateKeysOf's names
  ProdigyScalars prodigy_;                                // type prodigy: its estimate's scalars
  std::optional<std::pair<QuantCode, QuantCode>> codes_;  // type adamw8bit: the signed and unsigned codes, made once
};

// What every trainer does with a step's gradients once their global norm is known (grad_norm.h): scaled in place by
// the clipping factor for `clip` (only when the norm exceeds it), then one Step at `lr`.
absl::Status ClipAndStep(Optimizer& optimizer, double clip, double norm, std::map<std::string, at::Tensor>& params,
                         const std::map<std::string, at::Tensor>& grads, double lr);

}  // namespace baton

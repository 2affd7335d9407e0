#include "coordinator/optimizer_step.h"

#include <absl/strings/str_cat.h>

#include "core/train/common.h"
#include "core/train/finite_check.h"
#include "core/train/grad_norm.h"
#include "core/train/lr_schedule.h"
#include "core/util/status.h"

namespace baton {
namespace {

std::vector<double> MicroBatchLosses(const StepOutputs& outputs) {
  const auto& losses = outputs.summaries.back().losses();
  return std::vector<double>(losses.begin(), losses.end());
}

// The step's record but for the gradient norm and the times (the caller's to fill in).
PipelineStepRecord RecordOf(const JobConfig& job, int64_t step, const StepOutputs& outputs) {
  PipelineStepRecord rec;
  rec.step = step + 1;
  rec.lr = LearningRate(job.optimizer, step, job.steps);
  double loss_sum = 0;
  for (double l : MicroBatchLosses(outputs)) loss_sum += l;
  rec.loss = loss_sum / static_cast<double>(job.micro_batches);
  rec.replica_micro_batches = outputs.replica_micro_batches;
  for (const v1::StepSummary& s : outputs.summaries) {
    rec.stages.push_back({s.forward_seconds(), s.backward_seconds(), s.idle_seconds(), s.memory_bytes(),
                          s.device_forward_seconds() + s.device_backward_seconds(), s.memory_reserved_bytes()});
  }
  return rec;
}

}  // namespace

// The optimizer step on the fp32 masters from the stages' gradients, and the step's record (times are the
// caller's to fill in).
absl::StatusOr<PipelineStepRecord> ApplyGradients(const JobConfig& job, int64_t step, const StepOutputs& outputs,
                                                  Optimizer& optimizer, std::map<std::string, at::Tensor>& master) {
  std::map<std::string, at::Tensor> all_grads;
  for (const TensorMap& grads : outputs.grads) {
    for (auto& [name, g] : grads) all_grads[name] = g;
  }
  for (const auto& [name, w] : master) {
    if (!all_grads.count(name)) return absl::DataLossError(absl::StrCat("no gradient came back for ", name));
  }
  PipelineStepRecord rec = RecordOf(job, step, outputs);
  // Measured per stage as each stage's own optimizer would measure them (grad_norm.h), added in name order.
  std::vector<std::map<std::string, double>> squared;
  std::map<std::string, double> all_squared;
  for (const TensorMap& grads : outputs.grads) {
    squared.push_back(SquaredNormsByName(grads));
    all_squared.insert(squared.back().begin(), squared.back().end());
  }
  RETURN_IF_ERROR(CheckStepFinite(rec.step, rec.lr, MicroBatchLosses(outputs),
                                  static_cast<int>(outputs.summaries.size()) - 1, squared));
  rec.grad_norm = GlobalNorm(all_squared);
  RETURN_IF_ERROR(ClipAndStep(optimizer, job.optimizer.clip, rec.grad_norm, master, all_grads, rec.lr));
  return rec;
}

absl::StatusOr<PipelineStepRecord> ApplyExchange(const JobConfig& job, int64_t step, const StepOutputs& outputs,
                                                 PeerExchange& exchange) {
  PipelineStepRecord rec = RecordOf(job, step, outputs);
  std::vector<int> participants;
  for (size_t r = 0; r < outputs.replica_micro_batches.size(); ++r) {
    if (outputs.replica_micro_batches[r] > 0) participants.push_back(static_cast<int>(r));
  }
  ASSIGN_OR_RETURN(ExchangeResult result, exchange.Apply(step, participants, MicroBatchLosses(outputs), rec.lr));
  rec.grad_norm = result.grad_norm;
  rec.exchange_seconds = result.reduce_seconds;
  rec.exchange_early = result.early;
  return rec;
}

}  // namespace baton

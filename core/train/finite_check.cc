#include "core/train/finite_check.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <cmath>

namespace baton {
namespace {

std::string NotApplied(double lr) {
  return absl::StrFormat(
      "; the step was not applied: the last checkpoint, if any, holds the last good LoRA (learning rate at this "
      "step %g: a rate too high diverges like this)",
      lr);
}

std::string StageName(int stage, size_t stages) {
  return stages > 1 ? absl::StrCat("stage ", stage) : std::string("the model");
}

}  // namespace

absl::Status CheckStepFinite(int64_t step, double lr, const std::vector<double>& micro_batch_losses, int loss_stage,
                             const std::vector<std::map<std::string, double>>& stage_squared_norms) {
  const auto& stage_grads = stage_squared_norms;
  for (size_t i = 0; i < micro_batch_losses.size(); ++i) {
    if (std::isfinite(micro_batch_losses[i])) continue;
    return absl::FailedPreconditionError(absl::StrCat("step ", step, ": the loss of micro-batch ", i, " is ",
                                                      micro_batch_losses[i], " (computed on ",
                                                      StageName(loss_stage, stage_grads.size()), ")", NotApplied(lr)));
  }
  for (size_t s = 0; s < stage_grads.size(); ++s) {
    for (const auto& [name, sq] : stage_grads[s]) {
      if (std::isfinite(sq)) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, ": ", StageName(static_cast<int>(s), stage_grads.size()), " sent a non-finite gradient for ",
          name, " (summed over the step's micro-batches)", NotApplied(lr)));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton

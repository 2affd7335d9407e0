#include "tools/step_grads_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>

#include "core/tensor/safetensors.h"
#include "core/train/job.h"
#include "core/train_local/local_trainer.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Keys: lora/<name> (the LoRA the step starts from), grad/<name>, and per micro-batch i: mb<i>/samples (cache record
// indices, int64), mb<i>/target (ε − x0), mb<i>/loss [1] fp64 and mb<i>/in/<name> (the model inputs it was fed).
absl::Status StepGradsToFile(const Args& args) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJob(args.Get("job")));
  ASSIGN_OR_RETURN(int64_t step, args.GetInt("step"));
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("--step ", step, " must be >= 0"));
  ASSIGN_OR_RETURN(StepGradients g, ComputeStepGradients(job, step));
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : g.lora) out["lora/" + name] = t;
  for (const auto& [name, t] : g.grads) out["grad/" + name] = t;
  for (size_t i = 0; i < g.micro_batches.size(); ++i) {
    const MicroBatch& mb = g.micro_batches[i];
    const std::string prefix = absl::StrCat("mb", i, "/");
    out[prefix + "samples"] = at::tensor(mb.samples, at::kLong);
    out[prefix + "target"] = mb.target;
    if (mb.loss_mask.defined()) out[prefix + "loss_mask"] = mb.loss_mask;
    if (mb.loss_weighting.defined()) out[prefix + "loss_weighting"] = mb.loss_weighting;
    out[prefix + "loss"] = at::tensor({g.losses[i]}, at::kDouble);
    for (const auto& [name, t] : mb.model_inputs) out[prefix + "in/" + name] = t.contiguous();
  }
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), out));
  std::printf("wrote %s: step %lld, %zu micro-batches, %zu LoRA gradients\n", args.Get("output").c_str(),
              static_cast<long long>(step), g.micro_batches.size(), g.grads.size());
  return absl::OkStatus();
}

}  // namespace

Command StepGradsCommand() {
  return {"step-grads",
          "One training step's losses and LoRA gradients (no optimizer), as train-local computes them, for referees.",
          {{"job", "job YAML file", "", true},
           {"output", "safetensors: lora/*, grad/*, mb<i>/{samples, target, loss, in/*}", "", true},
           {"step", "0-based step whose micro-batches are drawn", "0"}},
          StepGradsToFile};
}

}  // namespace baton

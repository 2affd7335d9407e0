#include "tools/scheduler_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>

#include "core/device/device.h"
#include "core/sample/flow_scheduler_config.h"
#include "core/sample/unipc_scheduler.h"
#include "core/tensor/safetensors.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::StatusOr<at::Tensor> Input(const std::map<std::string, at::Tensor>& inputs, const std::string& key,
                                 const std::string& path) {
  auto it = inputs.find(key);
  if (it == inputs.end()) return absl::InvalidArgumentError(absl::StrCat(path, ": no tensor '", key, "'"));
  if (!at::isFloatingType(it->second.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", key, "' is ", c10::toString(it->second.scalar_type()), ", not floating point"));
  }
  return it->second;
}

absl::Status SchedulerReplay(const Args& args) {
  ASSIGN_OR_RETURN(FlowSchedulerConfig config, LoadFlowSchedulerConfig(args.Get("scheduler")));
  if (args.GetBool("euler")) config = EulerAlternative(config);
  ASSIGN_OR_RETURN(int64_t steps, args.GetInt("steps"));
  ASSIGN_OR_RETURN(at::Device device, ParseDevice(args.Get("device")));
  const std::string in_path = args.Get("inputs");
  ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(in_path));
  ASSIGN_OR_RETURN(at::Tensor sample, Input(inputs, "sample", in_path));
  ASSIGN_OR_RETURN(at::Tensor model_outputs, Input(inputs, "model_outputs", in_path));
  if (model_outputs.dim() != sample.dim() + 1 || model_outputs.size(0) != steps ||
      model_outputs.sizes().slice(1) != sample.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(in_path, ": 'model_outputs' ", c10::str(model_outputs.sizes()),
                                                   " must be [--steps = ", steps, ", sample's shape ",
                                                   c10::str(sample.sizes()), "...]"));
  }
  std::unique_ptr<FlowScheduler> scheduler = MakeFlowScheduler(config);
  RETURN_IF_ERROR(scheduler->SetTimesteps(steps));
  std::vector<at::Tensor> samples = {sample};
  at::Tensor x = sample.to(device);
  for (int64_t i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(x, scheduler->Step(model_outputs[i].to(device), x));
    samples.push_back(x.cpu());
  }
  // Step 0's sample is the input; a step may change the dtype (Euler returns model_output's), so stack in the last.
  for (at::Tensor& s : samples) s = s.to(x.scalar_type());
  RETURN_IF_ERROR(WriteSafetensors(
      args.Get("output"),
      {{"samples", at::stack(samples)}, {"timesteps", scheduler->timesteps()}, {"sigmas", scheduler->sigmas()}}));
  std::printf("wrote %s: %s, shift %g, %lld steps on %s (first timestep %s)\n", args.Get("output").c_str(),
              config.ClassName().c_str(), config.shift, static_cast<long long>(steps), device.str().c_str(),
              c10::str(scheduler->timesteps()[0].item()).c_str());
  return absl::OkStatus();
}

}  // namespace

Command SchedulerReplayCommand() {
  return {
      "scheduler-replay",
      "Replay a pipeline's sampling scheduler (UniPC flow / FlowMatchEuler) on given model outputs, for referees.",
      {{"scheduler", "scheduler_config.json, a scheduler/ folder or a pipeline folder", "", true},
       {"steps", "num_inference_steps", "", true},
       {"inputs", "safetensors: sample [...] and model_outputs [steps, ...] (the model output at each step)", "", true},
       {"output",
        "safetensors: samples [steps + 1, ...] (input, then after each step), timesteps [steps], "
        "sigmas [steps + 1]",
        "", true},
       {"euler", "use FlowMatchEulerDiscreteScheduler with the config's shift instead of its UniPC", "", false, true},
       {"device", "cpu | cuda | cuda:N", "cpu"}},
      SchedulerReplay};
}

}  // namespace baton

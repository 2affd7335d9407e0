#include "tools/debug_commands.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include <cstdio>

#include "core/image/exif.h"
#include "core/image/image.h"
#include "core/tensor/safetensors.h"
#include "core/train/grad_norm.h"
#include "core/train/job.h"
#include "core/train/lr_schedule.h"
#include "core/train/optimizer.h"
#include "core/train/timesteps.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::Status DecodeImageToPng(const Args& args) {
  const std::string input = args.Get("input");
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(input));
  const bool raw = args.GetBool("ignore-orientation");
  ASSIGN_OR_RETURN(Image image,
                   DecodeImage(bytes, input, raw ? ExifOrientationMode::kIgnore : ExifOrientationMode::kApply));
  RETURN_IF_ERROR(WritePng(args.Get("output"), image));
  std::printf("wrote %s: %dx%d, EXIF orientation %d%s\n", args.Get("output").c_str(), image.width, image.height,
              ReadExifOrientation(bytes), raw ? " (not applied)" : "");
  return absl::OkStatus();
}

// The draws StepSampler makes for one micro-batch, from a generator seeded with --seed instead of the
// job's per-micro-batch seed, so a referee can seed a torch.Generator the same way.
absl::Status SampleTimestepsToFile(const Args& args) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJob(args.Get("job")));
  ASSIGN_OR_RETURN(int64_t count, args.GetInt("count"));
  ASSIGN_OR_RETURN(int64_t tokens, args.GetInt("image-tokens"));
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed"));
  if (count <= 0 || tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--count (", count, ") and --image-tokens (", tokens, ") must be positive"));
  }
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  at::Tensor u = SampleTimestepDensity(job.timesteps, count, gen);
  at::Tensor sigma = DensityToSigma(u);
  const double shift = TimestepShift(job.timesteps, tokens);
  auto replay = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  at::Tensor timestep = SampleTimesteps(job.timesteps, count, tokens, replay);
  RETURN_IF_ERROR(WriteSafetensors(
      args.Get("output"),
      {{"u", u}, {"sigma", sigma}, {"timestep", timestep}, {"shift", at::tensor({shift}, at::kDouble)}}));
  std::printf("wrote %s: %lld timesteps (sampling %s, shift %s = %.9g at %lld image tokens)\n",
              args.Get("output").c_str(), static_cast<long long>(count), job.timesteps.sampling.c_str(),
              job.timesteps.shift.c_str(), shift, static_cast<long long>(tokens));
  return absl::OkStatus();
}

}  // namespace

Command DecodeImageCommand() {
  return {"decode-image",
          "Decode an image as training does (PNG/JPEG, EXIF orientation applied) and write it as PNG.",
          {{"input", "PNG or JPEG file", "", true},
           {"output", "PNG file to write (RGB8)", "", true},
           {"ignore-orientation", "write the pixels as stored, without the EXIF orientation", "", false, true}},
          DecodeImageToPng};
}

namespace {

// `baton lr-schedule`: the learning rate of every step of a job's run, one per line (%.17g), as the trainers take it.
absl::Status PrintLearningRates(const Args& args) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJob(args.Get("job")));
  for (int64_t step = 0; step < job.steps; ++step) {
    std::printf("%.17g\n", LearningRate(job.optimizer, step, job.steps));
  }
  return absl::OkStatus();
}

// `baton optimizer-replay`: the job's optimizer (its schedule, clipping, AdamW settings, LoRA+ and EMA) over given
// gradients, step by step as the trainers run it (core/train/local_step.cc): the global norm from the squared norms
// in name order, the clipping factor, the step's rate.
absl::Status ReplayOptimizer(const Args& args) {
  ASSIGN_OR_RETURN(JobConfig job, LoadJob(args.Get("job")));
  ASSIGN_OR_RETURN(auto params, LoadAllSafetensors(args.Get("params")));
  ASSIGN_OR_RETURN(auto grads_file, LoadAllSafetensors(args.Get("grads")));
  for (auto& [name, p] : params) p = p.to(at::kFloat).contiguous();
  Optimizer optimizer(job.optimizer);
  for (int64_t step = 0; step < job.steps; ++step) {
    std::map<std::string, at::Tensor> grads;
    for (const auto& [name, p] : params) {
      auto it = grads_file.find(absl::StrCat("step", step, "/", name));
      if (it == grads_file.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(args.Get("grads"), " has no step", step, "/", name, " (the job runs ", job.steps, " steps)"));
      }
      grads[name] = it->second.to(at::kFloat).clone();
    }
    const double norm = GlobalNorm(SquaredNormsByName(grads));
    RETURN_IF_ERROR(
        ClipAndStep(optimizer, job.optimizer.clip, norm, params, grads, LearningRate(job.optimizer, step, job.steps)));
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, p] : params) out["param/" + name] = p;
  for (const auto& [key, t] : optimizer.StateDict()) out["state/" + key] = t;
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), out));
  std::printf("wrote %s: %zu parameters after %lld steps\n", args.Get("output").c_str(), params.size(),
              static_cast<long long>(job.steps));
  return absl::OkStatus();
}

}  // namespace

Command OptimizerReplayCommand() {
  return {"optimizer-replay",
          "Run a job's optimizer over given gradients, step by step as training does, for referees.",
          {{"job", "job YAML file (optimizer:, lora: {plus_ratio}, ema: and steps are used)", "", true},
           {"params", "safetensors: the parameters before the first step (fp32)", "", true},
           {"grads", "safetensors: step<k>/<name> for every step k of the job and every parameter", "", true},
           {"output", "safetensors: param/<name> after the last step, state/<key> the optimizer's state", "", true}},
          ReplayOptimizer};
}

Command LearningRateScheduleCommand() {
  return {"lr-schedule",
          "Print the learning rate of every step of a job's run (its optimizer: schedule), one per line, for referees.",
          {{"job", "job YAML file (its optimizer: section and steps are used)", "", true}},
          PrintLearningRates};
}

Command SampleTimestepsCommand() {
  return {"sample-timesteps",
          "Draw a job's training timesteps from a seeded generator (u, sigma, shifted timestep), for referees.",
          {{"job", "job YAML file (its timesteps: section is used)", "", true},
           {"output", "safetensors: u, sigma, timestep [count] fp32; shift [1] fp64", "", true},
           {"count", "number of draws", "20000"},
           {"image-tokens", "image tokens per sample (for the resolution-dependent shifts)", "4096"},
           {"seed", "seed of the CPU generator", "0"}},
          SampleTimestepsToFile};
}

}  // namespace baton

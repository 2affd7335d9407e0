#include "core/train_local/local_trainer.h"

#include <absl/strings/str_cat.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "core/data/cache.h"
#include "core/device/determinism.h"
#include "core/device/threads.h"
#include "core/lora/lora.h"
#include "core/model/model_family.h"
#include "core/sample/model_denoiser.h"
#include "core/sample/prompt_embeds.h"
#include "core/sample/training_evals.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/train/experts.h"
#include "core/train/init_lora.h"
#include "core/train/local_step.h"
#include "core/train/lr_schedule.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

nlohmann::ordered_json StepRecordJson(const StepRecord& rec) {
  nlohmann::ordered_json line;
  line["step"] = rec.step;
  line["loss"] = rec.loss;
  line["lr"] = rec.lr;
  line["grad_norm"] = rec.grad_norm;
  line["step_seconds"] = rec.step_seconds;
  line["samples_per_second"] = rec.samples_per_second;
  return line;
}

PromptEncoder LocalPromptEncoder(const JobConfig& job, const std::string& output_dir) {
  return [job, output_dir](const std::vector<std::string>& prompts,
                           int64_t max_sequence_length) -> absl::StatusOr<std::vector<at::Tensor>> {
    ASSIGN_OR_RETURN(std::string pipeline, PipelineFolderOf(job.model));
    const std::string dir = JoinPath(output_dir, "samples");
    RETURN_IF_ERROR(MakeDirs(dir));
    return EncodePromptsLocally(pipeline, prompts, max_sequence_length, JoinPath(dir, "prompt_embeds.safetensors"));
  };
}

namespace {

// What a single-process run holds: the model with its LoRA, the cache and the step sampler, and the fp32 masters (the
// adapters themselves, on the model's device).
struct LocalRun {
  std::unique_ptr<ModelFamily> family;
  std::unique_ptr<CacheReader> cache;
  std::optional<StepSampler> sampler;
  LocalModel model;
  std::map<std::string, at::Tensor> master;
};

absl::StatusOr<LocalRun> OpenLocalRun(const JobConfig& job) {
  LocalRun run;
  SetComputeThreads(job.threads);
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(at::Device device, ParseDevice(job.devices.empty() ? "cpu" : job.devices[0]));
  ApplyDeterminism(device, job.deterministic);
  ASSIGN_OR_RETURN(run.family, OpenModel(job.model, job.model_config));
  RETURN_IF_ERROR(CheckLoraOutputsPossible(job, *run.family));
  ASSIGN_OR_RETURN(run.cache, OpenTrainingCache(job, *run.family));
  ASSIGN_OR_RETURN(StepSampler sampler, StepSampler::Create(run.cache.get(), job, run.family.get()));
  run.sampler.emplace(std::move(sampler));
  run.model.device = device;
  run.model.dtype = dtype;
  ASSIGN_OR_RETURN(run.model.shell, run.family->BuildShell(dtype, device));
  ASSIGN_OR_RETURN(WeightQuant quant, ParseWeightQuant(job.quantize));
  ASSIGN_OR_RETURN(run.model.stage,
                   run.family->BuildStage(run.family->FullRange(), dtype, device, &job.lora, true, quant));
  run.master = LoraParameters(run.model.stage->module());
  if (run.master.empty()) return absl::InvalidArgumentError("no Linear matched the LoRA targets");
  if (!job.init_lora.empty()) {
    ASSIGN_OR_RETURN(auto init, LoadInitLora(job.init_lora, job.lora, CloneToCpuFloat(run.master)));
    RETURN_IF_ERROR(AssignLoraParameters(run.model.stage->module(), init));
  }
  return run;
}

// The LoRA, train log and samples of one run (a job, or one expert of a two-expert job) in `output_dir`.
absl::StatusOr<LocalTrainResult> RunOneLocalTraining(const JobConfig& job, const std::string& output_dir, int64_t steps,
                                                     const std::function<void(const StepRecord&)>& on_step);

// The one run a job without `expert: both` is (its expert's, for high or low).
absl::StatusOr<JobConfig> SingleRunJob(const JobConfig& job) {
  ASSIGN_OR_RETURN(std::vector<ExpertRun> runs, PlanExpertRuns(job, "", job.steps));
  if (runs.size() != 1) {
    return absl::InvalidArgumentError("expert: both is two runs; give step-grads a job with expert: high or low");
  }
  return runs[0].job;
}

}  // namespace

absl::StatusOr<StepGradients> ComputeStepGradients(const JobConfig& job_file, int64_t step) {
  ASSIGN_OR_RETURN(JobConfig job, SingleRunJob(job_file));
  ASSIGN_OR_RETURN(LocalRun run, OpenLocalRun(job));
  StepGradients out;
  out.lora = CloneToCpuFloat(run.master);
  ASSIGN_OR_RETURN(out.micro_batches, run.sampler->Step(step));
  ASSIGN_OR_RETURN(LocalGradients g, RunLocalForwardBackward(run.model, out.micro_batches));
  out.losses = std::move(g.losses);
  out.grads = std::move(g.grads);
  return out;
}

absl::StatusOr<LocalTrainResult> RunLocalTraining(const JobConfig& job, const std::string& output_dir, int64_t steps,
                                                  const std::function<void(const StepRecord&)>& on_step) {
  if (steps <= 0) steps = job.steps;
  RETURN_IF_ERROR(CheckStepsWithinSchedule(job.optimizer, job.steps, steps));
  ASSIGN_OR_RETURN(std::vector<ExpertRun> runs, PlanExpertRuns(job, output_dir, steps));
  for (const std::string& line : DescribeExpertRuns(runs, steps)) std::printf("%s\n", line.c_str());
  LocalTrainResult all;
  for (const ExpertRun& run : runs) {
    if (run.steps == 0) continue;
    ASSIGN_OR_RETURN(LocalTrainResult one, RunOneLocalTraining(run.job, run.output_dir, run.steps, on_step));
    all.steps.insert(all.steps.end(), one.steps.begin(), one.steps.end());
  }
  return all;
}

namespace {

// `denoiser` run with the adapters' EMA (EmaWeights) in place of the live adapters `params`, put back after the call.
Denoiser WithEmaAdapters(const Denoiser& denoiser, std::map<std::string, at::Tensor>& params,
                         const Optimizer& optimizer) {
  return [denoiser, &params, &optimizer](const std::vector<NoisyBatch>& batches) {
    at::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> trained;
    for (const auto& [name, ema] : EmaWeights(params, optimizer.StateDict())) {
      trained[name] = params.at(name).clone();
      params.at(name).copy_(ema);
    }
    auto out = denoiser(batches);
    for (auto& [name, p] : trained) params.at(name).copy_(p);
    return out;
  };
}

absl::StatusOr<LocalTrainResult> RunOneLocalTraining(const JobConfig& job, const std::string& output_dir, int64_t steps,
                                                     const std::function<void(const StepRecord&)>& on_step) {
  ASSIGN_OR_RETURN(LocalRun run, OpenLocalRun(job));
  LocalModel& model = run.model;
  const ModelFamily* family = run.family.get();
  auto& cache = run.cache;
  StepSampler& sampler = *run.sampler;
  std::map<std::string, at::Tensor>& master = run.master;
  const at::ScalarType dtype = model.dtype;
  const at::Device device = model.device;
  Optimizer optimizer(job.optimizer);
  RETURN_IF_ERROR(MakeDirs(output_dir));
  ASSIGN_OR_RETURN(auto log, OpenTrainLog(output_dir, /*append=*/false));

  ASSIGN_OR_RETURN(std::unique_ptr<TrainingEvals> evals,
                   TrainingEvals::Create(job, *family, *cache, output_dir, LocalPromptEncoder(job, output_dir),
                                         static_cast<int>(job.micro_batches), /*quiet=*/true));
  const Denoiser denoiser = ModelDenoiser(*family, *model.shell, *model.stage, dtype, device);
  const Denoiser ema = job.optimizer.ema.evals_ema() ? WithEmaAdapters(denoiser, master, optimizer) : Denoiser();
  LocalTrainResult result;
  for (int64_t step = 0; step < steps; ++step) {
    if (evals->Due(step, steps, 0)) RETURN_IF_ERROR(evals->Run(step, steps, 0, denoiser, ema, *log).status());
    auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<MicroBatch> mbs, sampler.Step(step));
    ASSIGN_OR_RETURN(LocalStepResult r, RunLocalStep(model, mbs, step, job.steps, job.optimizer, optimizer, master));
    StepRecord rec;
    rec.step = step + 1;
    rec.loss = r.loss;
    rec.lr = r.lr;
    rec.grad_norm = r.grad_norm;
    rec.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rec.samples_per_second = static_cast<double>(r.samples) / rec.step_seconds;
    RETURN_IF_ERROR(log->Append(StepRecordJson(rec)));
    result.steps.push_back(rec);
    if (on_step) on_step(rec);
  }
  if (evals->Due(steps, steps, 0)) RETURN_IF_ERROR(evals->Run(steps, steps, 0, denoiser, ema, *log).status());
  RETURN_IF_ERROR(SaveLoraOutputs(output_dir, CloneToCpuFloat(master), job, steps, *family, optimizer.StateDict()));
  return result;
}

}  // namespace

}  // namespace baton

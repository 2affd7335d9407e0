#include "core/train_local/local_trainer.h"

#include <absl/strings/str_cat.h>

#include <chrono>

#include "core/data/cache.h"
#include "core/device/determinism.h"
#include "core/lora/lora.h"
#include "core/model/model_family.h"
#include "core/sample/model_denoiser.h"
#include "core/sample/prompt_embeds.h"
#include "core/sample/training_evals.h"
#include "core/train/adamw.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/train/init_lora.h"
#include "core/train/local_step.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/util/threads.h"

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

absl::StatusOr<LocalTrainResult> RunLocalTraining(const JobConfig& job, const std::string& output_dir, int64_t steps,
                                                  const std::function<void(const StepRecord&)>& on_step) {
  if (steps <= 0) steps = job.steps;
  SetComputeThreads(job.threads);
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(at::Device device, ParseDevice(job.devices.empty() ? "cpu" : job.devices[0]));
  ApplyDeterminism(device, job.deterministic);
  ASSIGN_OR_RETURN(std::unique_ptr<ModelFamily> family, OpenModel(job.model, job.model_config));
  ASSIGN_OR_RETURN(auto cache, CacheReader::Open(job.dataset));
  RETURN_IF_ERROR(Annotate(family->CheckCacheFits(CacheContentsOf(cache->index())),
                           absl::StrCat("cache ", job.dataset, " does not fit the model")));
  ASSIGN_OR_RETURN(StepSampler sampler, StepSampler::Create(cache.get(), job, family.get()));
  LocalModel model;
  model.device = device;
  model.dtype = dtype;
  ASSIGN_OR_RETURN(model.shell, family->BuildShell(dtype, device));
  ASSIGN_OR_RETURN(WeightQuant quant, ParseWeightQuant(job.quantize));
  ASSIGN_OR_RETURN(model.stage, family->BuildStage(family->FullRange(), dtype, device, &job.lora, true, quant));

  std::map<std::string, at::Tensor> master = CloneToCpuFloat(LoraParameters(model.stage->module()));
  if (master.empty()) return absl::InvalidArgumentError("no Linear matched the LoRA targets");
  if (!job.init_lora.empty()) {
    ASSIGN_OR_RETURN(master, LoadInitLora(job.init_lora, job.lora, master));
    RETURN_IF_ERROR(AssignLoraParameters(model.stage->module(), master));
  }
  AdamW optimizer(job.optimizer);
  RETURN_IF_ERROR(MakeDirs(output_dir));
  ASSIGN_OR_RETURN(auto log, JsonlWriter::Open(JoinPath(output_dir, "train_log.jsonl"), /*append=*/false));

  ASSIGN_OR_RETURN(std::unique_ptr<TrainingEvals> evals,
                   TrainingEvals::Create(job, *family, *cache, output_dir, LocalPromptEncoder(job, output_dir),
                                         static_cast<int>(job.micro_batches), /*quiet=*/true));
  const Denoiser denoiser = ModelDenoiser(*family, *model.shell, *model.stage, dtype, device);
  LocalTrainResult result;
  for (int64_t step = 0; step < steps; ++step) {
    if (evals->Due(step, steps, 0)) RETURN_IF_ERROR(evals->Run(step, steps, 0, denoiser, *log).status());
    auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<MicroBatch> mbs, sampler.Step(step));
    ASSIGN_OR_RETURN(LocalStepResult r, RunLocalStep(model, mbs, step, job.optimizer, optimizer, master));
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
  if (evals->Due(steps, steps, 0)) RETURN_IF_ERROR(evals->Run(steps, steps, 0, denoiser, *log).status());
  RETURN_IF_ERROR(SaveLoraOutputs(output_dir, master, job, steps, *family));
  return result;
}

}  // namespace baton

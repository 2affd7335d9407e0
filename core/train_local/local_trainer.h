// `baton train-local`: the whole transformer in one process. This is the reference every pipeline run is
// held to: same sampler, same micro-batch order, same loss scaling, same optimizer, so the N-stage LoRA
// must equal this one up to floating-point reassociation.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/sample/sample_renderer.h"
#include "core/train/batches.h"
#include "core/train/job.h"

namespace baton {

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_seconds = 0;
  double samples_per_second = 0;
};

// The train_log.jsonl line of a step (the pipeline adds its per-stage fields).
nlohmann::ordered_json StepRecordJson(const StepRecord& record);

struct LocalTrainResult {
  std::vector<StepRecord> steps;
};

// The sample prompts' encoder of a run without an encoder worker: the pipeline's own text encoder in this process,
// keeping the embeddings in <output>/samples/prompt_embeds.safetensors.
PromptEncoder LocalPromptEncoder(const JobConfig& job, const std::string& output_dir);

// Trains `steps` steps (job.steps when ≤ 0) and writes <output>/lora.safetensors and
// <output>/train_log.jsonl, with the job's validation and samples (core/sample/training_evals.h). `on_step`
// (optional) sees each step as it finishes.
absl::StatusOr<LocalTrainResult> RunLocalTraining(const JobConfig& job, const std::string& output_dir, int64_t steps,
                                                  const std::function<void(const StepRecord&)>& on_step = {});

// One step's forward and backward passes as `baton train-local` runs them, without the optimizer, for the referees
// (`baton step-grads`): the LoRA the step starts from (the job's seeded init or init_lora), its micro-batches (cache
// record indices, model inputs, targets), each micro-batch's loss and the LoRA gradients of their mean.
struct StepGradients {
  std::map<std::string, at::Tensor> lora;  // fp32, PEFT names
  std::vector<MicroBatch> micro_batches;
  std::vector<double> losses;
  std::map<std::string, at::Tensor> grads;
};
absl::StatusOr<StepGradients> ComputeStepGradients(const JobConfig& job, int64_t step);

}  // namespace baton

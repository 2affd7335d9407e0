// What a training run evaluates on its way, when the job asks for it: the validation loss (`validation:`) and sample
// images (`samples:`), before the first step, after every `every` steps and after the last. Shared by train-local
// (ModelDenoiser) and the coordinator (forward passes through the stage workers). Evaluations only read the adapters:
// a run's LoRA is bitwise the same with or without them.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/data/cache.h"
#include "core/model/model_family.h"
#include "core/sample/denoiser.h"
#include "core/sample/sample_renderer.h"
#include "core/sample/validation.h"
#include "core/train/common.h"
#include "core/train/job.h"

namespace baton {

struct EvalReport {
  int64_t step = 0;
  std::optional<ValidationResult> validation;
  std::optional<SampleRecord> samples;
  std::optional<ValidationResult> ema_validation;  // the EMA's, beside `validation` (ema.evals: both)
};

class TrainingEvals {
 public:
  // Prepares what the job asks for (the validation set; the prompts' embeddings, initial noise and the VAE decoder):
  // a job that cannot evaluate fails here, before training starts. `micro_batches`: the Denoiser's micro-batches per
  // call that keep every stage busy (the job's micro_batches).
  static absl::StatusOr<std::unique_ptr<TrainingEvals>> Create(const JobConfig& job, const ModelFamily& family,
                                                               const CacheReader& cache, const std::string& output_dir,
                                                               const PromptEncoder& encode, int micro_batches,
                                                               bool quiet);

  // Whether anything is due after `step` optimizer steps of a run ending at `total` that started (or resumed) at
  // `first_step`. At a resumed run's first step only samples missing on disk are due: the run before made the rest.
  bool Due(int64_t step, int64_t total, int64_t first_step) const;
  // Runs what is due and appends one train_log.jsonl line per evaluation ("event": "validation" | "samples"), with
  // the adapters `denoiser` runs and, as the job's ema.evals asks, their EMA `ema` runs (its lines marked
  // "weights": "ema"; empty when the job asks for none). The report holds the trained adapters' evaluations, or the
  // EMA's when only those run.
  absl::StatusOr<EvalReport> Run(int64_t step, int64_t total, int64_t first_step, const Denoiser& denoiser,
                                 const Denoiser& ema, JsonlWriter& log);

 private:
  TrainingEvals() = default;
  bool ValidationDue(int64_t step, int64_t total, int64_t first_step) const;
  bool SamplesDue(int64_t step, int64_t total, int64_t first_step) const;
  // What is due, with one set of adapters: `weights` marks the lines ("" for the trained adapters), `dir_suffix` the
  // samples' folder; the results into `report` when given.
  absl::Status RunWith(int64_t step, int64_t total, int64_t first_step, const Denoiser& denoiser,
                       const std::string& weights, const std::string& dir_suffix, JsonlWriter& log, EvalReport* report);

  JobConfig job_;
  int micro_batches_ = 1;
  bool quiet_ = false;
  std::optional<ValidationSet> validation_;
  std::unique_ptr<SampleRenderer> samples_;
};

}  // namespace baton

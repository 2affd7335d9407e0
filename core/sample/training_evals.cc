#include "core/sample/training_evals.h"

#include <absl/strings/str_format.h>

#include <cstdio>

#include "core/sample/sample_renderers.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Before the first step, every `every` steps, and after the last.
bool OnSchedule(int64_t every, int64_t step, int64_t total) { return step == 0 || step == total || step % every == 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingEvals>> TrainingEvals::Create(const JobConfig& job, const ModelFamily& family,
                                                                     const CacheReader& cache,
                                                                     const std::string& output_dir,
                                                                     const PromptEncoder& encode, int micro_batches,
                                                                     bool quiet) {
  std::unique_ptr<TrainingEvals> e(new TrainingEvals());
  e->job_ = job;
  e->micro_batches_ = std::max(micro_batches, 1);
  e->quiet_ = quiet;
  if (job.validation.enabled()) {
    ASSIGN_OR_RETURN(ValidationSet set, BuildValidationSet(job, family, cache));
    e->validation_ = std::move(set);
  }
  if (job.samples.enabled()) {
    const int64_t prompts = static_cast<int64_t>(job.samples.prompts.size());
    const int per_micro_batch = static_cast<int>((prompts + e->micro_batches_ - 1) / e->micro_batches_);
    int64_t text_len = 0;
    if (cache.size() > 0) text_len = cache.index().records[0].text_len;
    ASSIGN_OR_RETURN(e->samples_, CreateSampleRenderer(job, family, cache.index().latent_channels, text_len, output_dir,
                                                       encode, per_micro_batch));
  }
  return e;
}

bool TrainingEvals::ValidationDue(int64_t step, int64_t total, int64_t first_step) const {
  if (!validation_) return false;
  if (step == first_step && first_step > 0) return false;  // the run before computed it
  return OnSchedule(job_.validation.every, step, total);
}

bool TrainingEvals::SamplesDue(int64_t step, int64_t total, int64_t first_step) const {
  if (!samples_) return false;
  if (step == first_step && first_step > 0)
    return !samples_->Rendered(step) && OnSchedule(job_.samples.every, step, total);
  return OnSchedule(job_.samples.every, step, total);
}

bool TrainingEvals::Due(int64_t step, int64_t total, int64_t first_step) const {
  return ValidationDue(step, total, first_step) || SamplesDue(step, total, first_step);
}

absl::StatusOr<EvalReport> TrainingEvals::Run(int64_t step, int64_t total, int64_t first_step, const Denoiser& denoiser,
                                              const Denoiser& ema, JsonlWriter& log) {
  const EmaConfig& e = job_.optimizer.ema;
  if (e.evals_ema() && !ema) return absl::InternalError("ema.evals asks for the EMA's evaluations but none was given");
  EvalReport report;
  report.step = step;
  // The trained adapters', then the EMA's (the first is the report's); with both, the EMA's images beside the others.
  if (e.evals_trained()) RETURN_IF_ERROR(RunWith(step, total, first_step, denoiser, "", "", log, &report));
  if (e.evals_ema() && !e.evals_trained())
    RETURN_IF_ERROR(RunWith(step, total, first_step, ema, "ema", "", log, &report));
  if (e.evals_ema() && e.evals_trained()) {
    EvalReport beside;
    RETURN_IF_ERROR(RunWith(step, total, first_step, ema, "ema", "-ema", log, &beside));
    report.ema_validation = std::move(beside.validation);
  }
  return report;
}

absl::Status TrainingEvals::RunWith(int64_t step, int64_t total, int64_t first_step, const Denoiser& denoiser,
                                    const std::string& weights, const std::string& dir_suffix, JsonlWriter& log,
                                    EvalReport* report) {
  const std::string of = weights.empty() ? "" : absl::StrCat(" (", weights, ")");
  if (ValidationDue(step, total, first_step)) {
    ASSIGN_OR_RETURN(ValidationResult v, RunValidation(denoiser, *validation_, micro_batches_));
    nlohmann::ordered_json losses;
    std::string text;
    for (size_t i = 0; i < v.losses.size(); ++i) {
      const std::string t = absl::StrFormat("%g", validation_->timesteps[i]);
      losses[t] = v.losses[i];
      absl::StrAppend(&text, absl::StrFormat("  t=%s %.5f", t, v.losses[i]));
    }
    losses["mean"] = v.mean;
    nlohmann::ordered_json line;
    line["step"] = step;
    line["event"] = "validation";
    if (!weights.empty()) line["weights"] = weights;
    line["validation_loss"] = losses;
    line["records"] = validation_->records;
    line["seconds"] = v.seconds;
    RETURN_IF_ERROR(log.Append(line));
    if (!quiet_) {
      std::printf("validation%s after step %lld: mean %.5f%s  (%lld records, %.2f s)\n", of.c_str(),
                  static_cast<long long>(step), v.mean, text.c_str(), static_cast<long long>(validation_->records),
                  v.seconds);
    }
    if (report != nullptr) report->validation = std::move(v);
  }
  if (SamplesDue(step, total, first_step)) {
    ASSIGN_OR_RETURN(SampleRecord s, samples_->Render(step, dir_suffix, denoiser, quiet_));
    nlohmann::ordered_json line;
    line["step"] = step;
    line["event"] = "samples";
    if (!weights.empty()) line["weights"] = weights;
    line["dir"] = s.dir;
    line["contact_sheet"] = s.contact_sheet;
    line["images"] = s.images;
    line["seconds_per_sample"] = s.seconds_per_sample;
    RETURN_IF_ERROR(log.Append(line));
    if (report != nullptr) report->samples = std::move(s);
  }
  return absl::OkStatus();
}

}  // namespace baton

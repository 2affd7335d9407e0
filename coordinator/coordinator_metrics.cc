#include "coordinator/coordinator_metrics.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/time/clock.h>

#include <memory>

#include "core/metrics/families.h"

namespace baton {
namespace {

// One run's series, resolved once.
struct RunSeries {
  explicit RunSeries(const std::string& job)
      : m(CoordinatorFamilies()),
        labels{{"job", job}},
        steps_completed(m.steps_completed.Add(labels)),
        step(m.step.Add(labels)),
        steps_target(m.steps_target.Add(labels)),
        step_duration(m.step_duration_seconds.Add(labels, StepDurationBuckets())),
        loss(m.loss.Add(labels)),
        learning_rate(m.learning_rate.Add(labels)),
        gradient_norm(m.gradient_norm.Add(labels)),
        samples_per_second(m.samples_per_second.Add(labels)),
        checkpoint_duration(m.checkpoint_duration_seconds.Add(labels, CheckpointDurationBuckets())),
        checkpoint_last_success(m.checkpoint_last_success_timestamp_seconds.Add(labels)) {}

  CoordinatorMetrics& m;
  prometheus::Labels labels;
  prometheus::Counter& steps_completed;
  prometheus::Gauge &step, &steps_target;
  prometheus::Histogram& step_duration;
  prometheus::Gauge &loss, &learning_rate, &gradient_norm, &samples_per_second;
  prometheus::Histogram& checkpoint_duration;
  prometheus::Gauge& checkpoint_last_success;
};

}  // namespace

void AddMetricsHooks(const std::string& job_name, CoordinatorHooks* hooks) {
  auto series = std::make_shared<RunSeries>(job_name);
  hooks->on_start = [series, next = std::move(hooks->on_start)](const RunStart& start) {
    series->steps_target.Set(static_cast<double>(start.total_steps));
    series->step.Set(static_cast<double>(start.first_step));
    if (next) next(start);
  };
  hooks->on_step = [series, next = std::move(hooks->on_step)](const PipelineStepRecord& rec) {
    series->steps_completed.Increment();
    series->step.Set(static_cast<double>(rec.step));
    series->step_duration.Observe(rec.step_seconds);
    series->loss.Set(rec.loss);
    series->learning_rate.Set(rec.lr);
    series->gradient_norm.Set(rec.grad_norm);
    series->samples_per_second.Set(rec.samples_per_second);
    for (size_t r = 0; r < rec.replica_micro_batches.size() && r < rec.replica_samples_per_second.size(); ++r) {
      const prometheus::Labels labels = {{"job", series->labels.at("job")}, {"replica", absl::StrCat(r)}};
      series->m.replica_micro_batches.Add(labels).Set(rec.replica_micro_batches[r]);
      series->m.replica_samples_per_second.Add(labels).Set(rec.replica_samples_per_second[r]);
    }
    if (rec.exchange_seconds > 0) {
      series->m.replica_allreduce_seconds.Add({{"job", series->labels.at("job")}}).Set(rec.exchange_seconds);
      series->m.replica_exchange_wait_seconds.Add({{"job", series->labels.at("job")}}).Set(rec.optimizer_seconds);
    }
    if (next) next(rec);
  };
  hooks->on_recovery = [job_name, next = std::move(hooks->on_recovery)](int64_t step, int stage,
                                                                        const std::string& cause) {
    CoordinatorFamilies()
        .step_retries.Add({{"job", job_name}, {"stage", stage >= 0 ? absl::StrCat(stage) : "none"}})
        .Increment();
    if (next) next(step, stage, cause);
  };
  hooks->on_outage = [series, job_name, next = std::move(hooks->on_outage)](const StageOutage& outage) {
    series->m.stage_unreachable_seconds.Add({{"job", job_name}, {"stage", absl::StrCat(outage.worker)}})
        .Set(outage.over ? 0.0 : outage.seconds);
    if (next) next(outage);
  };
  hooks->on_eval = [series, job_name, next = std::move(hooks->on_eval)](const EvalReport& report) {
    if (report.validation) {
      const ValidationResult& v = *report.validation;
      auto& family = series->m.validation_loss;
      for (size_t i = 0; i < v.losses.size(); ++i) {
        family.Add({{"job", job_name}, {"timestep", absl::StrFormat("%g", v.timesteps[i])}}).Set(v.losses[i]);
      }
      family.Add({{"job", job_name}, {"timestep", "mean"}}).Set(v.mean);
    }
    if (report.samples) {
      series->m.sample_seconds.Add(series->labels).Set(report.samples->seconds_per_sample);
      series->m.sample_images.Add(series->labels).Increment(static_cast<double>(report.samples->images));
    }
    if (next) next(report);
  };
  hooks->on_checkpoint = [series, next = std::move(hooks->on_checkpoint)](int64_t step, double seconds) {
    series->checkpoint_duration.Observe(seconds);
    series->checkpoint_last_success.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    if (next) next(step, seconds);
  };
}

}  // namespace baton

#include "client/watch_view.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/time/clock.h>

#include <algorithm>
#include <cmath>

namespace baton {
namespace {

double Elapsed(const v1::JobInfo& job) {
  if (job.start_time_unix() <= 0) return 0;
  const double end =
      job.end_time_unix() > 0 ? job.end_time_unix() : absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  return end - job.start_time_unix();
}

}  // namespace

std::string BlockBar(double fraction, int width) {
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  fraction = std::clamp(std::isfinite(fraction) ? fraction : 0.0, 0.0, 1.0);
  const int eighths = static_cast<int>(std::lround(fraction * width * 8));
  const int full = eighths / 8, rest = eighths % 8;
  std::string out;
  for (int i = 0; i < full; ++i) out += "█";
  int cells = full;
  if (rest > 0) {
    out += kEighths[rest];
    ++cells;
  }
  return out + std::string(static_cast<size_t>(std::max(0, width - cells)), ' ');
}

std::string PlainStepLine(const v1::JobInfo& job, const v1::StepProgress& step) {
  std::string busy;
  for (const v1::StageStats& s : step.stages()) {
    absl::StrAppend(&busy, " ", std::lround(100 * s.busy_seconds() / std::max(step.step_seconds(), 1e-9)), "%");
  }
  std::string replicas;
  if (step.replica_micro_batches_size() > 0) {
    absl::StrAppend(&replicas, " split ", absl::StrJoin(step.replica_micro_batches(), "+"));
  }
  return absl::StrFormat("job %s step %d/%d loss %.5f lr %.2e %.3f s/step %.1f samples/s ETA %s busy%s%s", job.job_id(),
                         step.step(), step.total_steps(), step.loss(), step.learning_rate(), step.step_seconds(),
                         step.samples_per_second(), FormatDuration(step.eta_seconds()), busy, replicas);
}

std::string JobPanel(const v1::JobInfo& job, int bar_width) {
  const v1::StepProgress& step = job.last_step();
  const int64_t total = std::max<int64_t>(job.total_steps(), 1);
  std::string out =
      absl::StrFormat("job %s  %s  %s  step %d/%d  %s %3d%%\n", job.job_id(), job.name(), JobStateName(job.state()),
                      step.step(), job.total_steps(), BlockBar(static_cast<double>(step.step()) / total, bar_width),
                      static_cast<int>(100 * step.step() / total));
  if (job.has_last_step()) {
    absl::StrAppend(
        &out, absl::StrFormat("loss %.5f  lr %.2e  %.3f s/step  %.1f samples/s  elapsed %s  ETA %s\n", step.loss(),
                              step.learning_rate(), step.step_seconds(), step.samples_per_second(),
                              FormatDuration(Elapsed(job)),
                              // only a running job has a time left
                              job.state() == v1::JOB_STATE_RUNNING ? FormatDuration(step.eta_seconds()) : "-"));
  }
  for (int i = 0; i < step.stages_size(); ++i) {
    const double busy = step.stages(i).busy_seconds() / std::max(step.step_seconds(), 1e-9);
    const v1::StageStats& t = job.stage_totals_size() > i ? job.stage_totals(i) : v1::StageStats();
    const double mean = t.busy_seconds() / std::max(t.busy_seconds() + t.idle_seconds(), 1e-9);
    absl::StrAppend(
        &out, absl::StrFormat("stage %d  %s %3d%% busy (run: %d%%)\n", i, BlockBar(busy, bar_width),
                              static_cast<int>(std::lround(100 * busy)), static_cast<int>(std::lround(100 * mean))));
  }
  for (int r = 0; r < step.replica_micro_batches_size(); ++r) {
    const double sps = r < step.replica_samples_per_second_size() ? step.replica_samples_per_second(r) : 0.0;
    absl::StrAppend(
        &out, absl::StrFormat("replica %d  %d micro-batches  %.1f samples/s\n", r, step.replica_micro_batches(r), sps));
  }
  for (const v1::StageOutage& o : job.outages()) {  // as last said, carried on to now
    const double since =
        o.seconds() + std::max(0.0, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - o.time_unix());
    absl::StrAppend(&out, "NOT ANSWERING: ", o.name(), " for ", FormatDuration(since), "\n");
  }
  if (job.last_checkpoint_step() > 0) absl::StrAppend(&out, "checkpoint: step ", job.last_checkpoint_step(), "\n");
  if (job.has_last_validation()) absl::StrAppend(&out, ValidationLine(job.last_validation()), "\n");
  if (job.has_last_samples()) absl::StrAppend(&out, SamplesLine(job.last_samples()), "\n");
  if (!job.error().empty()) absl::StrAppend(&out, "error: ", job.error(), "\n");
  return out;
}

std::string ValidationLine(const v1::ValidationProgress& v) {
  std::string per_timestep;
  for (int i = 0; i < v.timesteps_size() && i < v.losses_size(); ++i) {
    absl::StrAppend(&per_timestep, i > 0 ? ", " : "", absl::StrFormat("t=%g %.5f", v.timesteps(i), v.losses(i)));
  }
  return absl::StrFormat("validation%s after step %d: mean %.5f (%s)", v.ema() ? " (ema)" : "", v.step(), v.mean(),
                         per_timestep);
}

std::string SamplesLine(const v1::SamplesProgress& s) {
  return absl::StrFormat("samples after step %d: %d images, %.2f s each: %s", s.step(), s.images(),
                         s.seconds_per_sample(), s.contact_sheet());
}

std::string OutageLine(const v1::StageOutage& o) {
  if (!o.message().empty()) return o.message();
  return o.over() ? absl::StrFormat("%s is back after %.0f s without an answer", o.name(), o.seconds())
                  : absl::StrFormat("%s has not answered for %.0f s", o.name(), o.seconds());
}

std::string JobSummaryLine(const v1::JobInfo& job) {
  std::string out = absl::StrFormat("job %s %s: step %d/%d", job.job_id(), JobStateName(job.state()),
                                    job.last_step().step(), job.total_steps());
  if (job.has_last_step()) absl::StrAppend(&out, absl::StrFormat(", loss %.5f", job.last_step().loss()));
  if (job.start_time_unix() > 0) absl::StrAppend(&out, ", ", FormatDuration(Elapsed(job)));
  if (!job.error().empty()) absl::StrAppend(&out, ": ", job.error());
  return out;
}

}  // namespace baton

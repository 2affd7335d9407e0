#include "core/train/lr_schedule.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>

namespace baton {

const std::vector<std::string>& LearningRateSchedules() {
  static const auto* names = new std::vector<std::string>{"constant", "constant_with_warmup", "linear",
                                                          "cosine",   "cosine_with_restarts", "polynomial"};
  return *names;
}

namespace {

// diffusers.optimization's lr_lambda of `schedule` at scheduler step s: the factor on the base rate.
double ScheduleFactor(const OptimizerConfig& opt, int64_t s, int64_t total) {
  const std::string& name = opt.schedule;
  const int64_t warmup = opt.warmup_steps;
  if (name == "constant" && warmup == 0) return 1.0;
  const double step = static_cast<double>(s);
  if (s < warmup) return step / static_cast<double>(std::max<int64_t>(1, warmup));
  if (name == "constant" || name == "constant_with_warmup") return 1.0;
  if (name == "linear") {
    return std::max(0.0, static_cast<double>(total - s) / static_cast<double>(std::max<int64_t>(1, total - warmup)));
  }
  const double progress = static_cast<double>(s - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  if (name == "cosine") {
    const double cycles = opt.cycles < 0 ? 0.5 : opt.cycles;
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * cycles * 2.0 * progress)));
  }
  if (name == "cosine_with_restarts") {
    if (progress >= 1.0) return 0.0;
    const double cycles = opt.cycles < 0 ? 1.0 : opt.cycles;
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(cycles * progress, 1.0))));
  }
  // polynomial: from the base rate to lr_end = 1e-7 (get_scheduler passes no lr_end), as a factor of the base.
  constexpr double kLrEnd = 1e-7;
  if (s > total) return kLrEnd / opt.lr;
  // (diffusers divides by total − warmup unguarded: a run no longer than its warm-up fails there.)
  const double remaining =
      1.0 - static_cast<double>(s - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  return ((opt.lr - kLrEnd) * std::pow(remaining, opt.power) + kLrEnd) / opt.lr;
}

}  // namespace

absl::Status CheckStepsWithinSchedule(const OptimizerConfig& opt, int64_t job_steps, int64_t steps) {
  if (steps <= job_steps || (opt.type == "adafactor" && opt.adafactor.relative_step)) return absl::OkStatus();
  if (opt.schedule == "constant" || opt.schedule == "constant_with_warmup") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--steps ", steps, " runs past the job's `steps: ", job_steps, "`, where its ", opt.schedule,
                   " learning-rate schedule ends (after it diffusers' schedule ",
                   opt.schedule == "linear" || opt.schedule == "polynomial" || opt.schedule == "cosine_with_restarts"
                       ? "stays at its floor"
                       : "climbs back",
                   "): raise `steps:` in the job file to ", steps, " instead (a --resume keeps the run's state)"));
}

double LearningRate(const OptimizerConfig& opt, int64_t step, int64_t total_steps) {
  if (opt.type == "adafactor" && opt.adafactor.relative_step) {  // Adafactor._get_lr's relative step at step k
    const double k = static_cast<double>(step + 1);
    return std::min(opt.adafactor.warmup_init ? 1e-6 * k : 1e-2, 1.0 / std::sqrt(k));
  }
  return opt.lr * ScheduleFactor(opt, step, total_steps);
}

}  // namespace baton

// The job's `optimizer:` and `ema:` keys (job_reader.h).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/train/job_reader.h"
#include "core/train/lr_schedule.h"
#include "core/train/optimizer.h"

namespace baton {
namespace {

// The learning-rate schedule's keys: schedule, cycles (the cosines'), power (polynomial's).
absl::Status ParseScheduleKeys(Reader& r, YAML::Node o, OptimizerConfig& opt) {
  RETURN_IF_ERROR(r.Get(o, "schedule", &opt.schedule));
  const std::vector<std::string>& names = LearningRateSchedules();
  RETURN_IF_ERROR(r.Check(std::find(names.begin(), names.end(), opt.schedule) != names.end(), o, "schedule",
                          absl::StrCat("must be one of ", absl::StrJoin(names, ", "), " (diffusers' get_scheduler)")));
  const bool cosine = opt.schedule == "cosine" || opt.schedule == "cosine_with_restarts";
  RETURN_IF_ERROR(r.Check(!o["cycles"].IsDefined() || cosine, o, "cycles",
                          absl::StrCat("applies to cosine and cosine_with_restarts, not ", opt.schedule)));
  RETURN_IF_ERROR(r.Get(o, "cycles", &opt.cycles));
  RETURN_IF_ERROR(
      r.Check(!o["cycles"].IsDefined() || (opt.cycles > 0 && opt.cycles <= 1000), o, "cycles", "must be in (0, 1000]"));
  RETURN_IF_ERROR(r.Check(!o["power"].IsDefined() || opt.schedule == "polynomial", o, "power",
                          absl::StrCat("applies to polynomial, not ", opt.schedule)));
  RETURN_IF_ERROR(r.Get(o, "power", &opt.power));
  RETURN_IF_ERROR(r.Check(opt.power > 0 && opt.power <= 100, o, "power", "must be in (0, 100]"));
  return r.Check(opt.schedule != "polynomial" || opt.lr > 1e-7, o, "lr",
                 "must be above polynomial's end rate, 1e-7 (diffusers' lr_end)");
}

// The keys of some optimizer types only, each refused under the others with the types it applies to.
const std::map<std::string, std::vector<std::string>>& TypeKeys() {
  static const auto* keys = new std::map<std::string, std::vector<std::string>>{
      {"betas", {"adamw", "adamw8bit", "prodigy"}},
      {"min_8bit_size", {"adamw8bit"}},
      {"clip_threshold", {"adafactor"}},
      {"decay_rate", {"adafactor"}},
      {"beta1", {"adafactor"}},
      {"relative_step", {"adafactor"}},
      {"scale_parameter", {"adafactor"}},
      {"warmup_init", {"adafactor"}},
      {"beta3", {"prodigy"}},
      {"d0", {"prodigy"}},
      {"d_coef", {"prodigy"}},
      {"growth_rate", {"prodigy"}},
      {"use_bias_correction", {"prodigy"}},
      {"safeguard_warmup", {"prodigy"}},
      {"decouple", {"prodigy"}},
  };
  return *keys;
}

// AdamW's own keys: betas, eps.
absl::Status ParseAdamWKeys(Reader& r, const YAML::Node& o, OptimizerConfig& opt) {
  std::vector<double> betas = {opt.beta1, opt.beta2};
  RETURN_IF_ERROR(r.GetList(o, "betas", 2, "[beta1, beta2]", &betas));
  RETURN_IF_ERROR(r.Check(betas.size() == 2 && betas[0] >= 0 && betas[0] < 1 && betas[1] >= 0 && betas[1] < 1, o,
                          "betas", "must be two numbers in [0, 1)"));
  opt.beta1 = betas[0];
  opt.beta2 = betas[1];
  RETURN_IF_ERROR(r.Get(o, "eps", &opt.eps));
  return r.Check(opt.eps > 0, o, "eps", "must be positive");
}

// prodigyopt's own keys: beta3, d0, d_coef, growth_rate, use_bias_correction, safeguard_warmup, decouple (betas and
// eps as AdamW's). Its rate is 1 unless given.
absl::Status ParseProdigyKeys(Reader& r, const YAML::Node& o, OptimizerConfig& opt) {
  RETURN_IF_ERROR(ParseAdamWKeys(r, o, opt));
  ProdigyConfig& p = opt.prodigy;
  if (!o["lr"].IsDefined()) opt.lr = 1.0;
  RETURN_IF_ERROR(r.Get(o, "beta3", &p.beta3));
  RETURN_IF_ERROR(r.Check(!o["beta3"].IsDefined() || (p.beta3 >= 0 && p.beta3 < 1), o, "beta3",
                          "must be in [0, 1) (leave it out for sqrt(beta2))"));
  RETURN_IF_ERROR(r.Get(o, "d0", &p.d0));
  RETURN_IF_ERROR(r.Check(p.d0 > 0, o, "d0", "must be positive (default 1.0e-6)"));
  RETURN_IF_ERROR(r.Get(o, "d_coef", &p.d_coef));
  RETURN_IF_ERROR(r.Check(p.d_coef > 0, o, "d_coef", "must be positive"));
  RETURN_IF_ERROR(r.Get(o, "growth_rate", &p.growth_rate));
  RETURN_IF_ERROR(r.Check(p.growth_rate >= 1, o, "growth_rate", "must be ≥ 1 (default .inf)"));
  RETURN_IF_ERROR(r.Get(o, "use_bias_correction", &p.use_bias_correction));
  RETURN_IF_ERROR(r.Get(o, "safeguard_warmup", &p.safeguard_warmup));
  return r.Get(o, "decouple", &p.decouple);
}

// transformers' Adafactor's keys: eps [eps1, eps2], clip_threshold, decay_rate, beta1, relative_step,
// scale_parameter, warmup_init. With relative_step (its default) Adafactor sets its own rate: lr and the schedule's
// keys do not apply.
absl::Status ParseAdafactorKeys(Reader& r, const YAML::Node& o, OptimizerConfig& opt) {
  AdafactorConfig& a = opt.adafactor;
  std::vector<double> eps = {a.eps1, a.eps2};
  RETURN_IF_ERROR(r.GetList(o, "eps", 2, "[eps1, eps2]", &eps));
  RETURN_IF_ERROR(r.Check(eps.size() == 2 && eps[0] > 0 && eps[1] > 0, o, "eps",
                          "must be two positive numbers for adafactor, [eps1, eps2] (default [1.0e-30, 1.0e-3])"));
  a.eps1 = eps[0];
  a.eps2 = eps[1];
  RETURN_IF_ERROR(r.Get(o, "clip_threshold", &a.clip_threshold));
  RETURN_IF_ERROR(r.Check(a.clip_threshold > 0, o, "clip_threshold", "must be positive"));
  RETURN_IF_ERROR(r.Get(o, "decay_rate", &a.decay_rate));
  RETURN_IF_ERROR(r.Check(a.decay_rate < 0, o, "decay_rate", "must be negative (default -0.8)"));
  RETURN_IF_ERROR(r.Get(o, "beta1", &a.beta1));
  RETURN_IF_ERROR(r.Check(!o["beta1"].IsDefined() || (a.beta1 >= 0 && a.beta1 < 1), o, "beta1",
                          "must be in [0, 1) (leave it out for no first moment)"));
  RETURN_IF_ERROR(r.Get(o, "relative_step", &a.relative_step));
  RETURN_IF_ERROR(r.Get(o, "scale_parameter", &a.scale_parameter));
  RETURN_IF_ERROR(r.Get(o, "warmup_init", &a.warmup_init));
  RETURN_IF_ERROR(r.Check(!a.warmup_init || a.relative_step, o, "warmup_init", "needs relative_step: true"));
  if (!a.relative_step) return absl::OkStatus();
  for (const char* key : {"lr", "schedule", "warmup_steps", "cycles", "power"}) {
    RETURN_IF_ERROR(r.Check(!o[key].IsDefined(), o, key,
                            "does not apply with relative_step: true (Adafactor's default: it sets its own rate, "
                            "min(1e-2, 1/sqrt(step))); give relative_step: false to train at lr"));
  }
  return absl::OkStatus();
}

// optimizer: {type, lr, weight_decay, clip, schedule, warmup_steps, cycles, power} and the type's own keys.
absl::Status ParseOptimizerKeys(Reader& r, const YAML::Node& root, JobConfig& job) {
  if (!root["optimizer"].IsDefined()) return absl::OkStatus();
  YAML::Node o = root["optimizer"];
  std::set<std::string> keys = {"type",     "lr",           "weight_decay", "eps",  "clip",
                                "schedule", "warmup_steps", "cycles",       "power"};
  for (const auto& [key, types] : TypeKeys()) keys.insert(key);
  RETURN_IF_ERROR(r.Keys(o, "optimizer", keys));
  OptimizerConfig& opt = job.optimizer;
  RETURN_IF_ERROR(r.Get(o, "type", &opt.type));
  const std::vector<std::string>& types = OptimizerTypes();
  RETURN_IF_ERROR(r.Check(std::find(types.begin(), types.end(), opt.type) != types.end(), o, "type",
                          absl::StrCat("must be one of ", absl::StrJoin(types, ", "))));
  for (const auto& [key, applies] : TypeKeys()) {
    const bool here = std::find(applies.begin(), applies.end(), opt.type) != applies.end();
    RETURN_IF_ERROR(r.Check(!o[key].IsDefined() || here, o, key,
                            absl::StrCat("applies to ", absl::StrJoin(applies, " and "), ", not ", opt.type)));
  }
  RETURN_IF_ERROR(r.Get(o, "lr", &opt.lr));
  RETURN_IF_ERROR(r.Check(opt.lr > 0, o, "lr", "must be positive"));
  RETURN_IF_ERROR(r.Get(o, "weight_decay", &opt.weight_decay));
  RETURN_IF_ERROR(r.Check(opt.weight_decay >= 0, o, "weight_decay", "must be ≥ 0"));
  if (opt.type == "adafactor") {
    RETURN_IF_ERROR(ParseAdafactorKeys(r, o, opt));
  } else if (opt.type == "prodigy") {
    RETURN_IF_ERROR(ParseProdigyKeys(r, o, opt));
  } else {
    RETURN_IF_ERROR(ParseAdamWKeys(r, o, opt));
    RETURN_IF_ERROR(r.Get(o, "min_8bit_size", &opt.min_8bit_size));
    RETURN_IF_ERROR(r.Check(opt.min_8bit_size >= 0, o, "min_8bit_size", "must be ≥ 0 (default 4096)"));
  }
  RETURN_IF_ERROR(r.Get(o, "clip", &opt.clip));
  RETURN_IF_ERROR(r.Check(opt.clip >= 0, o, "clip", "must be ≥ 0 (0 disables clipping)"));
  RETURN_IF_ERROR(r.Get(o, "warmup_steps", &opt.warmup_steps));
  RETURN_IF_ERROR(r.Check(opt.warmup_steps >= 0, o, "warmup_steps", "must be ≥ 0"));
  return ParseScheduleKeys(r, o, opt);
}

// ema: {decay, min_decay, update_after_step, use_ema_warmup, inv_gamma, power}: diffusers' EMAModel arguments; and
// evals: trained|ema|both (SimpleTuner's --ema_validation none|ema_only|comparison).
absl::Status ParseEmaKeys(Reader& r, const YAML::Node& root, EmaConfig& ema) {
  if (!root["ema"].IsDefined()) return absl::OkStatus();
  YAML::Node e = root["ema"];
  RETURN_IF_ERROR(
      r.Keys(e, "ema", {"decay", "min_decay", "update_after_step", "use_ema_warmup", "inv_gamma", "power", "evals"}));
  RETURN_IF_ERROR(r.Check(e["decay"].IsDefined(), e, "decay", "is required: the EMA's decay, in (0, 1) (e.g. 0.999)"));
  RETURN_IF_ERROR(r.Get(e, "decay", &ema.decay));
  RETURN_IF_ERROR(r.Check(ema.decay > 0 && ema.decay < 1, e, "decay", "must be in (0, 1)"));
  RETURN_IF_ERROR(r.Get(e, "min_decay", &ema.min_decay));
  RETURN_IF_ERROR(r.Check(ema.min_decay >= 0 && ema.min_decay <= ema.decay, e, "min_decay", "must be in [0, decay]"));
  RETURN_IF_ERROR(r.Get(e, "update_after_step", &ema.update_after_step));
  RETURN_IF_ERROR(r.Check(ema.update_after_step >= 0, e, "update_after_step", "must be ≥ 0"));
  RETURN_IF_ERROR(r.Get(e, "use_ema_warmup", &ema.use_ema_warmup));
  for (const char* key : {"inv_gamma", "power"}) {
    RETURN_IF_ERROR(r.Check(!e[key].IsDefined() || ema.use_ema_warmup, e, key, "applies with use_ema_warmup: true"));
  }
  RETURN_IF_ERROR(r.Get(e, "inv_gamma", &ema.inv_gamma));
  RETURN_IF_ERROR(r.Check(ema.inv_gamma > 0, e, "inv_gamma", "must be positive"));
  RETURN_IF_ERROR(r.Get(e, "power", &ema.power));
  RETURN_IF_ERROR(r.Check(ema.power > 0, e, "power", "must be positive"));
  std::string evals = "trained";
  RETURN_IF_ERROR(r.Get(e, "evals", &evals));
  static const std::map<std::string, EmaConfig::Evals> kEvals = {
      {"trained", EmaConfig::Evals::kTrained}, {"ema", EmaConfig::Evals::kEma}, {"both", EmaConfig::Evals::kBoth}};
  RETURN_IF_ERROR(
      r.Check(kEvals.count(evals) > 0, e, "evals",
              absl::StrCat("is '", evals, "': one of trained, ema, both (what validation and samples run)")));
  ema.evals = kEvals.at(evals);
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseJobOptimizer(Reader& r, const YAML::Node& root, JobConfig& job) {
  RETURN_IF_ERROR(ParseOptimizerKeys(r, root, job));
  const OptimizerConfig& opt = job.optimizer;
  if (opt.plus_ratio != 1.0 && opt.type == "adafactor" && opt.adafactor.relative_step) {
    return r.Check(false, root["lora"], "plus_ratio",
                   "needs a rate to multiply: Adafactor with relative_step: true sets its own (give relative_step: "
                   "false)");
  }
  if (opt.plus_ratio != 1.0 && opt.type == "prodigy") {
    return r.Check(false, root["lora"], "plus_ratio",
                   "does not apply to prodigy: its step size is one estimate for every parameter (prodigyopt refuses "
                   "groups of other rates)");
  }
  return ParseEmaKeys(r, root, job.optimizer.ema);
}

}  // namespace baton

#include "core/train/adamw.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace baton {

namespace {
constexpr char kExpAvg[] = ".exp_avg";
constexpr char kExpAvgSq[] = ".exp_avg_sq";
}  // namespace

std::vector<std::string> MomentKeys(const std::string& param) { return {param + kExpAvg, param + kExpAvgSq}; }

std::string MomentParam(const std::string& key) {
  for (absl::string_view suffix : {kExpAvgSq, kExpAvg}) {
    if (absl::EndsWith(key, suffix) && key.size() > suffix.size()) return key.substr(0, key.size() - suffix.size());
  }
  return "";
}

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

double LearningRate(const OptimizerConfig& opt, int64_t step, int64_t total_steps) {
  return opt.lr * ScheduleFactor(opt, step, total_steps);
}

absl::Status AdamW::Step(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                         double lr) {
  if (params.empty()) return absl::OkStatus();
  const at::Device device = params.begin()->second.device();
  for (const auto& [name, p] : params) {
    if (!grads.count(name)) return absl::InvalidArgumentError(absl::StrCat("no gradient for ", name));
    if (grads.at(name).sizes() != p.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for ", name, " has the wrong shape"));
    }
    if (p.device() != device || p.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": AdamW steps fp32 parameters on one device (",
                                                     device.str(), "), not ", p.scalar_type(), " on ",
                                                     p.device().str()));
    }
  }
  ++steps_;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> ps, gs, ms, vs;
  for (auto& [name, p] : params) {
    const at::Tensor& g = grads.at(name);
    gs.push_back(g.device() == device && g.scalar_type() == at::kFloat ? g : g.to(device, at::kFloat));
    at::Tensor& m = exp_avg_[name];
    at::Tensor& v = exp_avg_sq_[name];
    if (!m.defined()) {
      m = at::zeros_like(p);
      v = at::zeros_like(p);
    } else if (m.device() != device) {  // loaded on the host (a checkpoint, LoadState): beside the params from now on
      m = m.to(device);
      v = v.to(device);
    }
    ps.push_back(p);
    ms.push_back(m);
    vs.push_back(v);
  }
  // The step count as the kernel takes it: a float tensor on the device per parameter (one, shared), filled from the
  // host's count without a copy.
  const at::Tensor step = at::full({}, static_cast<double>(steps_), at::TensorOptions(at::kFloat).device(device));
  const std::vector<at::Tensor> steps(ps.size(), step);
  at::_fused_adamw_(ps, gs, ms, vs, /*max_exp_avg_sqs=*/at::TensorList(), steps, lr, opt_.beta1, opt_.beta2,
                    opt_.weight_decay, opt_.eps, /*amsgrad=*/false, /*maximize=*/false);
  return absl::OkStatus();
}

std::map<std::string, at::Tensor> AdamW::StateDict() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, m] : exp_avg_) out[MomentKeys(name)[0]] = m;
  for (const auto& [name, v] : exp_avg_sq_) out[MomentKeys(name)[1]] = v;
  out[kAdamWStepKey] = at::scalar_tensor(steps_, at::kLong);
  return out;
}

absl::Status AdamW::LoadStateDict(const std::map<std::string, at::Tensor>& state) {
  exp_avg_.clear();
  exp_avg_sq_.clear();
  for (const auto& [key, t] : state) {
    const std::string param = MomentParam(key);
    if (key == kAdamWStepKey) {
      steps_ = t.item<int64_t>();
    } else if (!param.empty()) {
      (key == MomentKeys(param)[1] ? exp_avg_sq_ : exp_avg_)[param] = t.clone();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unexpected optimizer state key ", key));
    }
  }
  if (!state.count(kAdamWStepKey)) return absl::InvalidArgumentError("optimizer state lacks __step__");
  return absl::OkStatus();
}

}  // namespace baton

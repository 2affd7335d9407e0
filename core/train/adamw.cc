#include "core/train/adamw.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <cmath>

namespace baton {

double ClipGradNorm(std::map<std::string, at::Tensor>& grads, double max_norm) {
  double sq = 0.0;
  for (const auto& [name, g] : grads) sq += g.to(at::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (auto& [name, g] : grads) g = g * scale;
  }
  return norm;
}

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

double LearningRate(const OptimizerConfig& opt, int64_t step) {
  if (opt.warmup_steps > 0 && step < opt.warmup_steps) {
    return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup_steps);
  }
  return opt.lr;
}

absl::Status AdamW::Step(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                         double lr) {
  for (const auto& [name, p] : params) {
    if (!grads.count(name)) return absl::InvalidArgumentError(absl::StrCat("no gradient for ", name));
    if (grads.at(name).sizes() != p.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for ", name, " has the wrong shape"));
    }
  }
  ++steps_;
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(steps_));
  at::NoGradGuard no_grad;
  for (auto& [name, p] : params) {
    at::Tensor g = grads.at(name).to(p.device(), at::kFloat);
    at::Tensor& m = exp_avg_[name];
    at::Tensor& v = exp_avg_sq_[name];
    if (!m.defined()) {
      m = at::zeros_like(p);
      v = at::zeros_like(p);
    }
    m.mul_(opt_.beta1).add_(g, 1.0 - opt_.beta1);
    v.mul_(opt_.beta2).addcmul_(g, g, 1.0 - opt_.beta2);
    if (opt_.weight_decay > 0) p.mul_(1.0 - lr * opt_.weight_decay);
    at::Tensor denom = (v / bc2).sqrt_().add_(opt_.eps);
    p.addcdiv_(m, denom, -lr / bc1);
  }
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

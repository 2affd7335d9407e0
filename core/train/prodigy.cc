#include "core/train/prodigy.h"

#include <algorithm>
#include <cmath>

#include "core/train/optimizer_state.h"

namespace baton {
namespace {

double Beta3(const OptimizerConfig& opt) { return opt.prodigy.beta3 < 0 ? std::sqrt(opt.beta2) : opt.prodigy.beta3; }

// The gradient as the step takes it: with coupled weight decay (decouple: false) plus weight_decay·p.
at::Tensor Decayed(const OptimizerConfig& opt, const at::Tensor& g, const at::Tensor& p) {
  return opt.weight_decay != 0 && !opt.prodigy.decouple ? g.add(p, opt.weight_decay) : g;
}

// The weight of the gradient in s: (d/d0)·d under safeguard_warmup, else (d/d0)·dlr.
double SCoefficient(const OptimizerConfig& opt, const ProdigyScalars& s, double dlr) {
  return opt.prodigy.safeguard_warmup ? (s.d / opt.prodigy.d0) * s.d : (s.d / opt.prodigy.d0) * dlr;
}

}  // namespace

double ProdigyDlr(const OptimizerConfig& opt, const ProdigyScalars& s, double lr) {
  double bias_correction = 1;
  if (opt.prodigy.use_bias_correction) {
    const double n = static_cast<double>(s.k + 1);
    bias_correction = std::pow(1 - std::pow(opt.beta2, n), 0.5) / (1 - std::pow(opt.beta1, n));
  }
  return s.d * lr * bias_correction;
}

at::Tensor ProdigyTerms(const OptimizerConfig& opt, const ProdigyScalars& s, double dlr,
                        const std::map<std::string, at::Tensor>& state, const std::map<std::string, at::Tensor>& params,
                        const std::vector<at::Tensor>& grads, const std::vector<std::string>& names) {
  std::vector<at::Tensor> terms;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const at::Tensor& p = params.at(name);
    const at::Tensor g = Decayed(opt, grads[i], p);
    auto s_it = state.find(name + kProdigyS);
    auto p0_it = state.find(name + kProdigyP0);
    const at::Tensor p0 = p0_it != state.end() ? p0_it->second.to(p.device()) : p;
    const at::Tensor dot = at::dot(g.flatten(), (p0 - p).flatten());
    // s as ProdigyApply leaves it: the same operations, out of place.
    const at::Tensor s_new = s_it != state.end() ? s_it->second.to(p.device()).mul(Beta3(opt)) : at::zeros_like(p);
    s_new.add_(g, SCoefficient(opt, s, dlr));
    terms.push_back(at::stack({dot, s_new.abs().sum()}).to(at::kDouble));
  }
  return at::stack(terms);
}

bool ProdigyNext(const OptimizerConfig& opt, double dlr, const std::vector<double>& terms, ProdigyScalars& s) {
  const ProdigyConfig& c = opt.prodigy;
  double delta_numerator = 0.0, d_denom = 0.0;
  for (size_t i = 0; i + 1 < terms.size(); i += 2) {
    delta_numerator += (s.d / c.d0) * dlr * terms[i];
    d_denom += terms[i + 1];
  }
  if (d_denom == 0) return false;
  const double numerator = s.d_numerator * Beta3(opt) + delta_numerator;
  const double d_hat = c.d_coef * numerator / d_denom;
  double d = s.d;
  if (d == c.d0) d = std::max(d, d_hat);
  s.d_max = std::max(s.d_max, d_hat);
  s.d = std::min(s.d_max, d * c.growth_rate);
  s.d_numerator = numerator;
  return true;
}

void ProdigyApply(const OptimizerConfig& opt, const ProdigyScalars& before, const ProdigyScalars& after, bool apply,
                  double dlr, std::map<std::string, at::Tensor>& state, std::map<std::string, at::Tensor>& params,
                  std::vector<at::Tensor>& grads, const std::vector<std::string>& names) {
  const double beta1 = opt.beta1, beta2 = opt.beta2, d = before.d;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    at::Tensor& p = params.at(name);
    at::Tensor& g = grads[i];
    g = Decayed(opt, g, p);
    auto zeros = [&] { return at::zeros_like(p); };
    at::Tensor& s_acc = StateBeside(state, name + kProdigyS, p, zeros);
    (void)StateBeside(state, name + kProdigyP0, p, [&] { return p.clone(); });
    at::Tensor& exp_avg_sq = StateBeside(state, name + kExpAvgSq, p, zeros);
    if (beta1 > 0) StateBeside(state, name + kExpAvg, p, zeros).mul_(beta1).add_(g, d * (1 - beta1));
    exp_avg_sq.mul_(beta2).addcmul_(g, g, d * d * (1 - beta2));
    s_acc.mul_(Beta3(opt)).add_(g, SCoefficient(opt, before, dlr));
  }
  if (!apply) return;  // Σ|s| was 0: prodigyopt leaves the parameters and d as they are
  for (size_t i = 0; i < names.size(); ++i) {
    at::Tensor& p = params.at(names[i]);
    const at::Tensor denom = state.at(names[i] + kExpAvgSq).sqrt().add_(after.d * opt.eps);
    if (opt.weight_decay != 0 && opt.prodigy.decouple) p.add_(p, -opt.weight_decay * dlr);
    if (opt.beta1 > 0) {
      p.addcdiv_(state.at(names[i] + kExpAvg), denom, -dlr);
    } else {
      p.addcdiv_(grads[i], denom, -dlr * after.d);
    }
  }
}

}  // namespace baton

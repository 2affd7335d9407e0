#include "core/train/optimizer.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/device/bulk_copy.h"
#include "core/device/readback.h"
#include "core/tensor/shape.h"
#include "core/train/adamw8bit.h"
#include "core/train/grad_norm.h"
#include "core/train/optimizer_state.h"

namespace baton {

namespace {

// Adafactor factors the second moment of a matrix (transformers: len(shape) >= 2).
bool Factored(at::IntArrayRef shape) { return shape.size() >= 2; }

}  // namespace

std::string EmaKey(const std::string& param) { return param + kEma; }

const std::vector<std::string>& OptimizerTypes() {
  static const auto* types = new std::vector<std::string>{"adamw", "adamw8bit", "adafactor", "prodigy"};
  return *types;
}

double OptimizerStateCopies(const OptimizerConfig& opt) {
  double rule = 2;  // AdamW's moments
  // AdamW8bit's: a byte per element and 4 bytes per block of 256, twice (a small tensor's fp32 moments count 2 but
  // hold no weight in the sum).
  if (opt.type == "adamw8bit") rule = 2 * (1.0 + 4.0 / kQuantBlock) / 4.0;
  if (opt.type == "adafactor") rule = opt.adafactor.beta1 >= 0 ? 1 : 0;
  if (opt.type == "prodigy") rule = opt.beta1 > 0 ? 4 : 3;  // its moments, s and p0
  return rule + (opt.ema.enabled() ? 1 : 0);
}

std::vector<int64_t> StateShape(const std::string& key, at::IntArrayRef param_shape) {
  std::vector<int64_t> shape(param_shape.begin(), param_shape.end());
  if (absl::EndsWith(key, kExpAvgAbsmax) || absl::EndsWith(key, kExpAvgSqAbsmax)) {
    return {(c10::multiply_integers(param_shape) + kQuantBlock - 1) / kQuantBlock};  // a scale per block
  }
  if (absl::EndsWith(key, kExpAvgSqRow) && !shape.empty()) {
    shape.pop_back();  // shape[:-1]
  } else if (absl::EndsWith(key, kExpAvgSqCol) && shape.size() >= 2) {
    shape.erase(shape.end() - 2);  // shape[:-2] + shape[-1:]
  }
  return shape;
}

std::map<std::string, std::vector<int64_t>> StateKeysOf(const OptimizerConfig& opt, const std::string& param,
                                                        at::IntArrayRef shape) {
  std::vector<std::string> keys;
  if (opt.type == "prodigy") {
    keys = {param + kExpAvgSq, param + kProdigyS, param + kProdigyP0};
    if (opt.beta1 > 0) keys.push_back(param + kExpAvg);
  } else if (opt.type == "adafactor") {
    if (opt.adafactor.beta1 >= 0) keys.push_back(param + kExpAvg);
    if (Factored(shape)) {
      keys.push_back(param + kExpAvgSqRow);
      keys.push_back(param + kExpAvgSqCol);
    } else {
      keys.push_back(param + kExpAvgSq);
    }
  } else if (opt.type == "adamw8bit" && c10::multiply_integers(shape) >= opt.min_8bit_size) {
    keys = {param + kExpAvgQ8, param + kExpAvgAbsmax, param + kExpAvgSqQ8, param + kExpAvgSqAbsmax};
  } else {
    keys = {param + kExpAvg, param + kExpAvgSq};
  }
  if (opt.ema.enabled()) keys.push_back(EmaKey(param));
  std::map<std::string, std::vector<int64_t>> out;
  for (const std::string& key : keys) out[key] = StateShape(key, shape);
  return out;
}

namespace {
// Whether the optimizer of `opt` keeps state of this kind (a key's suffix) for some parameter: a matrix's, a
// vector's or a large tensor's (StateKeysOf's keys of a parameter named "").
bool KeepsKind(const OptimizerConfig& opt, const std::string& suffix) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{2},
                                            std::vector<int64_t>{std::max<int64_t>(opt.min_8bit_size, 1)}}) {
    if (StateKeysOf(opt, "", shape).count(suffix) > 0) return true;
  }
  return false;
}
}  // namespace

std::string StateParam(const std::string& key) {
  for (absl::string_view suffix : {kExpAvgSqRow, kExpAvgSqCol, kExpAvgSq, kExpAvg, kEma, kProdigyS, kProdigyP0,
                                   kExpAvgSqQ8, kExpAvgSqAbsmax, kExpAvgQ8, kExpAvgAbsmax}) {
    if (absl::EndsWith(key, suffix) && key.size() > suffix.size()) return key.substr(0, key.size() - suffix.size());
  }
  return "";
}

at::ScalarType StateDtype(const std::string& key) {
  return absl::EndsWith(key, kExpAvgQ8) || absl::EndsWith(key, kExpAvgSqQ8) ? at::kByte : at::kFloat;
}

bool IsOptimizerStateKey(const std::string& key) {
  return key == kOptimizerStepKey || absl::StartsWith(key, kProdigyScalarsPrefix) || !StateParam(key).empty();
}

// peft's create_loraplus_optimizer puts lora_B and every 1-D parameter (DoRA's magnitude) in the faster group.
bool IsUpProjection(const std::string& param) {
  return absl::EndsWith(param, "lora_B.weight") || absl::EndsWith(param, ".lora_magnitude_vector");
}

std::map<std::string, at::Tensor> EmaWeights(const std::map<std::string, at::Tensor>& params,
                                             const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, p] : params) {
    auto it = state.find(EmaKey(name));
    out[name] = it != state.end() ? it->second : p;
  }
  return out;
}

double EmaDecay(const EmaConfig& ema, int64_t step) {
  const int64_t k = std::max<int64_t>(0, step - ema.update_after_step - 1);
  if (k <= 0) return 0.0;
  const double s = static_cast<double>(k);
  double decay = ema.use_ema_warmup ? 1 - std::pow(1 + s / ema.inv_gamma, -ema.power) : (1 + s) / (10 + s);
  decay = std::min(decay, ema.decay);
  return std::max(decay, ema.min_decay);
}

absl::Status Optimizer::Step(std::map<std::string, at::Tensor>& params, const std::map<std::string, at::Tensor>& grads,
                             double lr) {
  return StepWith(params, grads, lr, nullptr);
}

absl::Status Optimizer::StepProdigy(std::map<std::string, at::Tensor>& params,
                                    const std::map<std::string, at::Tensor>& grads, double lr,
                                    const ProdigyOutcome& outcome) {
  if (opt_.type != "prodigy") return absl::FailedPreconditionError(absl::StrCat("a Prodigy step for ", opt_.type));
  return StepWith(params, grads, lr, &outcome);
}

at::Tensor Optimizer::ProdigyEstimate(const std::map<std::string, at::Tensor>& params,
                                      const std::map<std::string, at::Tensor>& grads, double lr) const {
  at::NoGradGuard no_grad;
  std::vector<std::string> names;
  std::vector<at::Tensor> g;
  for (const auto& [name, p] : params) {
    names.push_back(name);
    g.push_back(grads.at(name).to(p.device(), at::kFloat));
  }
  return ProdigyTerms(opt_, prodigy_, ProdigyDlr(opt_, prodigy_, lr), state_, params, g, names).flatten();
}

void Optimizer::MoveStateTo(at::Device device) {
  std::map<std::string, at::Tensor> away;
  for (const auto& [key, t] : state_) {
    if (t.defined() && t.device() != device) away[key] = t;
  }
  if (away.empty()) return;
  for (auto& [key, t] : UploadAll(away, device)) state_[key] = std::move(t);
}

absl::Status Optimizer::StepWith(std::map<std::string, at::Tensor>& params,
                                 const std::map<std::string, at::Tensor>& grads, double lr,
                                 const ProdigyOutcome* outcome) {
  if (params.empty()) return absl::OkStatus();
  const at::Device device = params.begin()->second.device();
  for (const auto& [name, p] : params) {
    if (!grads.count(name)) return absl::InvalidArgumentError(absl::StrCat("no gradient for ", name));
    if (grads.at(name).sizes() != p.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for ", name, " has the wrong shape"));
    }
    if (p.device() != device || p.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the optimizer steps fp32 parameters on one device (",
                                                     device.str(), "), not ", p.scalar_type(), " on ",
                                                     p.device().str()));
    }
  }
  at::NoGradGuard no_grad;
  MoveStateTo(device);
  if (opt_.ema.enabled() && steps_ == 0) {  // EMAModel's shadow: a copy of the parameters it was made from
    for (const auto& [name, p] : params) state_[EmaKey(name)] = p.clone();
  }
  ++steps_;
  // LoRA+: two groups at their own rates, each one call of the rule (parameter by parameter: the same bits as one).
  std::vector<std::string> groups[2];
  std::vector<at::Tensor> group_grads[2];
  for (const auto& [name, p] : params) {
    const at::Tensor& g = grads.at(name);
    const int up = opt_.plus_ratio != 1.0 && IsUpProjection(name) ? 1 : 0;
    groups[up].push_back(name);
    group_grads[up].push_back(g.device() == device && g.scalar_type() == at::kFloat ? g : g.to(device, at::kFloat));
  }
  if (opt_.type == "prodigy") {  // one group: LoRA+ is refused (prodigyopt takes one rate)
    ProdigyStep(params, group_grads[0], groups[0], lr, outcome);
    if (opt_.ema.enabled()) EmaStep(params);
    return absl::OkStatus();
  }
  for (int up = 0; up < 2; ++up) {
    if (groups[up].empty()) continue;
    const double rate = up ? lr * opt_.plus_ratio : lr;
    if (opt_.type == "adafactor") {
      AdafactorStep(params, group_grads[up], groups[up], rate);
    } else if (opt_.type == "adamw8bit") {
      AdamW8bitStep(params, group_grads[up], groups[up], rate);
    } else {
      AdamWStep(params, group_grads[up], groups[up], rate);
    }
  }
  if (opt_.ema.enabled()) EmaStep(params);
  return absl::OkStatus();
}

at::Tensor& Optimizer::StateTensor(const std::string& key, at::IntArrayRef shape, const at::Tensor& like) {
  return StateBeside(state_, key, like, [&] { return at::zeros(shape, like.options()); });
}

void Optimizer::AdamWStep(std::map<std::string, at::Tensor>& params, const std::vector<at::Tensor>& grads,
                          const std::vector<std::string>& names, double lr) {
  std::vector<at::Tensor> ps, ms, vs;
  for (const std::string& name : names) {
    at::Tensor& p = params.at(name);
    ps.push_back(p);
    ms.push_back(StateTensor(name + kExpAvg, p.sizes(), p));
    vs.push_back(StateTensor(name + kExpAvgSq, p.sizes(), p));
  }
  // The step count as the kernel takes it: a float tensor on the device per parameter (one, shared), filled from the
  // host's count without a copy.
  const at::Tensor step =
      at::full({}, static_cast<double>(steps_), at::TensorOptions(at::kFloat).device(ps.front().device()));
  const std::vector<at::Tensor> steps(ps.size(), step);
  at::_fused_adamw_(ps, grads, ms, vs, /*max_exp_avg_sqs=*/at::TensorList(), steps, lr, opt_.beta1, opt_.beta2,
                    opt_.weight_decay, opt_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

void Optimizer::AdamW8bitStep(std::map<std::string, at::Tensor>& params, const std::vector<at::Tensor>& grads,
                              const std::vector<std::string>& names, double lr) {
  // bitsandbytes' AdamW8bit: parameter by parameter, 8-bit moments from min_8bit_size elements, fp32 below.
  const at::Device device = params.at(names.front()).device();
  if (!codes_ || codes_->first.code.device() != device) {
    codes_.emplace(QuantCode::Make(/*is_signed=*/true, device), QuantCode::Make(/*is_signed=*/false, device));
  }
  const AdamArgs args{lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, steps_};
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    at::Tensor& p = params.at(name);
    const auto keys = StateKeysOf(opt_, name, p.sizes());
    if (!keys.count(name + kExpAvgQ8)) {
      Adam32bitStep(p, grads[i], StateTensor(name + kExpAvg, p.sizes(), p), StateTensor(name + kExpAvgSq, p.sizes(), p),
                    args);
      continue;
    }
    auto state = [&](const char* suffix) -> at::Tensor& {
      const std::string key = name + suffix;
      return StateBeside(state_, key, p,
                         [&] { return at::zeros(StateShape(key, p.sizes()), p.options().dtype(StateDtype(key))); });
    };
    ::baton::AdamW8bitStep(p, grads[i], state(kExpAvgQ8), state(kExpAvgAbsmax), state(kExpAvgSqQ8),
                           state(kExpAvgSqAbsmax), codes_->first, codes_->second, args);
  }
}

void Optimizer::AdafactorStep(std::map<std::string, at::Tensor>& params, const std::vector<at::Tensor>& grads,
                              const std::vector<std::string>& names, double lr) {
  // transformers' Adafactor.step for each parameter, op for op. `lr` is its _get_lr's relative step (LearningRate:
  // the schedule's rate, or with relative_step min(1e-2, 1/√k)); with scale_parameter times max(eps2, RMS(p)), kept
  // on the device (no readback) and rounded as transformers rounds it.
  const AdafactorConfig& c = opt_.adafactor;
  const double beta2t = 1.0 - std::pow(static_cast<double>(steps_), c.decay_rate);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    at::Tensor& p = params.at(name);
    const at::Tensor& g = grads[i];
    const double root_numel = std::sqrt(static_cast<double>(p.numel()));
    at::Tensor rate = at::full({}, c.scale_parameter ? c.eps2 * lr : lr, p.options());
    if (c.scale_parameter) {
      const at::Tensor rms = at::norm(p, 2) / root_numel;
      rate = at::where(rms > c.eps2, rms * lr, rate);
    }
    at::Tensor update = g.pow(2) + c.eps1;
    if (Factored(p.sizes())) {
      at::Tensor& row = StateTensor(name + kExpAvgSqRow, StateShape(kExpAvgSqRow, p.sizes()), p);
      at::Tensor& col = StateTensor(name + kExpAvgSqCol, StateShape(kExpAvgSqCol, p.sizes()), p);
      row.mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
      col.mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
      const at::Tensor r_factor = (row / row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
      const at::Tensor c_factor = col.unsqueeze(-2).rsqrt();
      update = at::mul(r_factor, c_factor);
      update.mul_(g);
    } else {
      at::Tensor& v = StateTensor(name + kExpAvgSq, p.sizes(), p);
      v.mul_(beta2t).add_(update, 1.0 - beta2t);
      update = v.rsqrt().mul_(g);
    }
    update.div_((at::norm(update, 2) / root_numel / c.clip_threshold).clamp_(1.0));
    update.mul_(rate);
    if (c.beta1 >= 0) {
      at::Tensor& m = StateTensor(name + kExpAvg, p.sizes(), p);
      m.mul_(c.beta1).add_(update, 1 - c.beta1);
      update = m;
    }
    if (opt_.weight_decay != 0) p.add_(p * (rate * -opt_.weight_decay));
    p.add_(-update);
  }
}

void Optimizer::ProdigyStep(std::map<std::string, at::Tensor>& params, std::vector<at::Tensor>& grads,
                            const std::vector<std::string>& names, double lr, const ProdigyOutcome* given) {
  if (lr <= 0) return;  // prodigyopt at rate 0 (a warm-up's first step): no moment, no estimate, no update
  const double dlr = ProdigyDlr(opt_, prodigy_, lr);
  ProdigyOutcome outcome;
  if (given != nullptr) {
    outcome = *given;
  } else {
    const at::Tensor terms = ReadBack(ProdigyTerms(opt_, prodigy_, dlr, state_, params, grads, names).flatten());
    const double* t = terms.data_ptr<double>();
    outcome.scalars = prodigy_;
    outcome.apply = ProdigyNext(opt_, dlr, std::vector<double>(t, t + terms.numel()), outcome.scalars);
  }
  ProdigyApply(opt_, prodigy_, outcome.scalars, outcome.apply, dlr, state_, params, grads, names);
  if (!outcome.apply) return;
  prodigy_ = outcome.scalars;
  ++prodigy_.k;
}

void Optimizer::EmaStep(const std::map<std::string, at::Tensor>& params) {
  // EMAModel.step: s -= (1 − decay)·(s − p), with the same tensor operations (so the same bits).
  const double one_minus_decay = 1.0 - EmaDecay(opt_.ema, steps_);
  for (const auto& [name, p] : params) {
    at::Tensor& s = StateTensor(EmaKey(name), p.sizes(), p);
    s.sub_(at::mul(s - p, one_minus_decay));
  }
}

std::map<std::string, at::Tensor> Optimizer::StateDict() const {
  std::map<std::string, at::Tensor> out = state_;
  out[kOptimizerStepKey] = at::scalar_tensor(steps_, at::kLong);
  if (opt_.type == "prodigy") {
    out[kProdigyD] = at::scalar_tensor(prodigy_.d, at::kDouble);
    out[kProdigyDMax] = at::scalar_tensor(prodigy_.d_max, at::kDouble);
    out[kProdigyDNumerator] = at::scalar_tensor(prodigy_.d_numerator, at::kDouble);
    out[kProdigyK] = at::scalar_tensor(prodigy_.k, at::kLong);
  }
  return out;
}

absl::Status Optimizer::LoadStateDict(const std::map<std::string, at::Tensor>& state) {
  if (!state.count(kOptimizerStepKey)) return absl::InvalidArgumentError("optimizer state lacks __step__");
  std::map<std::string, at::Tensor> loaded;
  ProdigyScalars prodigy = ProdigyScalars::Initial(opt_.prodigy);
  for (const auto& [key, t] : state) {
    if (key == kOptimizerStepKey) continue;
    if (absl::StartsWith(key, kProdigyScalarsPrefix)) {
      if (opt_.type != "prodigy") {
        return absl::InvalidArgumentError(
            absl::StrCat("the optimizer state holds ", key, ", Prodigy's, not ", opt_.type, "'s"));
      }
      if (key == kProdigyD) prodigy.d = t.item<double>();
      if (key == kProdigyDMax) prodigy.d_max = t.item<double>();
      if (key == kProdigyDNumerator) prodigy.d_numerator = t.item<double>();
      if (key == kProdigyK) prodigy.k = t.item<int64_t>();
      continue;
    }
    const std::string param = StateParam(key);
    if (param.empty()) return absl::InvalidArgumentError(absl::StrCat("unexpected optimizer state key ", key));
    if (!KeepsKind(opt_, key.substr(param.size()))) {  // (the shapes: CheckState)
      if (key == EmaKey(param)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the optimizer state holds an EMA (", key, ") but the job keeps none (no `ema:`)"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("the optimizer state holds ", key, ", which the job's optimizer (", opt_.type, ") keeps not"));
    }
    loaded[key] = t.clone();
  }
  const int64_t steps = state.at(kOptimizerStepKey).item<int64_t>();
  if (opt_.ema.enabled() && steps > 0) {
    for (const auto& [key, t] : loaded) {
      if (!loaded.count(EmaKey(StateParam(key)))) {
        return absl::InvalidArgumentError(absl::StrCat("the job keeps an EMA (`ema:`) but the optimizer state of step ",
                                                       steps, " holds none for ", StateParam(key),
                                                       " (a run begun without `ema:`)"));
      }
    }
  }
  state_ = std::move(loaded);
  steps_ = steps;
  prodigy_ = prodigy;
  return absl::OkStatus();
}

absl::Status Optimizer::CheckState(const std::map<std::string, at::Tensor>& params,
                                   const std::map<std::string, at::Tensor>& state, const std::string& where) const {
  auto step = state.find(kOptimizerStepKey);
  if (step == state.end()) return absl::DataLossError(absl::StrCat(where, "lacks __step__"));
  const bool stepped = step->second.item<int64_t>() > 0;
  if (opt_.type == "prodigy" && stepped) {
    for (const char* key : {kProdigyD, kProdigyDMax, kProdigyDNumerator, kProdigyK}) {
      if (!state.count(key)) return absl::DataLossError(absl::StrCat(where, "lacks ", key));
    }
  }
  std::set<std::string> kept;
  for (const auto& [name, p] : params) {
    for (const auto& [key, shape] : StateKeysOf(opt_, name, p.sizes())) {
      kept.insert(key);
      auto it = state.find(key);
      if (it == state.end()) {
        if (stepped) return absl::DataLossError(absl::StrCat(where, "lacks ", key));
        continue;
      }
      if (it->second.scalar_type() != StateDtype(key) || it->second.sizes() != at::IntArrayRef(shape)) {
        return absl::DataLossError(absl::StrCat(where, key, " is ", c10::toString(it->second.scalar_type()), " ",
                                                ShapeString(it->second.sizes()), ", expected ",
                                                c10::toString(StateDtype(key)), " ", ShapeString(shape)));
      }
    }
  }
  for (const auto& [key, t] : state) {
    if (key == kOptimizerStepKey || kept.count(key)) continue;
    if (opt_.type == "prodigy" && absl::StartsWith(key, kProdigyScalarsPrefix)) continue;
    if (!params.count(StateParam(key))) {
      return absl::DataLossError(absl::StrCat(where, "has ", key, ", which belongs to no LoRA tensor"));
    }
    return absl::DataLossError(absl::StrCat(where, "has ", key, ", which the job's optimizer (", opt_.type,
                                            opt_.ema.enabled() ? ", with an EMA" : ", without an EMA",
                                            ") does not keep"));
  }
  return absl::OkStatus();
}

absl::Status ClipAndStep(Optimizer& optimizer, double clip, double norm, std::map<std::string, at::Tensor>& params,
                         const std::map<std::string, at::Tensor>& grads, double lr) {
  std::vector<at::Tensor> list;
  for (const auto& [name, g] : grads) list.push_back(g);
  ScaleGradients(list, ClipFactor(norm, clip));
  return optimizer.Step(params, grads, lr);
}

}  // namespace baton

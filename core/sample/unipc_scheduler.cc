#include "core/sample/unipc_scheduler.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>

#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {
namespace {

// numpy's float64 arithmetic rounds every product before the next addition; `volatile` keeps the compiler from
// fusing a·b + c into one FMA (clang's default -ffp-contract=on does on targets with FMA), which rounds once.
double Mul(double a, double b) {
  volatile double p = a * b;
  return p;
}

// np.linspace(start, stop, num) (endpoint): start + i·((stop − start)/(num − 1)), the last set to stop.
std::vector<double> NumpyLinspace(double start, double stop, int64_t num) {
  std::vector<double> y(num);
  if (num == 1) {
    y[0] = start;
    return y;
  }
  const double delta = stop - start;
  const double step = delta / static_cast<double>(num - 1);
  for (int64_t i = 0; i < num; ++i) {
    if (step == 0) {
      y[i] = Mul(static_cast<double>(i) / static_cast<double>(num - 1), delta) + start;
    } else {
      y[i] = Mul(static_cast<double>(i), step) + start;
    }
  }
  y[num - 1] = stop;
  return y;
}

// k·s / (1 + (k − 1)·s) in float64, operation by operation as numpy evaluates it.
void ShiftInPlace(double k, std::vector<double>* s) {
  for (double& v : *s) {
    const double numerator = Mul(k, v);
    const double denominator = 1.0 + Mul(k - 1.0, v);
    v = numerator / denominator;
  }
}

// stretch_shift_to_terminal: 1 − (1 − s) / ((1 − s_last) / (1 − terminal)).
void StretchToTerminal(double terminal, std::vector<double>* s) {
  const double scale = (1.0 - s->back()) / (1.0 - terminal);
  for (double& v : *s) v = 1.0 - (1.0 - v) / scale;
}

// shift_terminal on a 1-step schedule divides 0 by 0 (diffusers returns a NaN σ).
absl::Status CheckFinite(const FlowSchedulerConfig& c, const std::vector<double>& s) {
  for (double v : s) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.ClassName(), ": the schedule has a non-finite σ",
                       c.shift_terminal.has_value() ? " (shift_terminal needs at least 2 steps)" : ""));
    }
  }
  return absl::OkStatus();
}

at::Tensor ToFloat32(const std::vector<double>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return t;
}

absl::Status CheckCommonConfig(const FlowSchedulerConfig& c, int64_t steps) {
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_inference_steps must be at least 1, got ", steps));
  }
  if (c.num_train_timesteps < 1 || !(c.shift > 0) || !std::isfinite(c.shift)) {
    return absl::InvalidArgumentError(absl::StrCat(c.ClassName(), ": num_train_timesteps (", c.num_train_timesteps,
                                                   ") and shift (", c.shift, ") must be positive"));
  }
  if (c.shift_terminal.has_value() && *c.shift_terminal == 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(c.ClassName(), ": shift_terminal must differ from 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FlowScheduler::CheckStep(const at::Tensor& model_output, const at::Tensor& sample) const {
  if (!timesteps_.defined()) return absl::FailedPreconditionError("scheduler step before SetTimesteps");
  if (step_index_ >= num_inference_steps()) {
    return absl::FailedPreconditionError(
        absl::StrCat("scheduler step ", step_index_ + 1, " of a ", num_inference_steps(), "-step schedule"));
  }
  if (!model_output.defined() || !sample.defined()) {
    return absl::InvalidArgumentError("scheduler step: model_output and sample must be defined tensors");
  }
  if (model_output.sizes() != sample.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler step: model_output ", c10::str(model_output.sizes()),
                                                   " and sample ", c10::str(sample.sizes()), " differ in shape"));
  }
  if (!at::isFloatingType(model_output.scalar_type()) || !at::isFloatingType(sample.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler step: model_output (",
                                                   c10::toString(model_output.scalar_type()), ") and sample (",
                                                   c10::toString(sample.scalar_type()), ") must be floating point"));
  }
  if (model_output.device() != sample.device()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler step: model_output on ", model_output.device().str(),
                                                   ", sample on ", sample.device().str()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------------------------
// UniPCMultistepScheduler

UniPCMultistepScheduler::UniPCMultistepScheduler(FlowSchedulerConfig config) : FlowScheduler(std::move(config)) {
  TORCH_CHECK(config_.scheduler_class == FlowSchedulerClass::kUniPCMultistep,
              "not a UniPC config: ", config_.ClassName());
}

absl::Status UniPCMultistepScheduler::SetTimesteps(int64_t num_inference_steps) {
  RETURN_IF_ERROR(CheckCommonConfig(config_, num_inference_steps));
  if (config_.solver_order < 1) {
    return absl::InvalidArgumentError(absl::StrCat("solver_order must be at least 1, got ", config_.solver_order));
  }
  RETURN_IF_ERROR(CheckFinalStep(config_, "UniPCMultistepScheduler"));
  const double T = static_cast<double>(config_.num_train_timesteps);
  // sigmas = np.linspace(1, 1 / T, N + 1)[:-1], shifted (and stretched), σ₀ nudged off 1 so ln α₀ is finite.
  std::vector<double> s = NumpyLinspace(1.0, 1.0 / T, num_inference_steps + 1);
  s.pop_back();
  ShiftInPlace(config_.shift, &s);
  if (config_.shift_terminal.has_value()) StretchToTerminal(*config_.shift_terminal, &s);
  RETURN_IF_ERROR(CheckFinite(config_, s));
  constexpr double kEps = 1e-6;
  if (std::fabs(s[0] - 1.0) < kEps) s[0] -= kEps;
  timesteps_ = at::empty({num_inference_steps}, at::kLong);
  for (int64_t i = 0; i < num_inference_steps; ++i) {
    timesteps_.data_ptr<int64_t>()[i] = static_cast<int64_t>(s[i] * T);  // float64 → int64 truncates, as torch
  }
  s.push_back(config_.final_sigmas_type == FinalSigmasType::kZero ? 0.0 : s.back());
  sigmas_ = ToFloat32(s);
  Reset();
  return absl::OkStatus();
}

void UniPCMultistepScheduler::Reset() {
  step_index_ = 0;
  model_outputs_.assign(config_.solver_order, at::Tensor());
  last_sample_ = at::Tensor();
  lower_order_nums_ = 0;
  this_order_ = 0;
}

at::Tensor UniPCMultistepScheduler::Lambda(int64_t sigma_index, const at::Device& device) const {
  at::Tensor sigma = sigmas_[sigma_index].to(device);
  at::Tensor alpha = at::rsub(sigma, 1);  // _sigma_to_alpha_sigma_t for flow sigmas: α = 1 − σ
  return at::log(alpha) - at::log(sigma);
}

namespace {

// The B(h) coefficients both updates build from h (0-d): hh = −h (predict_x0), h·φ₁ = expm1(hh), B(h), and for
// k = 1..order the rows R_k = rks^(k−1) and b_k = h·φ_k·k! / B(h) (rks: [order] fp32).
struct BhCoefficients {
  at::Tensor h_phi_1;  // 0-d
  at::Tensor B_h;      // 0-d
  at::Tensor R;        // [order, order]
  at::Tensor b;        // [order]
};

BhCoefficients Coefficients(const at::Tensor& h, const at::Tensor& rks, int64_t order, UniPCSolverType type,
                            bool need_system) {
  BhCoefficients c;
  at::Tensor hh = -h;
  c.h_phi_1 = at::expm1(hh);
  c.B_h = type == UniPCSolverType::kBh1 ? hh : at::expm1(hh);
  if (!need_system) return c;
  at::Tensor h_phi_k = c.h_phi_1 / hh - 1;
  int64_t factorial_i = 1;
  std::vector<at::Tensor> R, b;
  for (int64_t i = 1; i <= order; ++i) {
    R.push_back(at::pow(rks, i - 1));
    b.push_back(h_phi_k * factorial_i / c.B_h);
    factorial_i *= i + 1;
    h_phi_k = h_phi_k / hh - 1.0 / static_cast<double>(factorial_i);
  }
  c.R = at::stack(R);
  c.b = at::stack(b);
  return c;
}

}  // namespace

at::Tensor UniPCMultistepScheduler::Predictor(const at::Tensor& x, int64_t order) const {
  const at::Device device = x.device();
  const at::Tensor& m0 = model_outputs_.back();
  at::Tensor sigma_t = sigmas_[step_index_ + 1].to(device);
  at::Tensor sigma_s0 = sigmas_[step_index_].to(device);
  at::Tensor alpha_t = at::rsub(sigma_t, 1);
  at::Tensor lambda_s0 = Lambda(step_index_, device);
  at::Tensor h = Lambda(step_index_ + 1, device) - lambda_s0;

  std::vector<at::Tensor> rks, D1s;
  for (int64_t i = 1; i < order; ++i) {
    const at::Tensor& mi = model_outputs_[model_outputs_.size() - 1 - i];
    at::Tensor rk = (Lambda(step_index_ - i, device) - lambda_s0) / h;
    rks.push_back(rk);
    D1s.push_back((mi - m0) / rk);
  }
  rks.push_back(at::ones({}, at::TensorOptions().device(device)));
  BhCoefficients c = Coefficients(h, at::stack(rks), order, config_.solver_type, /*need_system=*/order > 2);

  at::Tensor x_t = sigma_t / sigma_s0 * x - alpha_t * c.h_phi_1 * m0;
  if (!D1s.empty()) {
    at::Tensor rhos_p;
    if (order == 2) {
      rhos_p = at::ones({1}, at::TensorOptions().dtype(x.scalar_type()).device(device)) * 0.5;
    } else {
      const int64_t k = order - 1;
      rhos_p = at::linalg_solve(c.R.slice(0, 0, k).slice(1, 0, k), c.b.slice(0, 0, k)).to(device).to(x.scalar_type());
    }
    at::Tensor pred_res = at::einsum("k,bkc...->bc...", {rhos_p, at::stack(D1s, 1)});
    x_t = x_t - alpha_t * c.B_h * pred_res;
  }
  // diffusers subtracts α_t·B(h)·0 when there is no history term: the same values up to the sign of a zero.
  return x_t.to(x.scalar_type());
}

at::Tensor UniPCMultistepScheduler::Corrector(const at::Tensor& model_t, const at::Tensor& x,
                                              const at::Tensor& this_sample, int64_t order) const {
  const at::Device device = this_sample.device();
  const at::Tensor& m0 = model_outputs_.back();
  at::Tensor sigma_t = sigmas_[step_index_].to(device);
  at::Tensor sigma_s0 = sigmas_[step_index_ - 1].to(device);
  at::Tensor alpha_t = at::rsub(sigma_t, 1);
  at::Tensor lambda_s0 = Lambda(step_index_ - 1, device);
  at::Tensor h = Lambda(step_index_, device) - lambda_s0;

  std::vector<at::Tensor> rks, D1s;
  for (int64_t i = 1; i < order; ++i) {
    const at::Tensor& mi = model_outputs_[model_outputs_.size() - 1 - i];
    at::Tensor rk = (Lambda(step_index_ - (i + 1), device) - lambda_s0) / h;
    rks.push_back(rk);
    D1s.push_back((mi - m0) / rk);
  }
  rks.push_back(at::ones({}, at::TensorOptions().device(device)));
  BhCoefficients c = Coefficients(h, at::stack(rks), order, config_.solver_type, /*need_system=*/order > 1);

  at::Tensor rhos_c = order == 1 ? at::ones({1}, at::TensorOptions().dtype(x.scalar_type()).device(device)) * 0.5
                                 : at::linalg_solve(c.R, c.b).to(device).to(x.scalar_type());
  at::Tensor x_t_ = sigma_t / sigma_s0 * x - alpha_t * c.h_phi_1 * m0;
  at::Tensor D1_t = model_t - m0;
  at::Tensor correction = rhos_c[order - 1] * D1_t;
  if (!D1s.empty()) {
    at::Tensor corr_res = at::einsum("k,bkc...->bc...", {rhos_c.slice(0, 0, order - 1), at::stack(D1s, 1)});
    correction = corr_res + correction;
  }
  // (diffusers adds its integer corr_res 0 when there is no history term: equal up to the sign of a zero.)
  return (x_t_ - alpha_t * c.B_h * correction).to(x.scalar_type());
}

absl::StatusOr<at::Tensor> UniPCMultistepScheduler::Step(const at::Tensor& model_output, const at::Tensor& sample) {
  RETURN_IF_ERROR(CheckStep(model_output, sample));
  if (sample.dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("UniPC step: sample ", c10::str(sample.sizes()),
                                                   " must be [B, C, ...] (at least 2 dims, as diffusers' einsum)"));
  }
  at::Tensor prev_sample;
  RETURN_IF_ERROR(TorchCall("UniPC step", [&] {
    const bool use_corrector = step_index_ > 0 && last_sample_.defined() &&
                               std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(),
                                         step_index_ - 1) == config_.disable_corrector.end();
    // convert_model_output (flow_prediction, predict_x0): σ stays a CPU 0-d fp32 tensor there, as in diffusers.
    at::Tensor x0_pred = sample - sigmas_[step_index_] * model_output;
    at::Tensor x = sample;
    if (use_corrector) x = Corrector(x0_pred, last_sample_, sample, this_order_);

    std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
    model_outputs_.back() = x0_pred;

    const int64_t order = config_.lower_order_final
                              ? std::min(config_.solver_order, num_inference_steps() - step_index_)
                              : config_.solver_order;
    this_order_ = std::min(order, lower_order_nums_ + 1);  // warm-up: the history holds lower_order_nums_ x̂0
    last_sample_ = x;
    prev_sample = Predictor(x, this_order_);
    if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
  }));
  ++step_index_;
  return prev_sample;
}

// ---------------------------------------------------------------------------------------------------------------
// FlowMatchEulerDiscreteScheduler

FlowMatchEulerScheduler::FlowMatchEulerScheduler(FlowSchedulerConfig config) : FlowScheduler(std::move(config)) {
  TORCH_CHECK(config_.scheduler_class == FlowSchedulerClass::kFlowMatchEulerDiscrete,
              "not a FlowMatchEuler config: ", config_.ClassName());
}

absl::Status FlowMatchEulerScheduler::SetTimesteps(int64_t num_inference_steps) {
  RETURN_IF_ERROR(CheckCommonConfig(config_, num_inference_steps));
  const int64_t T = config_.num_train_timesteps;
  const double k = config_.shift;
  // __init__: the training table in fp32 torch ops, shifted once; its ends are sigma_max and sigma_min.
  at::Tensor train = at::flip(at::arange(1, T + 1, at::kFloat), {0}) / T;
  train = k * train / (1 + (k - 1) * train);
  const double sigma_max = train[0].item<float>();
  const double sigma_min = train[T - 1].item<float>();
  // set_timesteps: float64 numpy, shifted a second time.
  std::vector<double> s = NumpyLinspace(Mul(sigma_max, static_cast<double>(T)), Mul(sigma_min, static_cast<double>(T)),
                                        num_inference_steps);
  for (double& v : s) v = v / static_cast<double>(T);
  ShiftInPlace(k, &s);
  if (config_.shift_terminal.has_value()) StretchToTerminal(*config_.shift_terminal, &s);
  RETURN_IF_ERROR(CheckFinite(config_, s));
  at::Tensor sigmas = ToFloat32(s);
  timesteps_ = sigmas * T;
  sigmas_ = at::cat({sigmas, at::zeros({1}, at::kFloat)});
  Reset();
  return absl::OkStatus();
}

void FlowMatchEulerScheduler::Reset() { step_index_ = 0; }

absl::StatusOr<at::Tensor> FlowMatchEulerScheduler::Step(const at::Tensor& model_output, const at::Tensor& sample) {
  RETURN_IF_ERROR(CheckStep(model_output, sample));
  at::Tensor prev_sample;
  RETURN_IF_ERROR(TorchCall("FlowMatchEuler step", [&] {
    // diffusers keeps these σ on the sampling device (set_timesteps(device=...)): a 0-d device tensor, not a CPU
    // scalar, so a bf16 model_output sees dt rounded to bf16 exactly as there.
    const at::Device device = model_output.device();
    at::Tensor dt = sigmas_[step_index_ + 1].to(device) - sigmas_[step_index_].to(device);
    prev_sample = (sample.to(at::kFloat) + dt * model_output).to(model_output.scalar_type());
  }));
  ++step_index_;
  return prev_sample;
}

std::unique_ptr<FlowScheduler> MakeFlowScheduler(const FlowSchedulerConfig& config) {
  if (config.scheduler_class == FlowSchedulerClass::kFlowMatchEulerDiscrete) {
    return std::make_unique<FlowMatchEulerScheduler>(config);
  }
  return std::make_unique<UniPCMultistepScheduler>(config);
}

}  // namespace baton

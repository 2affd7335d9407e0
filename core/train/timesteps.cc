#include "core/train/timesteps.h"

#include <cmath>
#include <string>

namespace baton {

at::Tensor SampleTimestepDensity(const TimestepConfig& config, int64_t batch, const at::Generator& gen) {
  const auto fp32 = at::TensorOptions().dtype(at::kFloat);
  if (config.sampling == "logit_normal") {
    return at::sigmoid(at::normal(config.logit_mean, config.logit_std, {batch}, gen, fp32));
  }
  at::Tensor u = at::rand({batch}, gen, fp32);
  if (config.sampling == "mode") {
    // Written in diffusers' operation order so float32 rounding matches.
    u = 1 - u - config.mode_scale * (at::cos(M_PI * u / 2).pow(2) - 1 + u);
  }
  return u;
}

at::Tensor DensityToSigma(const at::Tensor& u) {
  at::Tensor index = (u * kNumTrainTimesteps).to(at::kLong).clamp(0, kNumTrainTimesteps - 1);
  return (kNumTrainTimesteps - index).to(at::kFloat) / kNumTrainTimesteps;
}

double Flux2EmpiricalMu(int64_t image_seq_len, int64_t num_steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333;
  const double a2 = 0.00016927, b2 = 0.45666666;
  const double n = static_cast<double>(image_seq_len);
  if (image_seq_len > 4300) return a2 * n + b2;
  const double m_200 = a2 * n + b2;
  const double m_10 = a1 * n + b1;
  const double a = (m_200 - m_10) / 190.0;
  const double b = m_200 - 200.0 * a;
  return a * static_cast<double>(num_steps) + b;
}

double Flux1LinearMu(int64_t image_seq_len) {
  const double m = (1.15 - 0.5) / (4096 - 256);
  const double b = 0.5 - m * 256;
  return static_cast<double>(image_seq_len) * m + b;
}

double TimestepShift(const TimestepConfig& config, int64_t image_tokens) {
  if (config.shift == "none") return 1.0;
  if (config.shift == "flux2_empirical") return std::exp(Flux2EmpiricalMu(image_tokens, config.shift_steps));
  if (config.shift == "flux1_linear") return std::exp(Flux1LinearMu(image_tokens));
  return std::stod(config.shift);  // validated as a positive number by ParseJobYaml
}

at::Tensor ShiftTimesteps(const at::Tensor& t, double shift) { return shift * t / (1 + (shift - 1) * t); }

at::Tensor SampleTimesteps(const TimestepConfig& config, int64_t batch, int64_t image_tokens,
                           const at::Generator& gen) {
  at::Tensor sigma = DensityToSigma(SampleTimestepDensity(config, batch, gen));
  const double shift = TimestepShift(config, image_tokens);
  at::Tensor t = shift == 1.0 ? sigma : ShiftTimesteps(sigma, shift);
  if (config.min == 0.0 && config.max == 1.0) return t;  // bitwise as drawn
  return t * (config.max - config.min) + config.min;
}

}  // namespace baton

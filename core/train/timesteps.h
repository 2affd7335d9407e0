// Training timesteps for flow matching, drawn as diffusers' FLUX.2 LoRA trainer draws them
// (examples/dreambooth/train_dreambooth_lora_flux2.py): u from `compute_density_for_timestep_sampling`
// (diffusers.training_utils), index = floor(u·1000) into FlowMatchEulerDiscreteScheduler's training table,
// sigma = (1000 − index)/1000. Large u is therefore little noise, which fixes the sign of `logit_mean`.
// The trainer applies no shift; `shift` optionally applies the scheduler's time shift
// t' = e^mu·t / (e^mu + 1/t − 1) = s·t / (1 + (s − 1)·t), s = e^mu, to the sigma. The schemes are in job.h.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "core/train/job.h"

namespace baton {

constexpr int64_t kNumTrainTimesteps = 1000;  // FlowMatchEulerDiscreteScheduler's num_train_timesteps

// [batch] fp32 u from `gen`, with the same draws and arithmetic as compute_density_for_timestep_sampling
// given a torch.Generator in the same state (so a referee can demand equality).
at::Tensor SampleTimestepDensity(const TimestepConfig& config, int64_t batch, const at::Generator& gen);

// u → the trainer's sigma (1000 − index)/1000 in [0.001, 1]; index clamped to [0, 999] (u = 1 would be out
// of the scheduler's table in diffusers).
at::Tensor DensityToSigma(const at::Tensor& u);

// compute_empirical_mu of diffusers' pipeline_flux2.py: FLUX.2's inference mu, fitted on image_seq_len and
// the number of inference steps.
double Flux2EmpiricalMu(int64_t image_seq_len, int64_t num_steps);
// calculate_shift of diffusers' pipeline_flux.py: FLUX.1's mu, linear in image tokens (256 → 0.5, 4096 → 1.15).
double Flux1LinearMu(int64_t image_seq_len);

// The shift s for `config.shift`: e^mu for flux2_empirical / flux1_linear, the number itself, 1 for none.
double TimestepShift(const TimestepConfig& config, int64_t image_tokens);
// t' = s·t / (1 + (s − 1)·t).
at::Tensor ShiftTimesteps(const at::Tensor& t, double shift);

// The whole draw: [batch] fp32 sigmas in (0, 1], the flow-matching t of x_t = (1 − t)·x0 + t·ε.
at::Tensor SampleTimesteps(const TimestepConfig& config, int64_t batch, int64_t image_tokens, const at::Generator& gen);

}  // namespace baton

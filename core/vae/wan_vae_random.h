// Random-weight AutoencoderKLWan folders in diffusers' layout for tests and tiny pipelines: the whole VAE (encoder and
// decoder; diffusers' AutoencoderKLWan.from_pretrained loads it), or its encoder half alone.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <string>

#include "core/vae/wan_vae_config.h"

namespace baton {

// Writes `vae_dir`/config.json + diffusion_pytorch_model.safetensors (fp32) holding every tensor of an
// AutoencoderKLWan of `config`: encoder.*, quant_conv.*, post_quant_conv.*, decoder.*. Same rule as
// WriteRandomWanVaeEncoder (conv weights N(0, 1/fan_in), biases N(0, 0.02²), RMS-norm gammas 1 + N(0, 0.1²), each
// from a generator seeded by (seed, name)), so the encoder half equals what WriteRandomWanVaeEncoder writes for the
// same seed.
absl::Status WriteRandomWanVae(const WanVaeConfig& config, const std::string& vae_dir, uint64_t seed);

// The ENCODER HALF alone (encoder.*, quant_conv.*; no decoder, so diffusers' from_pretrained would not accept it).
absl::Status WriteRandomWanVaeEncoder(const WanVaeConfig& config, const std::string& vae_dir, uint64_t seed);

}  // namespace baton

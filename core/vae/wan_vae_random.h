// A complete random-weight AutoencoderKLWan folder (encoder and decoder) in diffusers' layout, so tiny Wan pipeline
// folders can encode and decode (and diffusers' AutoencoderKLWan.from_pretrained loads them).
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

}  // namespace baton

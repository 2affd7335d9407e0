// The FLUX.2 VAE encoder: pixels → posterior of diffusers' AutoencoderKLFlux2 (encoder + quant_conv), and
// the latent preparation the FLUX.2 pipeline applies before the transformer (2×2 patchify to 128 channels,
// normalisation by the frozen BatchNorm running statistics, packing to tokens). Loads a diffusers `vae/`
// folder, reading only the encoder/quant_conv/bn tensors from the memory-mapped safetensors; the decoder is
// not implemented. Also writes complete random-weight VAE folders for tests and `baton init-weights`.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/vae/flux2_vae_blocks.h"
#include "core/vae/flux2_vae_config.h"

namespace baton {

// Owns the encoder module. Encode* calls only read the weights, so one instance may serve several threads.
class Flux2VaeEncoder {
 public:
  // `vae_dir`: a diffusers vae/ folder (config.json + diffusion_pytorch_model.safetensors, or shards listed
  // in diffusion_pytorch_model.safetensors.index.json); a pipeline folder holding vae/ is accepted too.
  // encoder.* and quant_conv.* weights are converted to `dtype` (a floating type); bn statistics stay fp32.
  // decoder.* and post_quant_conv.* are never read. Missing or mis-shaped tensors, and encoder.* /
  // quant_conv.* / bn.* tensors this config does not have, are reported together in one InvalidArgument.
  // bn.num_batches_tracked is optional (unused).
  static absl::StatusOr<std::unique_ptr<Flux2VaeEncoder>> Load(const std::string& vae_dir, at::ScalarType dtype,
                                                               at::Device device);
  // Same, from an already-built module whose weights are set (tests, in-memory models).
  Flux2VaeEncoder(const Flux2VaeConfig& config, AutoencoderKLFlux2Encoder module);

  const Flux2VaeConfig& config() const { return config_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }

  // pixels [B, in_channels, H, W] in [-1, 1] (any float dtype/device; converted), H and W positive multiples
  // of 2·downsample_factor (16 for FLUX.2) → posterior moments [B, 2·latent_channels, H/8, W/8] fp32:
  // channels [0, L) the mean, [L, 2L) the raw log-variance (unclamped). InvalidArgument on bad shapes.
  absl::StatusOr<at::Tensor> EncodeMoments(const at::Tensor& pixels);
  // Posterior mean [B, latent_channels, H/8, W/8] fp32 (diffusers latent_dist.mode()).
  absl::StatusOr<at::Tensor> EncodeMean(const at::Tensor& pixels);
  // Posterior sample mean + exp(0.5·clamp(logvar, −30, 20))·ε, ε ~ N(0, 1) drawn on the CPU from a
  // generator seeded by `seed` (diffusers latent_dist.sample(generator)). fp32, same shape as EncodeMean.
  absl::StatusOr<at::Tensor> EncodeSample(const at::Tensor& pixels, uint64_t seed);

  // latents [B, latent_channels, h, w] (h, w even) → the transformer's image tokens [B, (h/2)·(w/2), 4·L]
  // fp32, exactly as Flux2Pipeline does it: _patchify_latents (channel c·4 + 2·dy + dx holds latent channel c
  // at pixel (2i+dy, 2j+dx)), (x − bn.running_mean) / sqrt(bn.running_var + batch_norm_eps), then
  // _pack_latents (token i·(w/2) + j). Throws c10::Error on a wrong shape (a caller bug: latents come
  // from EncodeMean).
  at::Tensor PatchifyAndNormalize(const at::Tensor& latents) const;

  AutoencoderKLFlux2Encoder& module() { return module_; }

 private:
  Flux2VaeConfig config_;
  AutoencoderKLFlux2Encoder module_;
  at::ScalarType dtype_;
  at::Device device_;
};

// `vae_dir`, or its vae/ when it is a pipeline folder.
std::string ResolveVaeDir(const std::string& vae_dir);
// Copies every parameter and buffer of `module` (names = checkpoint keys) from the safetensors of the vae/ folder
// `dir`, converting to each tensor's dtype. Missing and mis-shaped keys, and checkpoint keys `ours` claims that the
// module lacks, are reported together in one InvalidArgument (bn.num_batches_tracked is optional).
absl::Status LoadVaeTensors(torch::nn::Module& module, const std::string& dir,
                            const std::function<bool(const std::string&)>& ours);

// Writes a diffusers-layout vae/ folder (config.json + diffusion_pytorch_model.safetensors, fp32) with the
// COMPLETE AutoencoderKLFlux2 state dict of `config` (Flux2VaeTensorShapes: encoder, decoder, quant convs,
// bn buffers) so that diffusers itself could load it. Each tensor comes from a generator seeded by
// (seed, name): conv/linear weights N(0, 1/fan_in), their biases N(0, 0.02²), GroupNorm weights 1 + N(0, 0.1²)
// and biases N(0, 0.1²), bn.running_mean N(0, 0.5²), bn.running_var U(0.5, 1.5), num_batches_tracked 0.
absl::Status WriteRandomFlux2Vae(const Flux2VaeConfig& config, const std::string& vae_dir, uint64_t seed);

}  // namespace baton

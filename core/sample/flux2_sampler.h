// FLUX.2 sampling as diffusers' Flux2Pipeline.__call__ does it: the initial noise prepare_latents draws, the
// flow-matching Euler loop of FlowMatchEulerDiscreteScheduler with FLUX.2's empirical shift (compute_empirical_mu,
// exponential time shift), the guidance embedding, and reference images (`image=[...]`, flux2_references.h). The model
// runs behind a Denoiser, so the same loop samples in one process or through the stage workers.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/sample/denoiser.h"
#include "core/sample/flux2_references.h"

namespace baton {

struct Flux2SampleSettings {
  int64_t steps = 28;     // num_inference_steps
  double guidance = 4.0;  // guidance_scale (the guidance embedding; FLUX.2-dev is guidance-distilled)
  int64_t width = 1024;   // pixels, multiples of 16
  int64_t height = 1024;
  int micro_batch_size = 1;    // prompts per Denoiser micro-batch
  Flux2References references;  // for every prompt; empty: text-to-image
  // True classifier-free guidance at `guidance` (Flux2KleinPipeline's for a base, not distilled, klein model:
  // Flux2TrueCfg): the negative prompt's embedding [L, text_dim] ("" in that pipeline), the same for every prompt;
  // each step's velocity is then neg + guidance·(pos − neg). Undefined: none (the guidance embedding only).
  at::Tensor negative_prompt_embeds;
};

// Whether Flux2KleinPipeline samples `pipeline` (a pipeline folder) with true classifier-free guidance at `guidance`:
// its model_index.json names Flux2KleinPipeline and is_distilled false, and guidance > 1. A folder without
// model_index.json (a transformer alone, FLUX.2-dev's layout) samples without.
absl::StatusOr<bool> Flux2TrueCfg(const std::string& pipeline, double guidance);

// The schedule Flux2Pipeline uses for `steps` at `image_tokens` = (H/16)·(W/16): sigmas linspace(1, 1/steps, steps)
// shifted with mu = compute_empirical_mu(image_tokens, steps), then a terminal 0: steps + 1 values, decreasing.
std::vector<double> Flux2SampleSigmas(int64_t steps, int64_t image_tokens);

// The initial latents Flux2Pipeline.prepare_latents draws with torch.Generator("cpu").manual_seed(seed) for one
// image: packed tokens [1, (height/16)·(width/16), in_channels] fp32 (in_channels: the transformer's, 128).
at::Tensor Flux2InitialNoise(int64_t in_channels, int64_t width, int64_t height, uint64_t seed);

// Runs the denoising loop for every prompt: prompt_embeds[k] [L, text_dim] (all the same L), noise[k] [1, S, C]
// (Flux2InitialNoise) → final latents [1, S, C] per prompt, fp32 (to decode with Flux2VaeDecoder::DecodeTokens), on
// the device the denoiser answers on (the latents follow its velocity: a denoiser on a GPU keeps them there).
// Prompts are grouped in order into micro-batches of settings.micro_batch_size; every Denoiser call gets all the
// micro-batches of one denoising step. `progress(step, steps)` (optional) after each step.
absl::StatusOr<std::vector<at::Tensor>> SampleFlux2(const Denoiser& denoiser,
                                                    const std::vector<at::Tensor>& prompt_embeds,
                                                    const std::vector<at::Tensor>& noise,
                                                    const Flux2SampleSettings& settings,
                                                    const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace baton

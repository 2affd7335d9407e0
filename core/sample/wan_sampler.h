// Wan video sampling as diffusers' WanPipeline / WanImageToVideoPipeline.__call__ do it: the initial noise
// prepare_latents draws, the pipeline folder's scheduler (UniPC, or FlowMatchEuler) stepping the transformer's
// velocity, classifier-free guidance with the negative prompt, and image-to-video conditioning (cat(noisy, condition),
// or TI2V's clean first frame at per-token timestep 0, re-applied before decoding). The model runs behind a Denoiser.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sample/denoiser.h"
#include "core/sample/flow_scheduler_config.h"

namespace baton {

struct WanSampleSettings {
  int64_t steps = 50;             // num_inference_steps
  double guidance = 5.0;          // guidance_scale: > 1 runs a second, negative-prompt pass (CFG)
  FlowSchedulerConfig scheduler;  // LoadFlowSchedulerConfig(pipeline) or its EulerAlternative
  int micro_batch_size = 1;       // videos per Denoiser micro-batch
};

// One video to sample.
struct WanSampleInput {
  at::Tensor prompt_embeds;    // [L, text_dim] (WanSampleEncoder::EncodeText)
  at::Tensor negative_embeds;  // [L, text_dim]: the negative prompt's, needed when guidance > 1
  at::Tensor noise;            // [1, z, F', h, w] fp32 (WanInitialNoise)
  std::string conditioning;    // "" or a core/model/wan_i2v.h kind
  at::Tensor condition;        // [cc, F' or 1, h, w] (WanSampleEncoder::EncodeConditioning), with a conditioning
  at::Tensor image_embeds;     // [tokens, image_dim] or undefined
};

// The latent grid of a video: F' = (frames − 1)/temporal + 1 latent frames of (height/spatial)×(width/spatial).
struct WanLatentGrid {
  int64_t frames = 0, height = 0, width = 0;
};

// InvalidArgument unless frames = 4k + 1 (temporal_factor k) and width, height are positive multiples of
// spatial_factor·patch (Wan 2.1: 16; Wan 2.2's 16× VAE: 32), so the transformer's patches tile the latents.
absl::StatusOr<WanLatentGrid> WanSampleGrid(int64_t frames, int64_t width, int64_t height, int64_t temporal_factor,
                                            int64_t spatial_factor, int64_t patch);

// prepare_latents' noise for one video with torch.Generator("cpu").manual_seed(seed): randn [1, z, F', h, w] fp32.
at::Tensor WanInitialNoise(int64_t z_dim, const WanLatentGrid& grid, uint64_t seed);

// Runs the denoising loop for every input → its final normalised latents [1, z, F', h, w] fp32 (TI2V: latent frame 0
// is the clean condition, as the pipeline hands the VAE), on the device the denoiser answers on. Inputs are grouped in
// order into micro-batches of settings.micro_batch_size; with guidance > 1 each group also runs with its negative
// embeddings, and one Denoiser call carries every micro-batch of a step. Each video has its own scheduler run.
// `progress(step, steps)` (optional) after each step. InvalidArgument for inconsistent inputs.
absl::StatusOr<std::vector<at::Tensor>> SampleWan(const Denoiser& denoiser, const std::vector<WanSampleInput>& inputs,
                                                  const WanSampleSettings& settings,
                                                  const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace baton

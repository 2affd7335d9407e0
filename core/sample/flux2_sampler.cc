#include "core/sample/flux2_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// diffusers' compute_empirical_mu (pipeline_flux2.py): the shift FLUX.2 uses for `steps` at `image_tokens`.
double EmpiricalMu(int64_t image_tokens, int64_t steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
  const double n = static_cast<double>(image_tokens);
  if (image_tokens > 4300) return a2 * n + b2;
  const double m200 = a2 * n + b2, m10 = a1 * n + b1;
  const double a = (m200 - m10) / 190.0, b = m200 - 200.0 * a;
  return a * static_cast<double>(steps) + b;
}

// One micro-batch of prompts [first, last) at the current latents.
NoisyBatch MicroBatchAt(const std::vector<at::Tensor>& latents, const std::vector<at::Tensor>& embeds, size_t first,
                        size_t last, float timestep, const Flux2SampleSettings& s) {
  std::vector<at::Tensor> x(latents.begin() + first, latents.begin() + last);
  std::vector<at::Tensor> e(embeds.begin() + first, embeds.begin() + last);
  NoisyBatch b;
  b.noisy = at::cat(x, 0);
  b.prompt_embeds = at::stack(e, 0).to(at::kFloat);
  b.timestep = at::full({static_cast<int64_t>(last - first)}, timestep, at::kFloat);
  b.grid_h = s.height / 16;
  b.grid_w = s.width / 16;
  b.guidance = s.guidance;
  if (!s.references.empty()) {  // the same images for every prompt (Flux2Pipeline: image_latents.repeat(batch, 1, 1))
    b.references = s.references.tokens.expand({static_cast<int64_t>(last - first), -1, -1});
    b.reference_grids = s.references.grids;
  }
  return b;
}

// The micro-batches of one denoising step: every prompt's, then with true CFG every prompt's again at the negative
// embedding (the same latents and timestep).
std::vector<NoisyBatch> StepBatches(const std::vector<at::Tensor>& latents, const std::vector<at::Tensor>& embeds,
                                    float timestep, const Flux2SampleSettings& s) {
  const size_t per = static_cast<size_t>(std::max(s.micro_batch_size, 1));
  std::vector<NoisyBatch> batches;
  for (size_t first = 0; first < latents.size(); first += per) {
    batches.push_back(MicroBatchAt(latents, embeds, first, std::min(latents.size(), first + per), timestep, s));
  }
  if (!s.negative_prompt_embeds.defined()) return batches;
  const std::vector<at::Tensor> negative(latents.size(), s.negative_prompt_embeds);
  for (size_t first = 0; first < latents.size(); first += per) {
    batches.push_back(MicroBatchAt(latents, negative, first, std::min(latents.size(), first + per), timestep, s));
  }
  return batches;
}

}  // namespace

absl::StatusOr<bool> Flux2TrueCfg(const std::string& pipeline, double guidance) {
  const std::string path = JoinPath(pipeline, "model_index.json");
  if (guidance <= 1.0 || !PathExists(path)) return false;
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const auto index = nlohmann::json::parse(text, nullptr, false);
  if (index.is_discarded() || !index.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  const bool klein = index.value("_class_name", std::string()) == "Flux2KleinPipeline";
  const auto distilled = index.find("is_distilled");
  return klein && !(distilled != index.end() && distilled->is_boolean() && distilled->get<bool>());
}

std::vector<double> Flux2SampleSigmas(int64_t steps, int64_t image_tokens) {
  const double mu = EmpiricalMu(image_tokens, steps);
  // The scheduler shifts a float32 array with Python-float operands (NEP 50), so every operation rounds to float32:
  // exp(mu) / (exp(mu) + (1/t − 1)) with each operand and result a float.
  const float e = static_cast<float>(std::exp(mu));
  std::vector<double> sigmas;
  for (int64_t i = 0; i < steps; ++i) {
    // np.linspace(1, 1/steps, steps): start + i·step in float64 with the last value exactly 1/steps; then float32.
    double t0 = 1.0 / static_cast<double>(steps);
    if (i + 1 < steps) t0 = static_cast<double>(i) * ((1.0 / static_cast<double>(steps) - 1.0) / (steps - 1)) + 1.0;
    const float t = static_cast<float>(t0);
    sigmas.push_back(e / (e + (1.0f / t - 1.0f)));
  }
  sigmas.push_back(0.0);
  return sigmas;
}

at::Tensor Flux2InitialNoise(int64_t in_channels, int64_t width, int64_t height, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const int64_t h = height / 16, w = width / 16;
  // randn_tensor((1, in_channels, h, w), generator) then _pack_latents: [1, C, h, w] → [1, h·w, C].
  at::Tensor x = at::randn({1, in_channels, h, w}, gen, at::kFloat);
  return x.reshape({1, in_channels, h * w}).permute({0, 2, 1}).contiguous();
}

absl::StatusOr<std::vector<at::Tensor>> SampleFlux2(const Denoiser& denoiser,
                                                    const std::vector<at::Tensor>& prompt_embeds,
                                                    const std::vector<at::Tensor>& noise,
                                                    const Flux2SampleSettings& settings,
                                                    const std::function<void(int64_t, int64_t)>& progress) {
  if (prompt_embeds.size() != noise.size() || noise.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: ", prompt_embeds.size(), " prompts for ", noise.size(), " initial latents"));
  }
  if (settings.width % 16 != 0 || settings.height % 16 != 0 || settings.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: size ", settings.width, "x", settings.height,
                                                   " must be multiples of 16 and steps positive"));
  }
  const int64_t tokens = (settings.height / 16) * (settings.width / 16);
  for (size_t k = 0; k < noise.size(); ++k) {
    if (noise[k].dim() != 3 || noise[k].size(0) != 1 || noise[k].size(1) != tokens) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: initial latents ", k, " are ",
                                                     ShapeString(noise[k].sizes()), ", expected [1, ", tokens, ", C]"));
    }
    if (prompt_embeds[k].dim() != 2 || !prompt_embeds[k].sizes().equals(prompt_embeds[0].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: prompt embeddings ", k, " are ",
                                                     ShapeString(prompt_embeds[k].sizes()),
                                                     "; every prompt needs [L, text_dim] with the same L"));
    }
  }
  if (settings.negative_prompt_embeds.defined() &&
      !settings.negative_prompt_embeds.sizes().equals(prompt_embeds[0].sizes())) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: the negative prompt's embedding is ",
                                                   ShapeString(settings.negative_prompt_embeds.sizes()),
                                                   ", the "
                                                   "prompts' ",
                                                   ShapeString(prompt_embeds[0].sizes())));
  }
  const std::vector<double> sigmas = Flux2SampleSigmas(settings.steps, tokens);
  std::vector<at::Tensor> latents;
  for (const at::Tensor& n : noise) latents.push_back(n.to(at::kFloat).clone());
  for (int64_t i = 0; i < settings.steps; ++i) {
    // The pipeline passes (sigma·1000 in fp32) / 1000 in fp32 as the transformer's timestep.
    const float t = static_cast<float>(sigmas[i]) * 1000.0f / 1000.0f;
    const std::vector<NoisyBatch> batches = StepBatches(latents, prompt_embeds, t, settings);
    ASSIGN_OR_RETURN(std::vector<at::Tensor> velocity, denoiser(batches));
    if (velocity.size() != batches.size()) {
      return absl::InternalError(
          absl::StrCat("sampling: ", velocity.size(), " outputs for ", batches.size(), " micro-batches"));
    }
    if (settings.negative_prompt_embeds.defined()) {  // Flux2KleinPipeline: neg + guidance_scale·(pos − neg)
      const size_t half = velocity.size() / 2;
      for (size_t j = 0; j < half; ++j) {
        const at::Tensor& neg = velocity[half + j];
        velocity[j] = neg + settings.guidance * (velocity[j] - neg);
      }
      velocity.resize(half);
    }
    // Euler: x ← x + (σ_next − σ)·v, in fp32 as FlowMatchEulerDiscreteScheduler.step.
    const float dt = static_cast<float>(sigmas[i + 1]) - static_cast<float>(sigmas[i]);
    size_t k = 0;
    for (const at::Tensor& v : velocity) {
      for (int64_t j = 0; j < v.size(0); ++j, ++k) {
        latents[k] = latents[k].to(v.device()) + dt * v.slice(0, j, j + 1).to(at::kFloat);
      }
    }
    if (progress) progress(i + 1, settings.steps);
  }
  return latents;
}

}  // namespace baton

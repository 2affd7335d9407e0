#include "core/sample/wan_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/str_cat.h>

#include <memory>

#include "core/model/wan_i2v.h"
#include "core/sample/unipc_scheduler.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

bool Cfg(const WanSampleSettings& s) { return s.guidance > 1.0; }

absl::Status CheckCondition(const WanSampleInput& in, const at::Tensor& noise, size_t k) {
  if (in.conditioning.empty()) {
    if (in.condition.defined())
      return absl::InvalidArgumentError(absl::StrCat("sampling: video ", k,
                                                     " has a condition "
                                                     "but no conditioning kind"));
    return absl::OkStatus();
  }
  if (!IsWanConditioning(in.conditioning)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: unknown conditioning '", in.conditioning, "'"));
  }
  const int64_t frames = in.conditioning == kWanCleanFirstFrame ? 1 : noise.size(2);
  const at::Tensor& c = in.condition;
  if (!c.defined() || c.dim() != 4 || c.size(1) != frames || c.size(2) != noise.size(3) || c.size(3) != noise.size(4)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: video ", k, "'s ", in.conditioning, " condition is ",
                                                   DtypeShapeString(c), ", expected [cc, ", frames, ", ", noise.size(3),
                                                   ", ", noise.size(4), "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckInputs(const std::vector<WanSampleInput>& inputs, const WanSampleSettings& s) {
  if (inputs.empty()) return absl::InvalidArgumentError("sampling: no videos to sample");
  if (s.steps < 1) return absl::InvalidArgumentError(absl::StrCat("sampling: steps ", s.steps, " must be positive"));
  const WanSampleInput& first = inputs[0];
  for (size_t k = 0; k < inputs.size(); ++k) {
    const WanSampleInput& in = inputs[k];
    if (!in.noise.defined() || in.noise.dim() != 5 || in.noise.size(0) != 1 ||
        !in.noise.sizes().equals(first.noise.sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: initial latents ", k, " are ",
                                                     DtypeShapeString(in.noise),
                                                     "; every video needs the same [1, z, F', h, w]"));
    }
    if (!in.prompt_embeds.defined() || in.prompt_embeds.dim() != 2 ||
        !in.prompt_embeds.sizes().equals(first.prompt_embeds.sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: prompt embeddings ", k, " are ",
                                                     DtypeShapeString(in.prompt_embeds),
                                                     "; every prompt needs [L, text_dim] with the same L"));
    }
    if (Cfg(s) && (!in.negative_embeds.defined() || !in.negative_embeds.sizes().equals(in.prompt_embeds.sizes()))) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: guidance ", s.guidance,
                                                     " > 1 needs negative prompt "
                                                     "embeddings shaped as the prompt's (",
                                                     ShapeString(in.prompt_embeds.sizes()), "); video ", k, " has ",
                                                     DtypeShapeString(in.negative_embeds)));
    }
    if (in.conditioning != first.conditioning || in.image_embeds.defined() != first.image_embeds.defined()) {
      return absl::InvalidArgumentError("sampling: every video needs the same conditioning kind and image embeddings");
    }
    RETURN_IF_ERROR(CheckCondition(in, in.noise, k));
  }
  return absl::OkStatus();
}

// Videos [first, last) at the current latents, with their prompt (or negative) embeddings, all at `timestep` (the
// transformer's timestep / 1000, in fp64 so the family's ·1000 gives the scheduler's value back exactly).
NoisyBatch MicroBatchAt(const std::vector<WanSampleInput>& inputs, const std::vector<at::Tensor>& latents, size_t first,
                        size_t last, bool negative, double timestep) {
  std::vector<at::Tensor> x, e, c, img;
  for (size_t k = first; k < last; ++k) {
    x.push_back(latents[k]);
    e.push_back(negative ? inputs[k].negative_embeds : inputs[k].prompt_embeds);
    if (inputs[k].condition.defined()) c.push_back(inputs[k].condition);
    if (inputs[k].image_embeds.defined()) img.push_back(inputs[k].image_embeds);
  }
  NoisyBatch b;
  b.noisy = at::cat(x, 0);
  b.prompt_embeds = at::stack(e, 0).to(at::kFloat);
  b.conditioning = inputs[first].conditioning;
  if (!c.empty()) b.condition = at::stack(c, 0).to(b.noisy.device(), at::kFloat);
  if (!img.empty()) b.image_embeds = at::stack(img, 0).to(at::kFloat);
  b.timestep = at::full({static_cast<int64_t>(last - first)}, timestep, at::kDouble);
  b.grid_h = b.noisy.size(3);
  b.grid_w = b.noisy.size(4);
  return b;
}

// The velocity per video from one step's Denoiser outputs: the cond micro-batches first, then (CFG) the uncond ones,
// combined as the pipeline does: v_u + g·(v_c − v_u).
absl::StatusOr<std::vector<at::Tensor>> Velocities(const std::vector<at::Tensor>& outputs, size_t groups, size_t videos,
                                                   const WanSampleSettings& s) {
  const size_t expected = Cfg(s) ? 2 * groups : groups;
  if (outputs.size() != expected) {
    return absl::InternalError(absl::StrCat("sampling: ", outputs.size(), " outputs for ", expected, " micro-batches"));
  }
  auto split = [&](size_t from) {
    std::vector<at::Tensor> v;
    for (size_t g = from; g < from + groups; ++g) {
      for (int64_t j = 0; j < outputs[g].size(0); ++j) v.push_back(outputs[g].slice(0, j, j + 1));
    }
    return v;
  };
  std::vector<at::Tensor> cond = split(0);
  if (cond.size() != videos) {
    return absl::InternalError(absl::StrCat("sampling: ", cond.size(), " velocities for ", videos, " videos"));
  }
  if (!Cfg(s)) return cond;
  std::vector<at::Tensor> uncond = split(groups);
  for (size_t k = 0; k < videos; ++k) cond[k] = uncond[k] + s.guidance * (cond[k] - uncond[k]);
  return cond;
}

}  // namespace

absl::StatusOr<WanLatentGrid> WanSampleGrid(int64_t frames, int64_t width, int64_t height, int64_t temporal_factor,
                                            int64_t spatial_factor, int64_t patch) {
  const int64_t multiple = spatial_factor * patch;
  if (temporal_factor < 1 || frames < 1 || (frames - 1) % temporal_factor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("frames ", frames, ": a Wan video has ", temporal_factor, "k + 1 frames (e.g. 1, 5, 17, 81)"));
  }
  if (multiple < 1 || width < multiple || height < multiple || width % multiple != 0 || height % multiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("size ", width, "x", height, ": this Wan model needs multiples of ",
                                                   multiple, " (VAE ", spatial_factor, "x, patch ", patch, ")"));
  }
  return WanLatentGrid{(frames - 1) / temporal_factor + 1, height / spatial_factor, width / spatial_factor};
}

at::Tensor WanInitialNoise(int64_t z_dim, const WanLatentGrid& grid, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn({1, z_dim, grid.frames, grid.height, grid.width}, gen, at::kFloat);
}

absl::StatusOr<std::vector<at::Tensor>> SampleWan(const Denoiser& denoiser, const std::vector<WanSampleInput>& inputs,
                                                  const WanSampleSettings& settings,
                                                  const std::function<void(int64_t, int64_t)>& progress) {
  RETURN_IF_ERROR(CheckInputs(inputs, settings));
  std::vector<std::unique_ptr<FlowScheduler>> schedulers;
  std::vector<at::Tensor> latents;
  for (const WanSampleInput& in : inputs) {
    schedulers.push_back(MakeFlowScheduler(settings.scheduler));
    RETURN_IF_ERROR(schedulers.back()->SetTimesteps(settings.steps));
    latents.push_back(in.noise.to(at::kFloat).clone());
  }
  const size_t per = static_cast<size_t>(std::max(settings.micro_batch_size, 1));
  const at::Tensor timesteps = schedulers[0]->timesteps().to(at::kDouble);
  for (int64_t i = 0; i < settings.steps; ++i) {
    const double t = timesteps[i].item<double>() / 1000.0;
    std::vector<NoisyBatch> batches;
    for (bool negative : {false, true}) {
      if (negative && !Cfg(settings)) break;
      for (size_t first = 0; first < inputs.size(); first += per) {
        batches.push_back(MicroBatchAt(inputs, latents, first, std::min(inputs.size(), first + per), negative, t));
      }
    }
    const size_t groups = Cfg(settings) ? batches.size() / 2 : batches.size();
    ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, denoiser(batches));
    ASSIGN_OR_RETURN(std::vector<at::Tensor> velocity, Velocities(outputs, groups, inputs.size(), settings));
    for (size_t k = 0; k < inputs.size(); ++k) {
      ASSIGN_OR_RETURN(latents[k], schedulers[k]->Step(velocity[k], latents[k].to(velocity[k].device())));
    }
    if (progress) progress(i + 1, settings.steps);
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].conditioning != kWanCleanFirstFrame) continue;
    latents[k] = latents[k].clone();  // the pipeline's (1 − mask)·condition + mask·latents: frame 0 is the condition
    latents[k].slice(2, 0, 1).copy_(inputs[k].condition.unsqueeze(0));
  }
  return latents;
}

}  // namespace baton

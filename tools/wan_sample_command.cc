#include "tools/wan_sample_command.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <chrono>
#include <cstdio>

#include "core/encode/wan_encoder.h"
#include "core/model/wan_config.h"
#include "core/model/wan_i2v.h"
#include "core/model/wan_weights.h"
#include "core/sample/expert_denoiser.h"
#include "core/sample/model_denoiser.h"
#include "core/sample/sample_videos.h"
#include "core/sample/wan_sample_inputs.h"
#include "core/sample/wan_sampler.h"
#include "core/tensor/safetensors.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/wan_vae_config.h"
#include "core/vae/wan_vae_decoder.h"
#include "tools/local_model.h"
#include "tools/sample_backend.h"

namespace baton {
namespace {

absl::StatusOr<std::pair<int64_t, int64_t>> ParseWanSize(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  int64_t w = 0, h = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &w) || !absl::SimpleAtoi(parts[1], &h)) {
    return absl::InvalidArgumentError(absl::StrCat("--size ", text, ": expected WxH (e.g. 832x480)"));
  }
  return std::make_pair(w, h);
}

// The prompt and negative embeddings: from --prompt_embeds ('prompt_embeds', optionally 'negative_prompt_embeds'
// [L, D] or [1, L, D]), else --prompt / --negative-prompt through the pipeline's umT5.
absl::Status Embeddings(const Args& args, bool cfg, WanSampleEncoder& encoder, WanSampleInput& in) {
  auto squeeze = [](at::Tensor e) { return e.dim() == 3 && e.size(0) == 1 ? e[0] : e; };
  if (args.Has("prompt_embeds")) {
    ASSIGN_OR_RETURN(auto tensors, LoadAllSafetensors(args.Get("prompt_embeds")));
    auto it = tensors.find("prompt_embeds");
    if (it == tensors.end())
      return absl::InvalidArgumentError(absl::StrCat(args.Get("prompt_embeds"), ": no tensor 'prompt_embeds'"));
    in.prompt_embeds = squeeze(it->second.to(at::kFloat));
    auto neg = tensors.find("negative_prompt_embeds");
    if (neg != tensors.end()) in.negative_embeds = squeeze(neg->second.to(at::kFloat));
  } else {
    if (!args.Has("prompt")) return absl::InvalidArgumentError("give --prompt (or --prompt_embeds)");
    ASSIGN_OR_RETURN(in.prompt_embeds, encoder.EncodeText(args.Get("prompt")));
  }
  if (cfg && !in.negative_embeds.defined()) {
    ASSIGN_OR_RETURN(in.negative_embeds,
                     encoder.EncodeText(args.Has("negative-prompt") ? args.Get("negative-prompt") : ""));
  }
  return absl::OkStatus();
}

struct WanRun {
  WanSampleSettings settings;
  WanSampleInput input;
  WanLatentGrid grid;
  int64_t frames = 0, width = 0, height = 0;
};

absl::StatusOr<WanRun> PrepareRun(const Args& args, const std::string& pipeline) {
  WanRun r;
  ASSIGN_OR_RETURN(auto size, ParseWanSize(args.Get("size")));
  r.width = size.first;
  r.height = size.second;
  ASSIGN_OR_RETURN(r.frames, args.GetInt("frames"));
  ASSIGN_OR_RETURN(r.settings.steps, args.GetInt("steps"));
  ASSIGN_OR_RETURN(r.settings.guidance, args.GetDouble("guidance"));
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed"));
  ASSIGN_OR_RETURN(r.settings.scheduler, LoadFlowSchedulerConfig(pipeline));
  const std::string scheduler = args.Get("scheduler");
  if (scheduler == "euler") {
    r.settings.scheduler = EulerAlternative(r.settings.scheduler);
  } else if (scheduler != "pipeline") {
    return absl::InvalidArgumentError(absl::StrCat("--scheduler ", scheduler, ": expected pipeline or euler"));
  }
  ASSIGN_OR_RETURN(WanConfig t, LoadWanConfig(JoinPath(pipeline, "transformer/config.json")));
  ASSIGN_OR_RETURN(WanVaeConfig vae, LoadWanVaeConfig(JoinPath(pipeline, "vae/config.json")));
  ASSIGN_OR_RETURN(
      r.grid, WanSampleGrid(r.frames, r.width, r.height, vae.temporal_factor(), vae.spatial_factor(), t.patch_size[1]));
  r.input.noise = WanInitialNoise(vae.z_dim, r.grid, static_cast<uint64_t>(seed));
  WanEncoderOptions eo;
  ASSIGN_OR_RETURN(eo.max_sequence_length, args.GetInt("max_sequence_length"));
  ASSIGN_OR_RETURN(eo.conditioning, WanSampleConditioning(pipeline, args.Has("image")));
  ASSIGN_OR_RETURN(auto encoder, WanSampleEncoder::Open(pipeline, eo));
  RETURN_IF_ERROR(Embeddings(args, r.settings.guidance > 1.0, *encoder, r.input));
  r.input.conditioning = encoder->conditioning();
  if (!r.input.conditioning.empty()) {
    if (r.input.conditioning == kWanFirstLastFrame) {
      return absl::UnimplementedError("first-last-frame (FLF2V) sampling needs a last frame: not built yet");
    }
    ASSIGN_OR_RETURN(at::Tensor pixels, WanFirstFramePixels(args.Get("image"), r.width, r.height, r.frames));
    ASSIGN_OR_RETURN(ClipConditioning c, encoder->EncodeConditioning(pixels));
    r.input.condition = c.condition;
    r.input.image_embeds = c.image_embeds;  // Wan 2.1 I2V: CLIP of the first frame at --size
  }
  return r;
}

// One expert of an A14B folder with its LoRA flag's file (--lora: the high-noise expert's, --lora-low: the low's).
absl::StatusOr<LoadedModel> OpenExpert(const Args& args, const std::string& pipeline, WanExpert expert,
                                       const char* lora_flag, at::ScalarType dtype) {
  ASSIGN_OR_RETURN(std::string dir, WanExpertDir(pipeline, expert));
  ASSIGN_OR_RETURN(double scale, args.GetDouble("lora-scale"));
  return OpenLocalModelAt(dir, args.Has(lora_flag) ? args.Get(lora_flag) : "", scale, dtype);
}

// A Wan 2.2 A14B folder samples with both experts in this process, switched at boundary_ratio (--lora: the
// high-noise expert's LoRA, --lora-low: the low's); any other folder as StartSampleBackend places it.
absl::StatusOr<std::unique_ptr<SampleBackend>> StartWanBackend(const Args& args, const std::string& pipeline,
                                                               at::ScalarType dtype, const WanRun& run) {
  ASSIGN_OR_RETURN(WanExperts experts, DescribeWanExperts(pipeline));
  if (!experts.two_experts) {
    if (args.Has("lora-low")) {
      return absl::InvalidArgumentError(absl::StrCat("--lora-low: ", pipeline, " holds one transformer"));
    }
    return StartSampleBackend(
        args, dtype, {run.grid.frames * (run.grid.height / 2) * (run.grid.width / 2), run.input.prompt_embeds.size(0)});
  }
  ASSIGN_OR_RETURN(int64_t stages, args.GetInt("stages"));
  if (stages > 0) return absl::UnimplementedError("two-expert (A14B) sampling runs in this process: --stages 0");
  auto b = std::make_unique<SampleBackend>();
  ASSIGN_OR_RETURN(b->local, OpenExpert(args, pipeline, WanExpert::kHighNoise, "lora", dtype));
  ASSIGN_OR_RETURN(b->low, OpenExpert(args, pipeline, WanExpert::kLowNoise, "lora-low", dtype));
  b->denoiser = ExpertDenoiser(ModelDenoiser(*b->local.family, *b->local.shell, *b->local.stage, dtype, at::kCPU),
                               ModelDenoiser(*b->low.family, *b->low.shell, *b->low.stage, dtype, at::kCPU),
                               experts.boundary_ratio);
  return b;
}

}  // namespace

absl::Status SampleWanVideo(const Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string pipeline = args.Get("model");
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  ASSIGN_OR_RETURN(WanRun run, PrepareRun(args, pipeline));
  ASSIGN_OR_RETURN(auto backend, StartWanBackend(args, pipeline, dtype, run));
  const DenoisingProgress progress(t0);
  ASSIGN_OR_RETURN(std::vector<at::Tensor> latents, SampleWan(backend->denoiser, {run.input}, run.settings, progress));
  progress.Finish();
  RETURN_IF_ERROR(backend->Stop());
  at::Tensor z = latents[0].to(at::kCPU);
  if (args.Has("out_latents")) RETURN_IF_ERROR(WriteSafetensors(args.Get("out_latents"), {{"latents", z}}));
  ASSIGN_OR_RETURN(auto decoder, WanVaeDecoder::Load(pipeline, at::kFloat, at::kCPU));
  ASSIGN_OR_RETURN(at::Tensor pixels, decoder->Decode(z));
  if (args.Has("out_pixels")) RETURN_IF_ERROR(WriteSafetensors(args.Get("out_pixels"), {{"pixels", pixels}}));
  RETURN_IF_ERROR(WriteSampleVideo(args.Get("out"), VideoFrames(pixels[0])));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%lldx%lld, %lld frames, %lld steps, %.2f s)\n", args.Get("out").c_str(),
              static_cast<long long>(run.width), static_cast<long long>(run.height),
              static_cast<long long>(pixels.size(2)), static_cast<long long>(run.settings.steps), seconds);
  return absl::OkStatus();
}

}  // namespace baton

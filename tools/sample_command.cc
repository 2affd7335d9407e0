#include "tools/sample_command.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/device/threads.h"
#include "core/image/image.h"
#include "core/model/wan_family.h"
#include "core/sample/flux2_sampler.h"
#include "core/sample/prompt_embeds.h"
#include "core/sample/sample_images.h"
#include "core/sample/sample_renderer.h"
#include "core/tensor/safetensors.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/flux2_vae.h"
#include "core/vae/flux2_vae_decoder.h"
#include "tools/sample_backend.h"
#include "tools/wan_sample_command.h"

namespace baton {
namespace {

absl::StatusOr<std::pair<int64_t, int64_t>> ParseSize(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  int64_t w = 0, h = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &w) || !absl::SimpleAtoi(parts[1], &h) || w < 16 || h < 16 ||
      w % 16 != 0 || h % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--size ", text, ": expected WxH, multiples of 16 (e.g. 512x512)"));
  }
  return std::make_pair(w, h);
}

// The transformer's in_channels (the packed latent width), from its config.json.
absl::StatusOr<int64_t> InChannels(const std::string& pipeline) {
  std::string path = JoinPath(pipeline, "transformer/config.json");
  if (!PathExists(path)) path = JoinPath(pipeline, "config.json");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.contains("in_channels") || !json["in_channels"].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no integer in_channels"));
  }
  return json["in_channels"].get<int64_t>();
}

absl::StatusOr<at::Tensor> PromptEmbeddings(const Args& args, const std::string& pipeline) {
  if (args.Has("prompt_embeds")) {
    ASSIGN_OR_RETURN(auto tensors, LoadAllSafetensors(args.Get("prompt_embeds")));
    auto it = tensors.find("prompt_embeds");
    if (it == tensors.end())
      return absl::InvalidArgumentError(absl::StrCat(args.Get("prompt_embeds"), ": no tensor 'prompt_embeds'"));
    at::Tensor e = it->second.to(at::kFloat);
    if (e.dim() == 3 && e.size(0) == 1) e = e[0];
    if (e.dim() != 2) return absl::InvalidArgumentError("prompt_embeds must be [L, D] or [1, L, D]");
    return e;
  }
  if (!args.Has("prompt")) return absl::InvalidArgumentError("give --prompt (or --prompt_embeds)");
  ASSIGN_OR_RETURN(int64_t length, args.GetInt("max_sequence_length"));
  ASSIGN_OR_RETURN(auto embeds, EncodePromptsLocally(pipeline, {args.Get("prompt")}, length));
  return embeds.at(0);
}

// A klein base model's negative prompt (Flux2TrueCfg): --negative_prompt_embeds, else --negative-prompt encoded
// (Flux2KleinPipeline's: ""). Undefined when the model samples without true CFG.
absl::StatusOr<at::Tensor> NegativeEmbeddings(const Args& args, const std::string& pipeline, double guidance) {
  ASSIGN_OR_RETURN(const bool true_cfg, Flux2TrueCfg(pipeline, guidance));
  if (!true_cfg) return at::Tensor();
  if (args.Has("negative_prompt_embeds")) {
    ASSIGN_OR_RETURN(auto tensors, LoadAllSafetensors(args.Get("negative_prompt_embeds")));
    auto it = tensors.find("prompt_embeds");
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(args.Get("negative_prompt_embeds"), ": no tensor 'prompt_embeds'"));
    }
    at::Tensor e = it->second.to(at::kFloat);
    return e.dim() == 3 && e.size(0) == 1 ? e[0] : e;
  }
  if (args.Has("prompt_embeds")) {
    return absl::InvalidArgumentError(
        "this klein base model samples with classifier-free guidance (--guidance > 1): with --prompt_embeds give "
        "--negative_prompt_embeds too (or --guidance 1 for none)");
  }
  ASSIGN_OR_RETURN(int64_t length, args.GetInt("max_sequence_length"));
  ASSIGN_OR_RETURN(auto embeds, EncodePromptsLocally(pipeline, {args.Get("negative-prompt")}, length));
  return embeds.at(0);
}

}  // namespace

absl::Status Sample(const Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads"));
  SetComputeThreads(static_cast<int>(threads));
  const std::string pipeline = args.Get("model");
  if (IsWanModel(pipeline)) {
    if (args.Has("references")) {
      return absl::InvalidArgumentError(
          "--references are FLUX.2's (editing); a Wan image-to-video model takes --image");
    }
    return SampleWanVideo(args);
  }
  if (args.Has("lora-low")) return absl::InvalidArgumentError("--lora-low is for Wan 2.2 A14B folders (two experts)");
  ASSIGN_OR_RETURN(auto size, ParseSize(args.Get("size")));
  Flux2SampleSettings s;
  s.width = size.first;
  s.height = size.second;
  ASSIGN_OR_RETURN(s.steps, args.GetInt("steps"));
  ASSIGN_OR_RETURN(s.guidance, args.GetDouble("guidance"));
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed"));
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  ASSIGN_OR_RETURN(at::Tensor embeds, PromptEmbeddings(args, pipeline));
  ASSIGN_OR_RETURN(s.negative_prompt_embeds, NegativeEmbeddings(args, pipeline, s.guidance));
  ASSIGN_OR_RETURN(int64_t in_channels, InChannels(pipeline));
  at::Tensor noise = Flux2InitialNoise(in_channels, s.width, s.height, static_cast<uint64_t>(seed));
  if (args.Has("references")) {
    ASSIGN_OR_RETURN(auto vae, Flux2VaeEncoder::Load(pipeline, at::kFloat, at::kCPU));
    ASSIGN_OR_RETURN(s.references,
                     EncodeFlux2References(*vae, absl::StrSplit(args.Get("references"), ',', absl::SkipEmpty())));
  }
  const int64_t target = (s.width / 16) * (s.height / 16), reference = s.references.token_count();
  ASSIGN_OR_RETURN(auto backend, StartSampleBackend(args, dtype, {target + reference, embeds.size(0), reference}));
  const DenoisingProgress progress(t0);
  ASSIGN_OR_RETURN(std::vector<at::Tensor> latents, SampleFlux2(backend->denoiser, {embeds}, {noise}, s, progress));
  progress.Finish();
  RETURN_IF_ERROR(backend->Stop());
  if (args.Has("out_latents")) RETURN_IF_ERROR(WriteSafetensors(args.Get("out_latents"), {{"latents", latents[0]}}));
  ASSIGN_OR_RETURN(auto decoder, Flux2VaeDecoder::Load(pipeline, at::kFloat, at::kCPU));
  ASSIGN_OR_RETURN(at::Tensor pixels, decoder->DecodeTokens(latents[0], s.height / 16, s.width / 16));
  if (args.Has("out_pixels")) RETURN_IF_ERROR(WriteSafetensors(args.Get("out_pixels"), {{"pixels", pixels}}));
  RETURN_IF_ERROR(WritePng(args.Get("out"), PixelsToImage(pixels[0])));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%lldx%lld, %lld steps, %.2f s)\n", args.Get("out").c_str(), static_cast<long long>(s.width),
              static_cast<long long>(s.height), static_cast<long long>(s.steps), seconds);
  return absl::OkStatus();
}

}  // namespace baton

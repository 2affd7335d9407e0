#include "tools/wan_vae_decode_command.h"

#include <absl/strings/str_cat.h>

#include <chrono>
#include <cstdio>

#include "core/device/threads.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/train/common.h"
#include "core/util/status.h"
#include "core/vae/wan_vae_decoder.h"
#include "tools/wan_vae_command.h"

namespace baton {
namespace {

absl::Status VaeDecode(const Args& args) {
  ASSIGN_OR_RETURN(VaeFolder folder, FindVaeFolder(args.Get("model")));
  if (folder.class_name != "AutoencoderKLWan") {
    return absl::UnimplementedError(absl::StrCat("vae-decode decodes Wan VAEs (AutoencoderKLWan); ", folder.dir,
                                                 " holds '", folder.class_name, "'"));
  }
  if (args.Get("normalized") != "true" && args.Get("normalized") != "false") {
    return absl::InvalidArgumentError(absl::StrCat("--normalized ", args.Get("normalized"), ": true or false"));
  }
  const bool normalized = args.Get("normalized") == "true";
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads"));
  if (threads < 1) return absl::InvalidArgumentError(absl::StrCat("--threads ", threads, ": must be >= 1"));
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  SetComputeThreads(static_cast<int>(threads));
  ASSIGN_OR_RETURN(auto vae, WanVaeDecoder::Load(folder.dir, dtype, at::kCPU));
  ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("inputs")));
  if (!inputs.count("latents")) {
    return absl::InvalidArgumentError(absl::StrCat(args.Get("inputs"), ": missing 'latents' [B, ", vae->config().z_dim,
                                                   ", F', H', W'] (normalised, as the Wan transformer produces)"));
  }
  const auto start = std::chrono::steady_clock::now();
  auto pixels = normalized ? vae->Decode(inputs["latents"]) : vae->DecodeRaw(inputs["latents"]);
  if (!pixels.ok()) return Annotate(pixels.status(), args.Get("inputs"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), {{"pixels", *pixels}}));
  std::printf("wrote %s: pixels %s from latents %s (Wan VAE, %.3f s decode)\n", args.Get("output").c_str(),
              ShapeString(pixels->sizes()).c_str(), ShapeString(inputs["latents"].sizes()).c_str(), seconds);
  return absl::OkStatus();
}

}  // namespace

Command WanVaeDecodeCommand() {
  return {"vae-decode",
          "Decode Wan latents to pixels with a pipeline's VAE (AutoencoderKLWan), as WanPipeline does after "
          "denoising.",
          {{"model", "pipeline folder (or vae/ folder) of a Wan VAE (AutoencoderKLWan)", "", true},
           {"inputs",
            "safetensors with 'latents' [B, z, F', H', W']: normalised, as the transformer produces them "
            "((z - latents_mean) / latents_std)",
            "", true},
           {"output", "output safetensors: pixels [B, 3, 4(F'-1)+1, H'*f, W'*f] fp32 in [-1, 1] (f 8; Wan 2.2: 16)", "",
            true},
           {"normalized",
            "true: un-normalise first (z * latents_std + latents_mean, as WanPipeline); false: 'latents' are the "
            "VAE's own (the encoder's posterior mean)",
            "true"},
           {"dtype", "compute dtype: fp32 | bf16", "fp32"},
           {"threads", "compute threads", "1"}},
          VaeDecode};
}

}  // namespace baton

#include "client/wan_vae_command.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/util/threads.h"
#include "core/vae/wan_vae.h"
#include "core/vae/wan_vae_config.h"

namespace baton {

absl::StatusOr<VaeFolder> FindVaeFolder(const std::string& model) {
  VaeFolder out{model, ""};
  if (!PathExists(JoinPath(model, "config.json")) || PathExists(JoinPath(model, "vae/config.json"))) {
    out.dir = JoinPath(model, "vae");
  }
  const std::string config = JoinPath(out.dir, "config.json");
  if (!PathExists(config)) {
    return absl::NotFoundError(absl::StrCat(model, ": no vae/config.json (nor config.json) in the model folder"));
  }
  ASSIGN_OR_RETURN(out.class_name, ReadConfigClassName(config));
  return out;
}

absl::Status WanVaeEncode(const Args& args, const std::string& vae_dir) {
  SetComputeThreads(1);
  if (args.Has("inputs") == args.Has("video"))
    return absl::InvalidArgumentError("give exactly one of --inputs and --video");
  ASSIGN_OR_RETURN(auto vae, WanVaeEncoder::Load(vae_dir, at::kFloat, at::kCPU));
  at::Tensor pixels;
  std::map<std::string, at::Tensor> out;
  if (args.Has("inputs")) {
    ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("inputs")));
    if (!inputs.count("pixels")) {
      return absl::InvalidArgumentError(
          absl::StrCat(args.Get("inputs"), ": missing 'pixels' [B, 3, F, H, W] or [B, 3, H, W] in [-1, 1]"));
    }
    pixels = inputs["pixels"];
  } else {
    return absl::UnimplementedError("--video: not built yet");
  }
  const auto start = std::chrono::steady_clock::now();
  auto latents = vae->EncodeMean(pixels);
  if (!latents.ok()) return Annotate(latents.status(), args.Has("inputs") ? args.Get("inputs") : args.Get("video"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out["latents"] = *latents;
  RETURN_IF_ERROR(TorchCall("normalize", [&] { out["normalized"] = vae->Normalize(*latents); }));
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), out));
  std::printf("wrote %s: latents [%s] (Wan VAE, %.3f s encode)\n", args.Get("output").c_str(),
              absl::StrJoin(latents->sizes(), ", ").c_str(), seconds);
  return absl::OkStatus();
}

}  // namespace baton

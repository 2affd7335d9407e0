#include "tools/wan_vae_command.h"

#include <absl/strings/str_cat.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "core/device/threads.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/wan_vae.h"
#include "core/vae/wan_vae_config.h"
#include "core/video/video_bucket.h"
#include "core/video/video_io.h"

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

namespace {

absl::StatusOr<VideoBucketSpec> BucketSpecFromFlags(const Args& args) {
  VideoBucketSpec spec;
  ASSIGN_OR_RETURN(spec.max_frames, args.GetInt("max-frames"));
  ASSIGN_OR_RETURN(spec.min_frames, args.GetInt("min-frames"));
  ASSIGN_OR_RETURN(spec.stride, args.GetInt("frame-stride"));
  ASSIGN_OR_RETURN(spec.target_area, args.GetInt("area"));
  return spec;
}

}  // namespace

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
    ASSIGN_OR_RETURN(VideoBucketSpec spec, BucketSpecFromFlags(args));
    ASSIGN_OR_RETURN(pixels, LoadClipPixels(args.Get("video"), spec));
    out["pixels"] = pixels;
  }
  const auto start = std::chrono::steady_clock::now();
  auto latents = vae->EncodeMean(pixels);
  if (!latents.ok()) return Annotate(latents.status(), args.Has("inputs") ? args.Get("inputs") : args.Get("video"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out["latents"] = *latents;
  RETURN_IF_ERROR(TorchCall("normalize", [&] { out["normalized"] = vae->Normalize(*latents); }));
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), out));
  std::printf("wrote %s: latents %s (Wan VAE, %.3f s encode)\n", args.Get("output").c_str(),
              ShapeString(latents->sizes()).c_str(), seconds);
  return absl::OkStatus();
}

absl::Status WriteVideo(const Args& args) {
  ASSIGN_OR_RETURN(Clip clip, ReadFrameFolder(args.Get("frames")));
  ASSIGN_OR_RETURN(int64_t fps, args.GetInt("fps"));
  if (fps <= 0 || fps > 240) return absl::InvalidArgumentError(absl::StrCat("--fps ", fps, ": must be in 1..240"));
  RETURN_IF_ERROR(WriteVideoFile(args.Get("output"), clip.frames, static_cast<int>(fps), args.Get("codec")));
  std::printf("wrote %s: %zu frames %dx%d at %lld fps (%s)\n", args.Get("output").c_str(), clip.frames.size(),
              clip.frames[0].width, clip.frames[0].height, static_cast<long long>(fps), args.Get("codec").c_str());
  return absl::OkStatus();
}

}  // namespace baton

#include "tools/clip_command.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/device/threads.h"
#include "core/encode/clip_image_processor.h"
#include "core/encode/clip_vision.h"
#include "core/image/image.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/train/common.h"
#include "core/util/status.h"

namespace baton {
namespace {

// --write-random SEED: a Wan 2.1 I2V pipeline's random CLIP parts (image_encoder/ + image_processor/) into --model.
absl::Status WriteRandom(const Args& args) {
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("write-random"));
  ClipVisionConfig config = TinyClipVisionConfig();
  if (args.Has("random-config")) {
    ASSIGN_OR_RETURN(config, LoadClipVisionConfig(args.Get("random-config")));
  }
  RETURN_IF_ERROR(WriteRandomClipPipelineFolders(config, args.Get("model"), static_cast<uint64_t>(seed)));
  std::printf(
      "wrote random CLIP image encoder %s/image_encoder (hidden %lld, %lld layers, %lld tokens) and "
      "image_processor/\n",
      args.Get("model").c_str(), static_cast<long long>(config.hidden_size),
      static_cast<long long>(config.num_hidden_layers), static_cast<long long>(config.num_positions()));
  return absl::OkStatus();
}

absl::Status ClipEncodeImage(const Args& args) {
  if (args.Has("write-random")) {
    RETURN_IF_ERROR(WriteRandom(args));
    if (!args.Has("image") && !args.Has("inputs")) return absl::OkStatus();
  } else if (args.Has("random-config")) {
    return absl::InvalidArgumentError("--random-config goes with --write-random");
  }
  if (args.Has("image") == args.Has("inputs")) {
    return absl::InvalidArgumentError("give exactly one of --image and --inputs");
  }
  if (!args.Has("output")) return absl::InvalidArgumentError("--output is required");
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads"));
  if (threads < 1) return absl::InvalidArgumentError("--threads must be at least 1");
  SetComputeThreads(static_cast<int>(threads));
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(args.Get("dtype")));
  ASSIGN_OR_RETURN(at::Device device, ParseDevice(args.Get("device")));
  ASSIGN_OR_RETURN(ClipFolders folders, FindClipFolders(args.Get("model")));

  at::Tensor pixel_values;
  if (args.Has("image")) {
    if (folders.image_processor.empty()) {
      return absl::NotFoundError(absl::StrCat(args.Get("model"),
                                              ": no image_processor/preprocessor_config.json to preprocess --image "
                                              "with (give preprocessed --inputs instead)"));
    }
    ASSIGN_OR_RETURN(ClipImageProcessor processor, ClipImageProcessor::Load(folders.image_processor));
    std::vector<Image> images;
    for (absl::string_view path : absl::StrSplit(args.Get("image"), ',', absl::SkipEmpty())) {
      ASSIGN_OR_RETURN(Image image, ReadImageFile(std::string(path)));
      images.push_back(std::move(image));
    }
    if (images.empty()) return absl::InvalidArgumentError("--image names no file");
    ASSIGN_OR_RETURN(pixel_values, processor.Preprocess(images));
  } else {
    ASSIGN_OR_RETURN(auto inputs, LoadAllSafetensors(args.Get("inputs")));
    auto it = inputs.find("pixel_values");
    if (it == inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat(args.Get("inputs"), ": no 'pixel_values' tensor"));
    }
    pixel_values = it->second;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ClipVisionEncoder> encoder,
                   ClipVisionEncoder::Load(folders.image_encoder, dtype, device));
  ASSIGN_OR_RETURN(at::Tensor embeds, encoder->PenultimateHiddenStates(pixel_values));
  std::map<std::string, at::Tensor> out = {{"image_embeds", embeds.cpu()}};
  if (args.Has("image")) out["pixel_values"] = pixel_values;
  RETURN_IF_ERROR(WriteSafetensors(args.Get("output"), out));
  std::printf("wrote %s: image_embeds %s%s\n", args.Get("output").c_str(), ShapeString(embeds.sizes()).c_str(),
              args.Has("image") ? absl::StrCat(", pixel_values ", ShapeString(pixel_values.sizes())).c_str() : "");
  return absl::OkStatus();
}

}  // namespace

Command ClipEncodeImageCommand() {
  return {"clip-encode-image",
          "Encode images with a Wan 2.1 I2V pipeline's CLIP image encoder, as WanImageToVideoPipeline.encode_image "
          "(CLIPImageProcessor, then CLIPVisionModel hidden_states[-2]).",
          {{"model", "Wan 2.1 I2V pipeline folder (image_encoder/ + image_processor/), or the image_encoder/ folder",
            "", true},
           {"image", "PNG/JPEG file(s), comma-separated (one batch row each), preprocessed by image_processor/"},
           {"inputs", "safetensors with preprocessed 'pixel_values' [B, 3, S, S] instead of --image"},
           {"output",
            "output safetensors: image_embeds [B, 1 + (S/patch)^2, hidden] fp32 (ViT-H/14: [B, 257, 1280]), and "
            "pixel_values [B, 3, S, S] with --image"},
           {"dtype", "compute dtype: fp32 | bf16 | fp16", "fp32"},
           {"device", "cpu | cuda | cuda:N", "cpu"},
           {"threads", "compute threads", "1"},
           {"write-random",
            "tests: first write random weights with this seed into --model (image_encoder/ + image_processor/); "
            "alone, only that"},
           {"random-config", "with --write-random: the CLIPVisionConfig config.json to use (default: a tiny one)"}},
          ClipEncodeImage};
}

}  // namespace baton

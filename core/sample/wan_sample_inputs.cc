#include "core/sample/wan_sample_inputs.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/image/image.h"
#include "core/model/wan_config.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/wan_vae_config.h"
#include "core/video/video_io.h"

namespace baton {
namespace {

// model_index.json's expand_timesteps (Wan 2.2 TI2V-5B): its image-to-video mode is the clean first frame.
bool ExpandTimesteps(const std::string& pipeline) {
  auto text = ReadFile(JoinPath(pipeline, "model_index.json"));
  if (!text.ok()) return false;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  return j.is_object() && j.value("expand_timesteps", false) == true;
}

// An image file, or a video's first frame (any other file: core/video decodes it).
absl::StatusOr<Image> FirstFrameOf(const std::string& path) {
  auto bytes = ReadFile(path);
  if (bytes.ok() && DetectImageFormat(*bytes) != ImageFormat::kUnknown) return DecodeImage(*bytes, path);
  ASSIGN_OR_RETURN(Clip clip, ReadClip(path, 1));
  if (clip.frames.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no frames"));
  return clip.frames[0];
}

}  // namespace

absl::StatusOr<std::string> WanSampleConditioning(const std::string& pipeline, bool has_image) {
  ASSIGN_OR_RETURN(WanConfig t, LoadWanConfig(JoinPath(pipeline, "transformer/config.json")));
  ASSIGN_OR_RETURN(WanVaeConfig vae, LoadWanVaeConfig(JoinPath(pipeline, "vae/config.json")));
  const bool concat = t.in_channels == 2 * vae.z_dim + 4;
  if (!has_image) {
    if (!concat) return std::string("none");
    return absl::InvalidArgumentError(absl::StrCat(pipeline, " is an image-to-video model (", t.in_channels,
                                                   " input channels): give the video's first frame (an image)"));
  }
  if (concat || ExpandTimesteps(pipeline)) return std::string("first-frame");
  return absl::InvalidArgumentError(absl::StrCat(pipeline, " is a text-to-video model (", t.in_channels,
                                                 " input channels, no expand_timesteps): it takes no first frame"));
}

absl::StatusOr<at::Tensor> WanFirstFramePixels(const std::string& image_path, int64_t width, int64_t height,
                                               int64_t frames) {
  ASSIGN_OR_RETURN(Image image, FirstFrameOf(image_path));
  if (image.width != width || image.height != height) {
    image = ResizeImage(image, static_cast<int>(width), static_cast<int>(height));
  }
  at::Tensor first = ImageToPixels(image).unsqueeze(2);  // [1, 3, 1, H, W]
  return at::cat({first, at::zeros({1, 3, std::max<int64_t>(frames - 1, 1), height, width})}, 2);
}

}  // namespace baton

// transformers' CLIPImageProcessor (PIL backend) for the CLIP image encoder of Wan 2.1 I2V: a pipeline's
// `image_processor/preprocessor_config.json` and its preprocessing, resize (PIL's own resampling, exactly) → center
// crop → ×rescale_factor → (x − mean) / std, giving the pixel_values CLIPVisionModel takes. Also PIL's resize itself.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/image/image.h"

namespace baton {

// PIL.Image.Resampling values, as preprocessor_config.json's "resample" stores them.
enum class PilResample { kNearest = 0, kLanczos = 1, kBilinear = 2, kBicubic = 3, kBox = 4, kHamming = 5 };

// PIL's `image.resize((width, height), resample)` of an RGB image, bit for bit (Pillow's Resample.c: a separable
// convolution whose support widens by the scale when shrinking, coefficients in 22-bit fixed point, each pass rounded
// and clipped to uint8; a same-size axis is not resampled). The pass order is Pillow 13's (the pinned one): vertical
// first when the height loses more than twice as many pixels as the width, else horizontal first (Pillow < 13 always
// went horizontal first, so a much taller-than-wide shrink differs by a few levels from older Pillows).
// Box, bilinear, hamming, bicubic and lanczos; nearest is UNIMPLEMENTED. Sizes must be positive.
absl::StatusOr<Image> PilResize(const Image& src, int width, int height, PilResample filter);

struct ClipImageProcessorConfig {
  bool do_convert_rgb = true;  // an Image is RGB already (DecodeImage drops alpha as PIL's convert("RGB") does)
  bool do_resize = true;
  // `size`: {"shortest_edge": N} (or a bare int), {"shortest_edge", "longest_edge"}, or {"height", "width"}.
  int64_t shortest_edge = 224;  // 0 when the size is height x width
  int64_t longest_edge = 0;     // 0: none
  int64_t resize_height = 0;
  int64_t resize_width = 0;
  PilResample resample = PilResample::kBicubic;
  bool do_center_crop = true;
  int64_t crop_height = 224;  // `crop_size`: {"height", "width"} or a bare int
  int64_t crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OPENAI_CLIP_MEAN
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};  // OPENAI_CLIP_STD

  absl::Status Validate() const;
};

// Absent fields take CLIPImageProcessor's defaults (those above), as from_pretrained does.
absl::StatusOr<ClipImageProcessorConfig> ParseClipImageProcessorConfig(absl::string_view json_text,
                                                                       absl::string_view source);
// What CLIPImageProcessor.save_pretrained writes for `config` (preprocessor_config.json).
std::string ClipImageProcessorConfigToJson(const ClipImageProcessorConfig& config);
// `dir`/preprocessor_config.json.
absl::Status WriteClipImageProcessorConfig(const ClipImageProcessorConfig& config, const std::string& dir);
// CLIPImageProcessor's defaults with the shortest edge and the crop set to `image_size` (a tiny pipeline's).
ClipImageProcessorConfig ClipImageProcessorConfigForSize(int64_t image_size);

// Immutable after Load; Preprocess is const and may run on several threads at once.
class ClipImageProcessor {
 public:
  explicit ClipImageProcessor(ClipImageProcessorConfig config) : config_(std::move(config)) {}
  // `path`: a preprocessor_config.json, or a folder holding one (a pipeline's image_processor/).
  static absl::StatusOr<ClipImageProcessor> Load(const std::string& path);

  const ClipImageProcessorConfig& config() const { return config_; }

  // The (height, width) the resize step gives an image of `height` x `width` (transformers'
  // get_resize_output_image_size / get_size_with_aspect_ratio); the input size when do_resize is off.
  std::pair<int64_t, int64_t> ResizedSize(int64_t height, int64_t width) const;

  // image (RGB8, any size) → pixel_values [1, 3, crop_height, crop_width] fp32 on the CPU, as
  // `CLIPImageProcessor()(images=pil_image, return_tensors="pt").pixel_values` with the PIL backend: equal to the
  // last bit (uint8 after the resize, the crop zero-padding a too-small image, rescale in float64 then float32,
  // normalisation in float32). Without do_center_crop the output is the resized size.
  absl::StatusOr<at::Tensor> Preprocess(const Image& image) const;
  // Several images → [B, 3, H, W]; they must come out the same size (always so with center crop).
  absl::StatusOr<at::Tensor> Preprocess(const std::vector<Image>& images) const;

 private:
  ClipImageProcessorConfig config_;
};

}  // namespace baton

// RGB8 images for the encoder worker: decoding PNG (libpng) and JPEG (libjpeg-turbo) into one
// layout, PNG/JPEG encoding (sample datasets, tests), and the resize/crop used by bucketing.
// Decoding matches PIL's `Image.open(f).convert("RGB")` (DecodeImage says how).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3] RGB, row-major

  Image() = default;
  Image(int w, int h) : width(w), height(h), pixels(static_cast<size_t>(w) * h * 3, 0) {}
  uint8_t* at(int x, int y) { return &pixels[(static_cast<size_t>(y) * width + x) * 3]; }
  const uint8_t* at(int x, int y) const { return &pixels[(static_cast<size_t>(y) * width + x) * 3]; }
};

// Images larger than this (either side, or in total pixels) are rejected before decoding.
constexpr int kMaxImageSide = 16384;
constexpr int64_t kMaxImagePixels = 128ll * 1024 * 1024;

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp, kGif, kBmp, kTiff };

ImageFormat DetectImageFormat(absl::string_view bytes);
const char* ImageFormatName(ImageFormat format);

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;  // as displayed: after the EXIF orientation
  int height = 0;
  int orientation = 1;  // EXIF orientation 1..8 (1 = as stored, or no EXIF)
};

// Format and displayed size from the header only (PNG IHDR, JPEG SOF, EXIF orientation), without
// decoding pixels. Errors as DecodeImage for empty, non-image and unsupported input; a damaged body is
// not detected here.
absl::StatusOr<ImageInfo> ReadImageInfo(absl::string_view bytes, absl::string_view name);

// Decodes PNG (any color type and bit depth, interlaced or not) or JPEG (grayscale, YCbCr/RGB;
// CMYK/YCCK is rejected) to RGB8. `name` (usually the path) prefixes every error message. The format is
// detected from magic bytes, never the extension. Matches PIL's `Image.open(f).convert("RGB")`: alpha is
// dropped (not composited), 16-bit samples keep their high byte, gamma chunks are ignored, and the EXIF
// orientation is applied as diffusers' trainers do (`PIL.ImageOps.exif_transpose`, see exif.h).
// libpng/libjpeg errors are caught with setjmp/longjmp and become a Status, never exit().
// INVALID_ARGUMENT for empty, truncated, corrupt or non-image data; UNIMPLEMENTED for formats
// this build cannot decode (WebP, GIF, BMP, TIFF). kIgnore returns the pixels as stored (debugging).
enum class ExifOrientationMode { kApply, kIgnore };
absl::StatusOr<Image> DecodeImage(absl::string_view bytes, absl::string_view name,
                                  ExifOrientationMode orientation = ExifOrientationMode::kApply);
absl::StatusOr<Image> ReadImageFile(const std::string& path);

absl::StatusOr<std::string> EncodePng(const Image& image);
absl::Status WritePng(const std::string& path, const Image& image);
// Baseline JPEG, 4:2:0 chroma subsampling; quality in [1, 100].
absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality = 90);

// Resamples to width x height (both > 0), separably in float on the sRGB values: area averaging
// (exact box coverage) on an axis that shrinks, bilinear with half-pixel centers on an axis that
// grows or keeps its size (same size is an exact copy). Rounds to nearest.
Image ResizeImage(const Image& src, int width, int height);

// The centered width x height window (offsets rounded down); requires width <= src.width and
// height <= src.height.
Image CenterCrop(const Image& src, int width, int height);

// Pixels in [0, 255] RGB8 → [1, 3, H, W] fp32 in [-1, 1] (what the VAE expects).
at::Tensor ImageToPixels(const Image& image);

}  // namespace baton

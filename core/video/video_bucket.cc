#include "core/video/video_bucket.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>

#include "core/util/status.h"
#include "core/video/clip_windows.h"

namespace baton {

Image CoverAndCrop(const Image& src, int width, int height) {
  const double scale = std::max(static_cast<double>(width) / src.width, static_cast<double>(height) / src.height);
  const int w = std::max(width, static_cast<int>(std::lround(src.width * scale)));
  const int h = std::max(height, static_cast<int>(std::lround(src.height * scale)));
  return CenterCrop(ResizeImage(src, w, h), width, height);
}

int64_t LargestFourKPlusOne(int64_t n) { return n < 1 ? 0 : ((n - 1) / 4) * 4 + 1; }

absl::StatusOr<VideoBucket> ChooseVideoBucket(const VideoBucketSpec& spec, int64_t source_frames, int width,
                                              int height) {
  if (spec.max_frames < 1 || spec.stride < 1 || spec.step < 1 || spec.target_area < int64_t{spec.step} * spec.step) {
    return absl::InvalidArgumentError(absl::StrCat("video bucket: max_frames ", spec.max_frames, ", stride ",
                                                   spec.stride, ", step ", spec.step, ", target_area ",
                                                   spec.target_area, " (need >= 1, >= 1, >= 1, >= step²)"));
  }
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("video bucket: frame size ", width, "x", height));
  }
  const int64_t sampled = (source_frames + spec.stride - 1) / spec.stride;
  if (sampled < std::max<int64_t>(1, spec.min_frames)) {
    return absl::InvalidArgumentError(absl::StrCat("clip too short: ", source_frames, " frames give ", sampled,
                                                   " at stride ", spec.stride, "; at least ",
                                                   std::max<int64_t>(1, spec.min_frames), " needed"));
  }
  VideoBucket b;
  b.frames = LargestFourKPlusOne(std::min(sampled, spec.max_frames));
  if (!spec.frame_buckets.empty()) {
    b.frames = 0;
    for (int64_t f : spec.frame_buckets) {
      if (f <= sampled) b.frames = std::max(b.frames, f);
    }
    if (b.frames == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "clip too short: ", source_frames, " frames give ", sampled, " at stride ", spec.stride,
          "; the shortest frame bucket is ", *std::min_element(spec.frame_buckets.begin(), spec.frame_buckets.end())));
    }
  }
  const double area = static_cast<double>(width) * height;
  const double scale = std::sqrt(std::min(1.0, static_cast<double>(spec.target_area) / area));
  b.width = std::max(spec.step, static_cast<int>(std::floor(width * scale / spec.step)) * spec.step);
  b.height = std::max(spec.step, static_cast<int>(std::floor(height * scale / spec.step)) * spec.step);
  return b;
}

at::Tensor BucketClipToPixels(const Clip& clip, const VideoBucket& bucket, int64_t stride, int64_t start) {
  TORCH_CHECK(static_cast<int64_t>(clip.frames.size()) >= (start + bucket.frames - 1) * stride + 1,
              "BucketClipToPixels: clip has ", clip.frames.size(), " frames, bucket needs ", bucket.frames,
              " from sampled frame ", start, " at stride ", stride);
  std::vector<at::Tensor> frames;
  for (int64_t i = 0; i < bucket.frames; ++i) {
    frames.push_back(ImageToPixels(CoverAndCrop(clip.frames[(start + i) * stride], bucket.width, bucket.height)));
  }
  return at::stack(frames, 2);  // [1, 3, H, W] each → [1, 3, F, H, W]
}

absl::StatusOr<at::Tensor> LoadClipPixels(const std::string& path, const VideoBucketSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<at::Tensor> clips, LoadClipWindows(path, spec, ClipExtraction{}));
  return clips.front();  // head: the first clip
}

}  // namespace baton

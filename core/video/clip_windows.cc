#include "core/video/clip_windows.h"

#include <absl/strings/ascii.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <optional>

#include "core/tensor/torch_call.h"
#include "core/util/status.h"
#include "core/video/video_io.h"

namespace baton {

absl::StatusOr<std::vector<int64_t>> CheckFrameBuckets(std::vector<int64_t> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int64_t f = frames[i];
    if (f < 1 || f > 1021 || (f - 1) % 4 != 0 ||
        std::find(frames.begin(), frames.begin() + i, f) != frames.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", f, "' is not a frame count 4k + 1 in [1, 1021] given once (1, 5, 9, ... 81)"));
    }
  }
  std::sort(frames.begin(), frames.end());
  return frames;
}

absl::StatusOr<std::vector<int64_t>> ParseFrameBuckets(const std::string& text) {
  std::vector<int64_t> frames;
  if (text.empty()) return frames;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t f = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &f)) {
      return absl::InvalidArgumentError(absl::StrCat("--frames ", text, ": '", part, "' is not a number"));
    }
    frames.push_back(f);
  }
  auto checked = CheckFrameBuckets(std::move(frames));
  if (!checked.ok())
    return absl::InvalidArgumentError(absl::StrCat("--frames ", text, ": ", checked.status().message()));
  return checked;
}

absl::Status CheckClipExtraction(const ClipExtraction& e) {
  if (e.mode != "head" && e.mode != "chunk" && e.mode != "slide" && e.mode != "uniform") {
    return absl::InvalidArgumentError(
        absl::StrCat("--frame_extraction ", e.mode, ": expected head, chunk, slide or uniform"));
  }
  if (e.clips_per_video < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--clips_per_video ", e.clips_per_video, ": expected >= 0"));
  }
  if (e.mode == "uniform" && e.clips_per_video < 1) {
    return absl::InvalidArgumentError("--frame_extraction uniform needs --clips_per_video N >= 1 (clips per video)");
  }
  if (e.slide_stride < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--slide_stride ", e.slide_stride, ": expected >= 1"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> ClipStarts(const ClipExtraction& e, int64_t sampled, int64_t length) {
  std::vector<int64_t> starts;
  if (length < 1 || sampled < length) return starts;
  const int64_t cap = e.clips_per_video > 0 ? e.clips_per_video : sampled;
  if (e.mode == "chunk" || e.mode == "slide") {
    const int64_t step = e.mode == "chunk" ? length : e.slide_stride;
    for (int64_t i = 0; i + length <= sampled && static_cast<int64_t>(starts.size()) < cap; i += step) {
      starts.push_back(i);
    }
  } else if (e.mode == "uniform" && e.clips_per_video > 1) {
    const int64_t n = e.clips_per_video, last = sampled - length;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t start = k * last / (n - 1);
      if (starts.empty() || starts.back() != start) starts.push_back(start);
    }
  } else {
    starts.push_back(0);  // head, or uniform with one clip (musubi-tuner takes that as head)
  }
  return starts;
}

absl::StatusOr<std::vector<at::Tensor>> LoadClipWindows(const std::string& path, const VideoBucketSpec& spec,
                                                        const ClipExtraction& e) {
  RETURN_IF_ERROR(CheckClipExtraction(e));
  int64_t longest = spec.max_frames;
  for (int64_t f : spec.frame_buckets) longest = std::max(longest, f);
  const int64_t needed = e.mode == "head" ? (std::max<int64_t>(1, longest) - 1) * std::max<int64_t>(1, spec.stride) + 1
                                          : -1;  // every frame: the clips run to the end
  // Frame by frame, keeping only every stride-th, already at the bucket's size (which the first frame's size sets; the
  // frame count only picks the bucket's length): a long video costs its sampled frames at the bucket's size, not its
  // frames at their own. CoverAndCrop on each as BucketClipToPixels does, so the pixels are the same.
  VideoBucketSpec size_only = spec;
  size_only.frame_buckets.clear();
  size_only.min_frames = 1;
  std::optional<VideoBucket> size;
  int width = 0, height = 0;
  std::vector<Image> sampled;
  auto keep = [&](Image frame, int64_t index) -> absl::Status {
    if (index == 0) {
      width = frame.width;
      height = frame.height;
      ASSIGN_OR_RETURN(size, ChooseVideoBucket(size_only, 1, width, height));
    }
    if (index % spec.stride == 0) sampled.push_back(CoverAndCrop(frame, size->width, size->height));
    return absl::OkStatus();
  };
  auto frames = StreamClip(path, needed, keep);
  if (!frames.ok()) return frames.status();
  if (!size) return absl::InvalidArgumentError(absl::StrCat(path, ": no frames"));
  auto bucket = ChooseVideoBucket(spec, *frames, width, height);
  if (!bucket.ok()) return Annotate(bucket.status(), path);
  std::vector<at::Tensor> out;
  for (int64_t start : ClipStarts(e, static_cast<int64_t>(sampled.size()), bucket->frames)) {
    at::Tensor pixels;
    RETURN_IF_ERROR(TorchCall("bucketing the clip", [&] {
      std::vector<at::Tensor> clip;
      for (int64_t i = 0; i < bucket->frames; ++i) clip.push_back(ImageToPixels(sampled[start + i]));
      pixels = at::stack(clip, 2);  // [1, 3, H, W] each → [1, 3, F, H, W]
    }));
    out.push_back(std::move(pixels));
  }
  return out;
}

absl::StatusOr<at::Tensor> StillToPixels(const Image& image, const VideoBucketSpec& spec) {
  VideoBucketSpec one = spec;
  one.frame_buckets.clear();
  one.min_frames = 1;
  ASSIGN_OR_RETURN(VideoBucket bucket, ChooseVideoBucket(one, 1, image.width, image.height));
  Clip clip;
  clip.frames = {image};
  at::Tensor pixels;
  RETURN_IF_ERROR(TorchCall("bucketing the image", [&] { pixels = BucketClipToPixels(clip, bucket, 1, 0); }));
  return pixels;
}

}  // namespace baton

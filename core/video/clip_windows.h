// How one video becomes training clips (encoder_worker --frame_extraction, --clips_per_video, --slide_stride), in
// musubi-tuner's meanings: where each clip of a frame bucket's length starts among the video's sampled frames.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/video/video_bucket.h"

namespace baton {

struct ClipExtraction {
  // head: the first clip only (what Baton always did); chunk: consecutive clips, end to end; slide: a clip starting
  // every `slide_stride` sampled frames (musubi-tuner's frame_stride); uniform: `clips_per_video` clips spread evenly
  // from the first frame to the last (musubi-tuner's frame_sample).
  std::string mode = "head";
  int64_t clips_per_video = 0;  // chunk, slide: at most this many, the first ones (0: all); uniform: this many (>= 1)
  int64_t slide_stride = 1;
};

// Frame buckets as numbers (a service request's): each 4k+1 in [1, 1021], once; returned sorted. InvalidArgument
// naming the first that is not.
absl::StatusOr<std::vector<int64_t>> CheckFrameBuckets(std::vector<int64_t> frames);
// "1,33,81" (encoder_worker --frames): CheckFrameBuckets of the numbers; "" = none. Errors name the flag.
absl::StatusOr<std::vector<int64_t>> ParseFrameBuckets(const std::string& text);

// InvalidArgument naming the flag for an unknown mode, a negative count, uniform without a count, a stride < 1.
absl::Status CheckClipExtraction(const ClipExtraction& e);

// The first sampled frame of each clip of `length` frames among `sampled` (>= length): head {0}; chunk 0, length,
// 2·length, ... while a whole clip fits; slide 0, s, 2s, ... while it fits; uniform floor(k·(sampled − length) / (n −
// 1)) for k < n (numpy's linspace as musubi-tuner takes it), repeats dropped.
std::vector<int64_t> ClipStarts(const ClipExtraction& e, int64_t sampled, int64_t length);

// The training clips of the video (or frame folder) at `path`: decoded (only the frames head needs), bucketed
// (ChooseVideoBucket), and cut as `e` says: pixels [1, 3, F, H, W] fp32 in [-1, 1] each, in start order. Errors name
// `path`.
absl::StatusOr<std::vector<at::Tensor>> LoadClipWindows(const std::string& path, const VideoBucketSpec& spec,
                                                        const ClipExtraction& e);

// A still image as a one-frame clip of the spec's area: pixels [1, 3, 1, H, W].
absl::StatusOr<at::Tensor> StillToPixels(const Image& image, const VideoBucketSpec& spec);

}  // namespace baton

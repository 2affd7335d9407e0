// Wan's clip buckets: frame counts 4k+1 (the VAE encodes frame 0 alone, then chunks of 4 frames into one latent
// frame each) and sizes that are multiples of 16 (8× VAE, then the transformer's 2×2 patches), near a target area
// with the clip's own aspect ratio. Frames are sampled every `stride` source frames from the first one, and the
// largest 4k+1 count that fits both the clip and max_frames is kept (Wan trains at 16 fps: stride 2 for a 30 fps
// source comes close; DiffSynth-Studio's default is 81 frames).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/image/image.h"
#include "core/video/video_io.h"

namespace baton {

struct VideoBucketSpec {
  int64_t max_frames = 81;          // a 4k+1 count is taken up to this
  int64_t min_frames = 1;           // fewer sampled frames is an error (too short)
  int64_t stride = 1;               // take every stride-th source frame
  int64_t target_area = 480 * 832;  // pixels; the bucket's width·height <= this and <= the source's (no upscaling)
  int step = 16;                    // both sides multiples of this
  // Frame buckets (encoder_worker --frames 1,33,81; each 4k+1, ascending): a clip takes the longest one its sampled
  // frames fill. Empty: the largest 4k+1 up to max_frames.
  std::vector<int64_t> frame_buckets;
};

struct VideoBucket {
  int64_t frames = 0;  // 4k+1
  int width = 0;
  int height = 0;
};

// The largest 4k+1 <= n (n >= 1); 0 for n < 1.
int64_t LargestFourKPlusOne(int64_t n);

// The bucket of a clip of `source_frames` frames of width × height: frames = LargestFourKPlusOne(min(sampled,
// max_frames)) with sampled = ceil(source_frames / stride) (with frame_buckets: the longest ≤ sampled); size = the
// source scaled by sqrt(min(1, area / (w·h))), each side rounded down to `step` (at least `step`). INVALID_ARGUMENT for
// a bad spec, or a clip that samples fewer than max(1, min_frames) frames ("too short", with the counts).
absl::StatusOr<VideoBucket> ChooseVideoBucket(const VideoBucketSpec& spec, int64_t source_frames, int width,
                                              int height);

// `src` scaled (aspect kept, sides rounded to nearest) to cover width × height, then center-cropped to it: each
// frame's treatment, and that of an image standing for a frame (an image-to-video first frame, a loss mask).
Image CoverAndCrop(const Image& src, int width, int height);

// Frames start·stride, (start + 1)·stride, ... (bucket.frames of them) of `clip`, each scaled to cover the bucket
// (aspect kept) and center-cropped, as pixels [1, 3, F, H, W] fp32 in [-1, 1] (the Wan VAE's input).
at::Tensor BucketClipToPixels(const Clip& clip, const VideoBucket& bucket, int64_t stride, int64_t start = 0);

// ReadClip (decoding only the frames the bucket can use), ChooseVideoBucket, BucketClipToPixels; errors name `path`.
absl::StatusOr<at::Tensor> LoadClipPixels(const std::string& path, const VideoBucketSpec& spec);

}  // namespace baton

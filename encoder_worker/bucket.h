// Aspect-ratio buckets: a fixed, deterministic list of training resolutions of about the same pixel
// area, sides multiples of 16 (FLUX.2: VAE 8x down, then 2x2 patchify), so images of any shape
// are trained near their own aspect ratio. An image goes to the bucket closest in log aspect
// ratio, is scaled (aspect kept) to cover it, and center-cropped. Same inputs, same bucket and
// same pixels, on every machine.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/image/image.h"

namespace baton {

struct BucketSpec {
  int64_t target_area = 1024 * 1024;  // pixels; every bucket has width * height <= this
  int step = 16;                      // both sides are multiples of this
  int min_side = 256;
  int max_side = 4096;
  double max_aspect = 4.0;  // max(w, h) / min(w, h) <= this
};

struct Bucket {
  int width = 0;
  int height = 0;
  bool operator==(const Bucket& o) const { return width == o.width && height == o.height; }
  std::string ToString() const;  // "WxH"
};

// Bucket settings for a square target resolution (area = resolution², sides multiples of 16).
BucketSpec BucketsForResolution(int64_t resolution);

// A bucket resolution (pixels per side) is in [kMinResolution, kMaxResolution].
inline constexpr int64_t kMinResolution = 16, kMaxResolution = 8192;
// Each of `resolutions` within the bounds and given once.
bool ValidResolutions(const std::vector<int64_t>& resolutions);

// "1024" or "512,768,1024" (encoder_worker --resolution): each in [16, 8192], none twice; InvalidArgument otherwise.
absl::StatusOr<std::vector<int64_t>> ParseResolutions(const std::string& text);

// The bucket list, sorted by aspect ratio width/height ascending (ties by width): the largest
// square s x s (s = floor(sqrt(area) / step) * step), and for every width w = min_side rounded up
// to step, ..., max_side the height h = floor(area / w / step) * step (capped at max_side), in
// both orientations, kept if h >= min_side and the aspect is within max_aspect (kohya's sweep).
// INVALID_ARGUMENT if the spec is inconsistent or yields no bucket.
absl::StatusOr<std::vector<Bucket>> MakeBuckets(const BucketSpec& spec);

// Index of the bucket whose aspect ratio is closest to width/height in log space, compared
// exactly in integers: |log(bw/bh) - log(w/h)| = log(max(bw*h, bh*w) / min(bw*h, bh*w)). Ties go
// to the larger area, then the smaller width. Requires non-empty buckets and width, height > 0.
size_t AssignBucket(const std::vector<Bucket>& buckets, int width, int height);

// Size the image is scaled to before the crop: the aspect-preserving size that covers the bucket
// (one side equal to the bucket's, the other rounded to nearest and at least the bucket's).
Bucket CoverSize(int width, int height, const Bucket& bucket);

// ResizeImage to CoverSize, then CenterCrop to the bucket.
Image ResizeToBucket(const Image& image, const Bucket& bucket);

}  // namespace baton

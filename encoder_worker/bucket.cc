#include "encoder_worker/bucket.h"

#include <absl/strings/ascii.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <cassert>
#include <cmath>

namespace baton {

BucketSpec BucketsForResolution(int64_t resolution) {
  BucketSpec spec;
  spec.target_area = resolution * resolution;
  spec.step = 16;
  spec.min_side = static_cast<int>(std::max<int64_t>(16, (resolution / 2) / 16 * 16));
  spec.max_side = static_cast<int>(resolution * 2);
  spec.max_aspect = 2.5;
  return spec;
}

bool ValidResolutions(const std::vector<int64_t>& resolutions) {
  for (int64_t r : resolutions) {
    if (r < kMinResolution || r > kMaxResolution || std::count(resolutions.begin(), resolutions.end(), r) > 1) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<int64_t>> ParseResolutions(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t r = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &r) || r < kMinResolution || r > kMaxResolution) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resolution ", text, ": '", part, "' is not a resolution in [16, 8192] (pixels per side)"));
    }
    if (std::find(out.begin(), out.end(), r) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--resolution ", text, ": ", r, " is given twice"));
    }
    out.push_back(r);
  }
  return out;
}

std::string Bucket::ToString() const { return absl::StrCat(width, "x", height); }

absl::StatusOr<std::vector<Bucket>> MakeBuckets(const BucketSpec& spec) {
  if (spec.step <= 0 || spec.min_side <= 0 || spec.min_side > spec.max_side || spec.max_side > kMaxImageSide ||
      spec.max_aspect < 1.0 || spec.target_area < static_cast<int64_t>(spec.step) * spec.step) {
    return absl::InvalidArgumentError(absl::StrCat("invalid bucket spec: area ", spec.target_area, ", step ", spec.step,
                                                   ", sides [", spec.min_side, ", ", spec.max_side, "], max aspect ",
                                                   spec.max_aspect));
  }
  const int step = spec.step;
  auto fits = [&](int w, int h) {
    return w >= spec.min_side && h >= spec.min_side && w <= spec.max_side && h <= spec.max_side &&
           static_cast<double>(std::max(w, h)) / std::min(w, h) <= spec.max_aspect;
  };
  std::vector<Bucket> buckets;
  int square = static_cast<int>(std::floor(std::sqrt(static_cast<double>(spec.target_area)) / step)) * step;
  while (static_cast<int64_t>(square + step) * (square + step) <= spec.target_area) square += step;
  while (static_cast<int64_t>(square) * square > spec.target_area) square -= step;
  square = std::min(square, spec.max_side / step * step);
  if (square > 0 && fits(square, square)) buckets.push_back({square, square});
  int first = (spec.min_side + step - 1) / step * step;
  for (int w = first; w <= spec.max_side; w += step) {
    int64_t h64 = spec.target_area / w / step * step;
    int h = static_cast<int>(std::min<int64_t>(h64, spec.max_side / step * step));
    if (h <= 0 || !fits(w, h)) continue;
    buckets.push_back({w, h});
    buckets.push_back({h, w});
  }
  // Sort by aspect w/h ascending (compare w1*h2 < w2*h1 exactly), then width; drop duplicates.
  std::sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) {
    int64_t l = static_cast<int64_t>(a.width) * b.height, r = static_cast<int64_t>(b.width) * a.height;
    if (l != r) return l < r;
    return a.width < b.width;
  });
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  if (buckets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bucket spec yields no bucket: area ", spec.target_area, ", sides [",
                                                   spec.min_side, ", ", spec.max_side, "]"));
  }
  return buckets;
}

size_t AssignBucket(const std::vector<Bucket>& buckets, int width, int height) {
  assert(!buckets.empty() && width > 0 && height > 0);
  // Distance as the ratio num/den >= 1 of bw*h and bh*w; compared by cross-multiplication.
  auto distance = [&](const Bucket& b) {
    int64_t p = static_cast<int64_t>(b.width) * height, q = static_cast<int64_t>(b.height) * width;
    return std::make_pair(std::max(p, q), std::min(p, q));
  };
  size_t best = 0;
  for (size_t i = 1; i < buckets.size(); ++i) {
    auto [n1, d1] = distance(buckets[i]);
    auto [n0, d0] = distance(buckets[best]);
    // n/d values reach ~2.7e8, so the products fit comfortably in 128 bits.
    __int128 lhs = static_cast<__int128>(n1) * d0, rhs = static_cast<__int128>(n0) * d1;
    if (lhs != rhs) {
      if (lhs < rhs) best = i;
      continue;
    }
    const Bucket& a = buckets[i];
    const Bucket& b = buckets[best];
    int64_t area_a = static_cast<int64_t>(a.width) * a.height;
    int64_t area_b = static_cast<int64_t>(b.width) * b.height;
    if (area_a > area_b || (area_a == area_b && a.width < b.width)) best = i;
  }
  return best;
}

Bucket CoverSize(int width, int height, const Bucket& bucket) {
  int64_t w = width, h = height, bw = bucket.width, bh = bucket.height;
  if (bw * h >= bh * w) {
    // Width-bound: scale = bw / w.
    return {bucket.width, static_cast<int>(std::max<int64_t>(bh, (h * bw + w / 2) / w))};
  }
  return {static_cast<int>(std::max<int64_t>(bw, (w * bh + h / 2) / h)), bucket.height};
}

Image ResizeToBucket(const Image& image, const Bucket& bucket) {
  Bucket cover = CoverSize(image.width, image.height, bucket);
  Image scaled = ResizeImage(image, cover.width, cover.height);
  return CenterCrop(scaled, bucket.width, bucket.height);
}

}  // namespace baton

#include "encoder_worker/bucket.h"

#include <gtest/gtest.h>

#include <cmath>

namespace baton {
namespace {

std::vector<Bucket> Buckets(int64_t area) {
  BucketSpec spec;
  spec.target_area = area;
  auto b = MakeBuckets(spec);
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

TEST(BucketTest, ListHasSquareAndRespectsTheSpec) {
  for (int64_t area : {512ll * 512, 1024ll * 1024, 1000ll * 1000, 768ll * 768}) {
    BucketSpec spec;
    spec.target_area = area;
    std::vector<Bucket> buckets = Buckets(area);
    ASSERT_FALSE(buckets.empty());
    // Largest multiple-of-16 square within the area: 512, 1024, 992 (992^2 <= 1e6 < 1008^2), 768.
    int s = static_cast<int>(std::sqrt(static_cast<double>(area))) / 16 * 16;
    EXPECT_NE(std::find(buckets.begin(), buckets.end(), Bucket{s, s}), buckets.end()) << area;
    for (const Bucket& b : buckets) {
      EXPECT_EQ(b.width % 16, 0) << b.ToString();
      EXPECT_EQ(b.height % 16, 0) << b.ToString();
      EXPECT_LE(static_cast<int64_t>(b.width) * b.height, area) << b.ToString();
      EXPECT_GE(std::min(b.width, b.height), spec.min_side) << b.ToString();
      EXPECT_LE(std::max(b.width, b.height), spec.max_side) << b.ToString();
      EXPECT_LE(static_cast<double>(std::max(b.width, b.height)) / std::min(b.width, b.height), 4.0);
    }
    // Sorted by aspect ratio, no duplicates, and closed under transposition.
    for (size_t i = 1; i < buckets.size(); ++i) {
      EXPECT_LE(static_cast<int64_t>(buckets[i - 1].width) * buckets[i].height,
                static_cast<int64_t>(buckets[i].width) * buckets[i - 1].height);
      EXPECT_FALSE(buckets[i - 1] == buckets[i]);
    }
    for (const Bucket& b : buckets) {
      EXPECT_NE(std::find(buckets.begin(), buckets.end(), Bucket{b.height, b.width}), buckets.end());
    }
  }
}

TEST(BucketTest, ListIsDeterministic) {
  EXPECT_EQ(Buckets(1024 * 1024), Buckets(1024 * 1024));
  EXPECT_NE(Buckets(1024 * 1024), Buckets(512 * 512));
}

TEST(BucketTest, SixteenByNinePicksItsNeighbour) {
  std::vector<Bucket> buckets = Buckets(1024 * 1024);
  // 1360 x floor(1048576/1360/16)*16 = 1360x768 has aspect 1.7708, the closest to 1.7778 (the
  // neighbours 1344x768 = 1.75 and 1376x752 = 1.8298 are further in log space).
  Bucket landscape = buckets[AssignBucket(buckets, 1920, 1080)];
  EXPECT_EQ(landscape, (Bucket{1360, 768})) << landscape.ToString();
  Bucket portrait = buckets[AssignBucket(buckets, 1080, 1920)];
  EXPECT_EQ(portrait, (Bucket{768, 1360})) << portrait.ToString();
  // Independent check in floating point: nothing is closer.
  double target = std::log(1920.0 / 1080.0);
  double got = std::abs(std::log(1360.0 / 768.0) - target);
  for (const Bucket& b : buckets) {
    EXPECT_GE(std::abs(std::log(static_cast<double>(b.width) / b.height) - target), got - 1e-12);
  }
  // A square image gets the square bucket; an extreme panorama the widest bucket.
  EXPECT_EQ(buckets[AssignBucket(buckets, 3000, 3000)], (Bucket{1024, 1024}));
  Bucket widest = buckets.back();
  EXPECT_EQ(buckets[AssignBucket(buckets, 10000, 100)], widest);
}

TEST(BucketTest, TiesBreakByAreaThenWidthWhateverTheOrder) {
  std::vector<Bucket> a = {{496, 528}, {528, 496}};
  std::vector<Bucket> b = {{528, 496}, {496, 528}};
  // A square image is equally far from both (log(528/496) either way): smaller width wins.
  EXPECT_EQ(a[AssignBucket(a, 640, 640)], (Bucket{496, 528}));
  EXPECT_EQ(b[AssignBucket(b, 640, 640)], (Bucket{496, 528}));
  std::vector<Bucket> c = {{256, 256}, {512, 512}};
  EXPECT_EQ(c[AssignBucket(c, 100, 100)], (Bucket{512, 512}));
}

TEST(BucketTest, CoverSizeKeepsAspectAndCovers) {
  // 1920x1080 into 1360x768: height-bound (1360*1080 < 768*1920), width 1920*768/1080 = 1365.3.
  Bucket c = CoverSize(1920, 1080, {1360, 768});
  EXPECT_EQ(c, (Bucket{1365, 768}));
  EXPECT_EQ(CoverSize(100, 400, {256, 512}), (Bucket{256, 1024}));
  EXPECT_EQ(CoverSize(512, 512, {512, 512}), (Bucket{512, 512}));
}

TEST(BucketTest, ResizeToBucketCropsTheCenter) {
  // 200x100, left half black, right half white, into 64x64: scaled to 128x64, the crop keeps
  // columns 32..95, so the left half of the result is black and the right half white.
  Image img(200, 100);
  for (int y = 0; y < 100; ++y) {
    for (int x = 100; x < 200; ++x) img.at(x, y)[0] = img.at(x, y)[1] = img.at(x, y)[2] = 255;
  }
  Image out = ResizeToBucket(img, {64, 64});
  ASSERT_EQ(out.width, 64);
  ASSERT_EQ(out.height, 64);
  EXPECT_EQ(out.at(5, 10)[0], 0);
  EXPECT_EQ(out.at(30, 40)[1], 0);
  EXPECT_EQ(out.at(34, 10)[0], 255);
  EXPECT_EQ(out.at(63, 63)[2], 255);
}

TEST(BucketTest, RejectsBadSpecs) {
  BucketSpec bad;
  bad.step = 0;
  EXPECT_FALSE(MakeBuckets(bad).ok());
  BucketSpec tiny;
  tiny.target_area = 64 * 64;  // below min_side^2: no bucket fits
  EXPECT_FALSE(MakeBuckets(tiny).ok());
  BucketSpec small;
  small.target_area = 64 * 64;
  small.min_side = 16;
  small.max_side = 256;
  auto b = MakeBuckets(small);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(std::find(b->begin(), b->end(), Bucket{64, 64}), b->end());
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(ResolutionsTest, OneOrSeveralEachOnceWithinBounds) {
  EXPECT_EQ(*ParseResolutions("1024"), (std::vector<int64_t>{1024}));
  EXPECT_EQ(*ParseResolutions("512, 768,1024"), (std::vector<int64_t>{512, 768, 1024}));
  for (const char* bad : {"", "512,", "12", "9000", "512,512", "big"}) {
    auto r = ParseResolutions(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--resolution"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace baton

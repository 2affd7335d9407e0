// The cache's video layout (Wan records: latents [C, F, H, W] with a "frames" count) beside the image layout.
#include "core/data/cache.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

TEST(CacheVideoTest, SyntheticVideoRecordsRoundTrip) {
  const std::string dir = test_util::MakeTempDir("cache_video");
  ASSERT_TRUE(WriteSyntheticCache(dir, 4, 8, 3, {{2, 3}}, 5, 7, 4, /*frames=*/2).ok());
  auto reader = CacheReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->size(), 3u);
  const CacheRecordInfo& info = (*reader)->index().records[0];
  EXPECT_EQ(info.frames, 2);
  EXPECT_EQ(info.BucketKey(), "2x2x3/5");
  auto s = (*reader)->Load(1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->latents.sizes(), (std::vector<int64_t>{4, 2, 2, 3}));
  EXPECT_EQ(s->prompt_embeds.sizes(), (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(s->frames, 2);
  // A record written by hand reads back the same values.
  CacheSample video{at::randn({4, 3, 2, 2}), at::randn({6, 8}), 2, 2, 3};
  auto written = WriteCacheRecord(dir, "clip", "h", "enc", video, "32x16x9");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->frames, 3);
  CacheRecordInfo read_info;
  auto back = ReadCacheRecord(dir, written->file, CacheLayout{4, 8}, &read_info, nullptr);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(at::equal(back->latents, video.latents));
  EXPECT_EQ(read_info.frames, 3);
  EXPECT_EQ(read_info.BucketKey(), "3x2x2/6");
}

TEST(CacheVideoTest, ImageIndexHasNoFramesAndKeepsItsKey) {
  const std::string dir = test_util::MakeTempDir("cache_image");
  ASSERT_TRUE(WriteSyntheticCache(dir, 4, 8, 2, {{2, 3}}, 5, 7).ok());
  auto text = ReadFile(JoinPath(dir, "index.json"));
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(nlohmann::json::parse(*text)["records"][0].contains("frames"));
  auto reader = CacheReader::Open(dir);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->index().records[0].frames, 0);
  EXPECT_EQ((*reader)->index().records[0].BucketKey(), "2x3/5");
  auto s = (*reader)->Load(0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->latents.sizes(), (std::vector<int64_t>{6, 4}));
}

TEST(CacheVideoTest, WrongVideoShapeIsRefused) {
  const std::string dir = test_util::MakeTempDir("cache_video_bad");
  // Frames say 3 but the latents hold 2; and an image-layout tensor under a video record.
  CacheSample bad{at::randn({4, 2, 2, 2}), at::randn({6, 8}), 2, 2, 3};
  auto written = WriteCacheRecord(dir, "bad", "h", "enc", bad);
  ASSERT_TRUE(written.ok());
  auto read = ReadCacheRecord(dir, written->file, CacheLayout{4, 8}, nullptr, nullptr);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("is not [4, 3, 2, 2]"), std::string::npos) << read.status();
  CacheSample flat{at::randn({4, 4}), at::randn({6, 8}), 2, 2, 1};
  auto written_flat = WriteCacheRecord(dir, "flat", "h", "enc", flat);
  ASSERT_TRUE(written_flat.ok());
  EXPECT_FALSE(ReadCacheRecord(dir, written_flat->file, CacheLayout{4, 8}, nullptr, nullptr).ok());
  // Wrong channel count for the index.
  CacheSample good{at::randn({4, 1, 2, 2}), at::randn({6, 8}), 2, 2, 1};
  auto written_good = WriteCacheRecord(dir, "good", "h", "enc", good);
  ASSERT_TRUE(written_good.ok());
  EXPECT_TRUE(ReadCacheRecord(dir, written_good->file, CacheLayout{4, 8}, nullptr, nullptr).ok());
  EXPECT_FALSE(ReadCacheRecord(dir, written_good->file, CacheLayout{16, 8}, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace baton

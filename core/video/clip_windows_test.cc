// How a video becomes clips (clip_windows.h): each extraction mode's starts by hand from musubi-tuner's rules, frame
// buckets, and a still as a one-frame clip.
#include "core/video/clip_windows.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

using Starts = std::vector<int64_t>;

TEST(ClipWindowsTest, EachModeStartsItsClipsWhereMusubiTunerDoes) {
  // 20 sampled frames, clips of 5.
  EXPECT_EQ(ClipStarts({"head", 0, 1}, 20, 5), (Starts{0}));
  EXPECT_EQ(ClipStarts({"chunk", 0, 1}, 20, 5), (Starts{0, 5, 10, 15}));
  EXPECT_EQ(ClipStarts({"chunk", 0, 1}, 19, 5), (Starts{0, 5, 10}));  // the tail of 4 is no clip
  EXPECT_EQ(ClipStarts({"chunk", 2, 1}, 20, 5), (Starts{0, 5}));
  EXPECT_EQ(ClipStarts({"slide", 0, 3}, 20, 5), (Starts{0, 3, 6, 9, 12, 15}));
  EXPECT_EQ(ClipStarts({"slide", 4, 3}, 20, 5), (Starts{0, 3, 6, 9}));
  // uniform: numpy.linspace(0, 20 - 5, n, dtype=int): 0, 7.5 → 7, 15.
  EXPECT_EQ(ClipStarts({"uniform", 3, 1}, 20, 5), (Starts{0, 7, 15}));
  EXPECT_EQ(ClipStarts({"uniform", 4, 1}, 20, 5), (Starts{0, 5, 10, 15}));
  EXPECT_EQ(ClipStarts({"uniform", 1, 1}, 20, 5), (Starts{0}));    // one clip: head
  EXPECT_EQ(ClipStarts({"uniform", 5, 1}, 6, 5), (Starts{0, 1}));  // 0, 0.25, 0.5, 0.75, 1 → repeats dropped
  EXPECT_TRUE(ClipStarts({"chunk", 0, 1}, 4, 5).empty());
}

TEST(ClipWindowsTest, BadExtractionsAndFrameBucketsNameTheirFlag) {
  EXPECT_TRUE(CheckClipExtraction({"head", 0, 1}).ok());
  const std::pair<ClipExtraction, const char*> bad[] = {{{"middle", 0, 1}, "--frame_extraction middle"},
                                                        {{"chunk", -1, 1}, "--clips_per_video -1"},
                                                        {{"uniform", 0, 1}, "uniform needs --clips_per_video"},
                                                        {{"slide", 0, 0}, "--slide_stride 0"}};
  for (const auto& [e, want] : bad) {
    absl::Status s = CheckClipExtraction(e);
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  }
  EXPECT_EQ(*ParseFrameBuckets("33, 1,81"), (Starts{1, 33, 81}));
  EXPECT_TRUE(ParseFrameBuckets("")->empty());
  for (const char* text : {"2", "1,1", "0", "1025", "x"}) {
    auto f = ParseFrameBuckets(text);
    ASSERT_FALSE(f.ok()) << text;
    EXPECT_NE(f.status().message().find("--frames"), std::string::npos) << f.status();
  }
}

TEST(ClipWindowsTest, AClipTakesTheLongestFrameBucketItFills) {
  VideoBucketSpec spec;
  spec.target_area = 64 * 64;
  spec.frame_buckets = {1, 5, 9};
  EXPECT_EQ(ChooseVideoBucket(spec, 8, 64, 64)->frames, 5);
  EXPECT_EQ(ChooseVideoBucket(spec, 30, 64, 64)->frames, 9);
  EXPECT_EQ(ChooseVideoBucket(spec, 4, 64, 64)->frames, 1);
  spec.stride = 2;
  EXPECT_EQ(ChooseVideoBucket(spec, 17, 64, 64)->frames, 9);  // 9 sampled
  spec.frame_buckets = {5, 9};
  auto short_clip = ChooseVideoBucket(spec, 7, 64, 64);  // 4 sampled
  ASSERT_FALSE(short_clip.ok());
  EXPECT_NE(short_clip.status().message().find("the shortest frame bucket is 5"), std::string::npos)
      << short_clip.status();
}

TEST(ClipWindowsTest, AStillIsAOneFrameClipOfTheArea) {
  Image image(96, 64);
  VideoBucketSpec spec;
  spec.target_area = 48 * 32;
  spec.frame_buckets = {5, 9};  // stills take one frame whatever the clips' buckets
  auto pixels = StillToPixels(image, spec);
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  EXPECT_EQ(pixels->sizes(), (std::vector<int64_t>{1, 3, 1, 32, 48}));
}

}  // namespace
}  // namespace baton

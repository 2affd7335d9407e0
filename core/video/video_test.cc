#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "core/video/clip_windows.h"
#include "core/video/video_bucket.h"
#include "core/video/video_io.h"

namespace baton {
namespace {

using test_util::MakeTempDir;

// Frame i: a horizontal colour ramp with a white 14×16 square moving 3 px per frame (smooth content that
// MPEG-4 keeps well, plus an edge that moves so frame order matters).
Image MovingSquare(int i, int w, int h) {
  Image img(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.at(x, y);
      const bool square = x >= 2 + 3 * i && x < 16 + 3 * i && y >= 10 && y < 26;
      p[0] = square ? 250 : static_cast<uint8_t>(40 + 3 * x);
      p[1] = square ? 250 : static_cast<uint8_t>(60 + 2 * y);
      p[2] = square ? 250 : 120;
    }
  }
  return img;
}

std::vector<Image> MovingClip(int frames, int w, int h) {
  std::vector<Image> out;
  for (int i = 0; i < frames; ++i) out.push_back(MovingSquare(i, w, h));
  return out;
}

double MeanAbsDiff(const Image& a, const Image& b) {
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(int{a.pixels[i]} - int{b.pixels[i]});
  return sum / static_cast<double>(a.pixels.size());
}

TEST(VideoBucketTest, FourKPlusOneFrameCounts) {
  EXPECT_EQ(LargestFourKPlusOne(0), 0);
  EXPECT_EQ(LargestFourKPlusOne(1), 1);
  EXPECT_EQ(LargestFourKPlusOne(4), 1);
  EXPECT_EQ(LargestFourKPlusOne(5), 5);
  EXPECT_EQ(LargestFourKPlusOne(20), 17);
  EXPECT_EQ(LargestFourKPlusOne(81), 81);
  VideoBucketSpec spec;
  EXPECT_EQ(ChooseVideoBucket(spec, 17, 64, 64)->frames, 17);
  EXPECT_EQ(ChooseVideoBucket(spec, 20, 64, 64)->frames, 17);
  EXPECT_EQ(ChooseVideoBucket(spec, 3, 64, 64)->frames, 1);     // a 3-frame clip keeps frame 0 only
  EXPECT_EQ(ChooseVideoBucket(spec, 200, 64, 64)->frames, 81);  // capped at max_frames
  spec.stride = 2;
  EXPECT_EQ(ChooseVideoBucket(spec, 17, 64, 64)->frames, 9);  // frames 0, 2, ..., 16
  EXPECT_EQ(ChooseVideoBucket(spec, 16, 64, 64)->frames, 5);  // 8 sampled → 5
}

TEST(VideoBucketTest, SizesAreMultiplesOfSixteenNearTheAreaWithoutUpscaling) {
  VideoBucketSpec spec;  // 480·832 pixels
  auto hd = ChooseVideoBucket(spec, 81, 1920, 1080);
  ASSERT_TRUE(hd.ok()) << hd.status();
  EXPECT_EQ(hd->width, 832);   // 1920·sqrt(399360 / 2073600) = 842.6 → 832
  EXPECT_EQ(hd->height, 464);  // 1080·0.4389 = 474.0 → 464
  auto small = ChooseVideoBucket(spec, 17, 70, 50);
  EXPECT_EQ(small->width, 64);
  EXPECT_EQ(small->height, 48);
  auto tiny = ChooseVideoBucket(spec, 17, 10, 10);
  EXPECT_EQ(tiny->width, 16);  // at least one step
}

TEST(VideoBucketTest, TooShortAndBadSpecsAreErrors) {
  VideoBucketSpec spec;
  spec.min_frames = 9;
  auto s = ChooseVideoBucket(spec, 5, 64, 64);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "too short")) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "5 frames")) << s.status();
  EXPECT_FALSE(ChooseVideoBucket(VideoBucketSpec{}, 0, 64, 64).ok());
  VideoBucketSpec bad;
  bad.stride = 0;
  EXPECT_FALSE(ChooseVideoBucket(bad, 17, 64, 64).ok());
}

class VideoRoundTripTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VideoRoundTripTest, WrittenClipReadsBackWithItsFramesInOrder) {
  const auto& [ext, codec] = GetParam();
  const std::string path = JoinPath(MakeTempDir("video_rt"), "clip" + ext);
  const auto frames = MovingClip(17, 64, 48);
  ASSERT_TRUE(WriteVideoFile(path, frames, 16, codec).ok());
  auto clip = ReadVideoFile(path);
  ASSERT_TRUE(clip.ok()) << clip.status();
  ASSERT_EQ(clip->frames.size(), 17u);
  EXPECT_NEAR(clip->fps, 16.0, 1e-6);
  for (int i = 0; i < 17; ++i) {
    ASSERT_EQ(clip->frames[i].width, 64);
    ASSERT_EQ(clip->frames[i].height, 48);
    // Lossy 4:2:0 coding: close to its own frame, clearly further from its neighbour (the square moved).
    const double own = MeanAbsDiff(clip->frames[i], frames[i]);
    EXPECT_LT(own, 4.0) << "frame " << i;
    if (i > 0) {
      EXPECT_GT(MeanAbsDiff(clip->frames[i], frames[i - 1]), own + 2.0) << "frame " << i;
    }
  }
  auto head = ReadVideoFile(path, 5);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->frames.size(), 5u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, VideoRoundTripTest,
                         ::testing::Values(std::make_pair(std::string(".avi"), std::string("mpeg4")),
                                           std::make_pair(std::string(".mp4"), std::string("mpeg4")),
                                           std::make_pair(std::string(".mp4"), std::string("h264")),
                                           std::make_pair(std::string(".avi"), std::string("mjpeg"))));

// Sample videos are outputs of a seeded run: the same frames must give the same bytes, whatever the heap held
// before. Every allocation here comes from the heap (no fresh zeroed pages), filled with a different byte each time.
TEST(VideoWriterTest, TheSameFramesGiveTheSameBytesOnADirtyHeap) {
  const std::string dir = MakeTempDir("video_same_bytes");
  const auto frames = MovingClip(9, 64, 64);
  std::set<std::string> encodings;
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 30), 1);
  for (int perturb : {0x11, 0xa5, 0x3c, 0xf0}) {
    ASSERT_EQ(mallopt(M_PERTURB, perturb), 1);
    const std::string path = JoinPath(dir, absl::StrCat(perturb, ".mp4"));
    ASSERT_TRUE(WriteVideoFile(path, frames, 16, "h264").ok());
    auto bytes = ReadFile(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    encodings.insert(*bytes);
  }
  mallopt(M_PERTURB, 0);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // large blocks mapped fresh again, as TuneMallocForTensors has them
  EXPECT_EQ(encodings.size(), 1u) << "the same frames were encoded to " << encodings.size() << " different files";
}

TEST(VideoIoTest, FrameFolderIsReadInSortedOrder) {
  const std::string dir = MakeTempDir("video_frames");
  const auto frames = MovingClip(3, 32, 32);
  // Written out of order, named so byte order is frame order.
  ASSERT_TRUE(WritePng(JoinPath(dir, "f002.png"), frames[2]).ok());
  ASSERT_TRUE(WritePng(JoinPath(dir, "f000.png"), frames[0]).ok());
  ASSERT_TRUE(WritePng(JoinPath(dir, "f001.png"), frames[1]).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "notes.txt"), "ignored").ok());
  auto clip = ReadClip(dir);
  ASSERT_TRUE(clip.ok()) << clip.status();
  ASSERT_EQ(clip->frames.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(clip->frames[i].pixels, frames[i].pixels) << i;  // PNG is lossless
}

// Unpadded exports (frame_1.png ... frame_10.png) are read in frame order, not byte order; macOS's "._" forks and
// other dotfiles are not frames.
TEST(VideoIoTest, FrameFolderOrdersNumbersByValueAndSkipsDotfiles) {
  EXPECT_TRUE(FrameNameLess("frame_2.png", "frame_10.png"));
  EXPECT_FALSE(FrameNameLess("frame_10.png", "frame_2.png"));
  EXPECT_TRUE(FrameNameLess("f002.png", "f010.png"));  // padded names keep their byte order
  EXPECT_TRUE(FrameNameLess("a9.png", "b1.png"));
  EXPECT_TRUE(FrameNameLess("2.png", "02.png") != FrameNameLess("02.png", "2.png"));  // a total order
  const std::string dir = MakeTempDir("video_unpadded");
  const auto frames = MovingClip(11, 32, 32);
  for (int i = 0; i < 11; ++i) ASSERT_TRUE(WritePng(JoinPath(dir, absl::StrCat(i + 1, ".png")), frames[i]).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "._1.png"), "a resource fork").ok());
  auto names = ListFrameFiles(dir);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->front(), "1.png");
  EXPECT_EQ(names->at(9), "10.png");
  EXPECT_EQ(names->size(), 11u);
  auto clip = ReadClip(dir);
  ASSERT_TRUE(clip.ok()) << clip.status();
  ASSERT_EQ(clip->frames.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(clip->frames[i].pixels, frames[i].pixels) << i;
  auto head = ReadClip(dir, 3);  // only the frames asked for are decoded
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->frames.size(), 3u);
}

TEST(VideoIoTest, UnreadableInputsAreClearErrors) {
  const std::string dir = MakeTempDir("video_errors");
  auto missing = ReadVideoFile(JoinPath(dir, "nope.mp4"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string junk = JoinPath(dir, "junk.mp4");
  ASSERT_TRUE(WriteFileAtomic(junk, std::string(4096, 'x')).ok());
  auto bad = ReadVideoFile(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), junk)) << bad.status();
  const std::string empty = JoinPath(dir, "empty");
  ASSERT_TRUE(MakeDirs(empty).ok());
  EXPECT_FALSE(ReadClip(empty).ok());
  const std::string mixed = JoinPath(dir, "mixed");
  ASSERT_TRUE(MakeDirs(mixed).ok());
  ASSERT_TRUE(WritePng(JoinPath(mixed, "a.png"), Image(32, 32)).ok());
  ASSERT_TRUE(WritePng(JoinPath(mixed, "b.png"), Image(16, 32)).ok());
  auto m = ReadClip(mixed);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "b.png")) << m.status();
}

// A phone's portrait clip is stored sideways with a display matrix: the frames come back turned as a player shows them
// (ffmpeg's autorotate): 90 degrees clockwise for a phone's rotate=90, counterclockwise for 270, upside down for 180;
// the block at the stored frame's top-left corner lands where the turn puts it.
TEST(VideoIoTest, ADisplayMatrixTurnsTheFramesAsPlayersDo) {
  const std::string dir = MakeTempDir("video_rotation");
  Image frame(64, 32);  // a white block at the stored frame's top-left corner
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 16; ++x) std::fill(frame.at(x, y), frame.at(x, y) + 3, 255);
  }
  struct Case {
    int display_rotation, width, height, x, y;  // the block's centre after the turn
  };
  for (const Case& c :
       {Case{0, 64, 32, 8, 4}, Case{90, 32, 64, 28, 8}, Case{270, 32, 64, 4, 56}, Case{180, 64, 32, 56, 28}}) {
    const std::string path = JoinPath(dir, absl::StrCat("turned", c.display_rotation, ".mp4"));
    ASSERT_TRUE(WriteVideoFile(path, {frame, frame}, 16, "mpeg4", c.display_rotation).ok());
    EXPECT_EQ(VideoDisplayRotation(path), c.display_rotation);
    auto clip = ReadClip(path);
    ASSERT_TRUE(clip.ok()) << clip.status();
    const Image& got = clip->frames.at(0);
    EXPECT_EQ(got.width, c.width) << c.display_rotation;
    EXPECT_EQ(got.height, c.height) << c.display_rotation;
    EXPECT_GT(got.at(c.x, c.y)[0], 200) << c.display_rotation;  // the block, where a player shows it
    EXPECT_LT(got.at(got.width - 1 - c.x, got.height - 1 - c.y)[0], 60) << c.display_rotation;
  }
}

// The clips are cut from frames read one at a time, every stride-th kept at the bucket's size: each mode's pixels are
// bitwise those of the whole clip read at once and bucketed from its full-size frames (BucketClipToPixels).
TEST(VideoBucketTest, StreamedWindowsEqualTheWholeClipBucketed) {
  const std::string path = JoinPath(MakeTempDir("video_windows"), "clip.avi");
  ASSERT_TRUE(WriteVideoFile(path, MovingClip(23, 70, 50), 16).ok());
  VideoBucketSpec spec;
  spec.stride = 2;
  spec.max_frames = 5;
  auto whole = ReadClip(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto bucket = ChooseVideoBucket(spec, static_cast<int64_t>(whole->frames.size()), 70, 50);
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  for (const ClipExtraction& e : {ClipExtraction{"head", 0, 1}, ClipExtraction{"chunk", 0, 1},
                                  ClipExtraction{"slide", 0, 3}, ClipExtraction{"uniform", 3, 1}}) {
    auto windows = LoadClipWindows(path, spec, e);
    ASSERT_TRUE(windows.ok()) << e.mode << ": " << windows.status();
    const std::vector<int64_t> starts = ClipStarts(e, 12, bucket->frames);  // 23 frames at stride 2: 12 sampled
    ASSERT_EQ(windows->size(), starts.size()) << e.mode;
    for (size_t k = 0; k < starts.size(); ++k) {
      EXPECT_TRUE(at::equal((*windows)[k], BucketClipToPixels(*whole, *bucket, spec.stride, starts[k])))
          << e.mode << " clip " << k;
    }
  }
}

TEST(VideoBucketTest, LoadClipPixelsSamplesBucketsAndScales) {
  const std::string path = JoinPath(MakeTempDir("video_pixels"), "clip.avi");
  ASSERT_TRUE(WriteVideoFile(path, MovingClip(17, 70, 50), 16).ok());
  VideoBucketSpec spec;
  spec.stride = 2;
  auto pixels = LoadClipPixels(path, spec);
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  EXPECT_EQ(pixels->sizes(), (std::vector<int64_t>{1, 3, 9, 48, 64}));
  EXPECT_LE(pixels->max().item<float>(), 1.0f);
  EXPECT_GE(pixels->min().item<float>(), -1.0f);
  spec.stride = 1;
  spec.min_frames = 33;
  auto short_clip = LoadClipPixels(path, spec);
  ASSERT_FALSE(short_clip.ok());
  EXPECT_TRUE(absl::StrContains(short_clip.status().message(), path)) << short_clip.status();
}

}  // namespace
}  // namespace baton

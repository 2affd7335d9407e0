#include "encoder_worker/video_dataset.h"

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "core/image/image.h"
#include "core/util/files.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// The scan reads clips as bytes (decoding is the encode step's), so a few bytes stand in for a video here.
class VideoDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (std::filesystem::temp_directory_path() /
             absl::StrCat("baton_video_dataset_test_", ::getpid(), "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    ASSERT_TRUE(RemoveAll(root_).ok());
    ASSERT_TRUE(MakeDirs(root_).ok());
    root_ = *RealPath(root_);
    dir_ = JoinPath(root_, "clips");
    outside_ = JoinPath(root_, "library");
    ASSERT_TRUE(MakeDirs(dir_).ok());
    ASSERT_TRUE(MakeDirs(JoinPath(outside_, "frames")).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(outside_, "walk.mp4"), "not really a video").ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(outside_, "passwd"), "root:x:0:0").ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(outside_, "frame.png"), "a frame").ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(outside_, "frames/0.png"), "a frame").ok());
  }
  void TearDown() override { ASSERT_TRUE(RemoveAll(root_).ok()); }

  void Write(const std::string& name, const std::string& data) {
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, name), data).ok()) << name;
  }
  void Link(const std::string& target, const std::string& name) {
    ASSERT_EQ(::symlink(target.c_str(), JoinPath(dir_, name).c_str()), 0) << name;
  }
  // Every way a clip can reach out of the dataset -- the video, its caption, its conditioning image, a frame folder,
  // a frame in one -- plus a dangling video link, an oversized caption and links that stay inside.
  void WriteLinkedFolder() {
    Link(JoinPath(outside_, "walk.mp4"), "walk.mp4");
    Write("walk.txt", "a walk");
    Write("run.mp4", "video bytes");
    Link(JoinPath(outside_, "passwd"), "run.txt");
    Write("sit.mp4", "video bytes");
    Write("sit.txt", "sitting");
    Link(JoinPath(outside_, "frame.png"), "sit.png");  // the conditioning first frame
    Link(JoinPath(outside_, "frames"), "hop");
    Write("hop.txt", "a hop");
    ASSERT_TRUE(MakeDirs(JoinPath(dir_, "jump")).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, "jump/0.png"), "frame 0").ok());
    ASSERT_EQ(::symlink(JoinPath(outside_, "frame.png").c_str(), JoinPath(dir_, "jump/1.png").c_str()), 0);
    Write("jump.txt", "a jump");
    Link("nothing.mp4", "gone.mp4");
    Write("gone.txt", "a clip that is not there");
    Write("long.mp4", "video bytes");
    Write("long.txt", std::string(kMaxCaptionBytes + 1, 'a'));
    // A subfolder of a video dataset is a frame-folder clip; a dotfolder is skipped, so the store is one.
    ASSERT_TRUE(MakeDirs(JoinPath(dir_, ".store")).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, ".store/ok.mp4"), "video bytes").ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, ".store/ok.txt"), "a clip kept in a subfolder").ok());
    Link(".store/ok.mp4", "ok.mp4");
    Link(".store/ok.txt", "ok.txt");
  }
  std::map<std::string, absl::Status> ErrorsByName(const VideoDataset& ds) {
    std::map<std::string, absl::Status> m;
    for (const FileError& e : ds.errors) m[std::filesystem::path(e.path).filename().string()] = e.status;
    return m;
  }

  std::string root_, dir_, outside_;
};

// Issue 35 for video datasets: each clip whose video, caption, conditioning image, frame folder or frames resolve
// outside the dataset folder is refused by name, as are a dangling link and a caption over kMaxCaptionBytes; a clip
// linked within the dataset is read.
TEST_F(VideoDatasetTest, LinksOutOfTheDatasetAndLongCaptionsAreRefusedByName) {
  WriteLinkedFolder();
  auto ds = ScanVideoDataset(dir_, VideoBucketSpec{});
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->samples.size(), 1u);
  EXPECT_EQ(ds->samples[0].name, "ok.mp4");
  EXPECT_EQ(ds->samples[0].caption, "a clip kept in a subfolder");
  auto errors = ErrorsByName(*ds);
  EXPECT_EQ(errors.size(), 7u) << ::testing::PrintToString(errors);
  auto expect_error = [&](const std::string& name, absl::StatusCode code, const std::string& text) {
    ASSERT_TRUE(errors.count(name)) << name;
    EXPECT_EQ(errors[name].code(), code) << errors[name];
    EXPECT_THAT(std::string(errors[name].message()), HasSubstr(text));
  };
  const std::string refused = absl::StrCat(", outside the dataset folder ", dir_);
  expect_error("walk.mp4", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "walk.mp4"), " resolves to ", JoinPath(outside_, "walk.mp4"), refused));
  expect_error("run.mp4", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "run.txt"), " resolves to ", JoinPath(outside_, "passwd"), refused));
  expect_error("sit.mp4", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "sit.png"), " resolves to ", JoinPath(outside_, "frame.png"), refused));
  expect_error("hop", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "hop"), " resolves to ", JoinPath(outside_, "frames"), refused));
  expect_error("jump", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "jump/1.png"), " resolves to ", JoinPath(outside_, "frame.png"), refused));
  expect_error("gone.mp4", absl::StatusCode::kNotFound, " is a dangling link (to nothing.mp4)");
  expect_error("long.mp4", absl::StatusCode::kInvalidArgument,
               absl::StrCat(JoinPath(dir_, "long.txt"), ": caption is ", kMaxCaptionBytes + 1, " bytes"));
}

// With the library opened by the operator, the same clips are read (and what the encode step checks again agrees);
// the dangling link and the long caption are still refused.
TEST_F(VideoDatasetTest, LinksIntoAFolderTheOperatorOpenedAreFollowed) {
  WriteLinkedFolder();
  ScanOptions options;
  options.follow_links_into = {outside_};
  auto ds = ScanVideoDataset(dir_, VideoBucketSpec{}, options);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::map<std::string, std::string> captions;
  for (const VideoSample& s : ds->samples) captions[s.name] = s.caption;
  EXPECT_EQ(captions, (std::map<std::string, std::string>{{"hop", "a hop"},
                                                          {"jump", "a jump"},
                                                          {"ok.mp4", "a clip kept in a subfolder"},
                                                          {"run.mp4", "root:x:0:0"},
                                                          {"sit.mp4", "sitting"},
                                                          {"walk.mp4", "a walk"}}));
  EXPECT_EQ(ds->errors.size(), 2u);
  auto opened = DatasetFence::Make(dir_, {outside_});
  auto closed = DatasetFence::Make(dir_);
  ASSERT_TRUE(opened.ok() && closed.ok());
  for (const VideoSample& s : ds->samples) {
    EXPECT_TRUE(CheckVideoSampleInside(*opened, s).ok()) << s.name;
    // A link swapped in between the scan and the encode is caught by the encode's own check of what it decodes (the
    // caption was read, and judged, by the scan).
    EXPECT_EQ(CheckVideoSampleInside(*closed, s).ok(), s.name == "ok.mp4" || s.name == "run.mp4") << s.name;
  }
}

// A clip's first-frame image and mask are found in any case of their extension, as the scan classifies them; two
// first frames are refused by name; a still's mask of another size is refused; a first frame whose clip is another
// worker's share is neither a still nor encoded here.
TEST_F(VideoDatasetTest, SidecarsInAnyCaseAndFirstFramesFollowTheirClipsShare) {
  ASSERT_TRUE(WritePng(JoinPath(dir_, "walk.PNG"), Image(32, 16)).ok());
  Write("walk.mp4", "video bytes");
  Write("walk.txt", "a walk");
  Image white(32, 16);
  std::fill(white.pixels.begin(), white.pixels.end(), 255);
  ASSERT_TRUE(WritePng(JoinPath(dir_, "walk.Mask.png"), white).ok());
  Write("two.mp4", "video bytes");
  Write("two.txt", "two first frames");
  ASSERT_TRUE(WritePng(JoinPath(dir_, "two.png"), Image(32, 16)).ok());
  ASSERT_TRUE(WritePng(JoinPath(dir_, "two.jpg.png"), Image(32, 16)).ok());  // a still of its own (stem "two.jpg")
  ASSERT_TRUE(WritePng(JoinPath(dir_, "two.JPEG"), Image(32, 16)).ok());
  ASSERT_TRUE(WritePng(JoinPath(dir_, "still.png"), Image(32, 16)).ok());
  Write("still.txt", "a still");
  ASSERT_TRUE(WritePng(JoinPath(dir_, "still.mask.png"), Image(64, 16)).ok());
  Write("two.jpg.txt", "a still named like a first frame");
  auto ds = ScanVideoDataset(dir_, VideoBucketSpec{});
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::map<std::string, const VideoSample*> samples;
  for (const VideoSample& s : ds->samples) samples[s.name] = &s;
  ASSERT_TRUE(samples.count("walk.mp4"));
  EXPECT_EQ(samples["walk.mp4"]->image_path, JoinPath(dir_, "walk.PNG"));
  EXPECT_EQ(samples["walk.mp4"]->mask_path, JoinPath(dir_, "walk.Mask.png"));
  EXPECT_TRUE(samples.count("two.jpg.png"));
  auto errors = ErrorsByName(*ds);
  ASSERT_TRUE(errors.count("two.mp4"));
  EXPECT_THAT(std::string(errors["two.mp4"].message()), HasSubstr("has two first-frame images"));
  ASSERT_TRUE(errors.count("still.png"));
  EXPECT_THAT(std::string(errors["still.png"].message()), HasSubstr("the mask is 64x16, its image 32x16"));

  // Shares: walk.mp4 another worker's, walk.PNG (its first frame) this one's.
  ScanOptions mine;
  mine.include = [](const std::string& name) { return name != "walk.mp4"; };
  auto share = ScanVideoDataset(dir_, VideoBucketSpec{}, mine);
  ASSERT_TRUE(share.ok()) << share.status();
  for (const VideoSample& s : share->samples) EXPECT_NE(s.name.substr(0, 4), "walk") << s.name;
  EXPECT_EQ(ErrorsByName(*share).count("walk.PNG"), 0u);
}

}  // namespace
}  // namespace baton

#include "encoder_worker/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/util/files.h"

namespace baton {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("baton_dataset_test_", ::getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    ASSERT_TRUE(RemoveAll(dir_).ok());
    ASSERT_TRUE(MakeDirs(dir_).ok());
  }
  void TearDown() override {
    ASSERT_TRUE(RemoveAll(dir_).ok());
    ASSERT_TRUE(RemoveAll(dir_ + "_outside").ok());
  }

  void Write(const std::string& name, const std::string& data) {
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, name), data).ok()) << name;
  }
  // dataset/name -> target (as written: relative targets resolve from the link's folder).
  void Link(const std::string& target, const std::string& name) {
    ASSERT_EQ(::symlink(target.c_str(), JoinPath(dir_, name).c_str()), 0) << name;
  }
  // A folder beside the dataset, with a "secret" and a picture in it: what links must not reach.
  std::string Outside() {
    const std::string outside = dir_ + "_outside";
    EXPECT_TRUE(MakeDirs(outside).ok());
    EXPECT_TRUE(WriteFileAtomic(JoinPath(outside, "passwd"), "root:x:0:0:root:/root:/bin/bash").ok());
    EXPECT_TRUE(WriteFileAtomic(JoinPath(outside, "photo.png"), Png(6, 6, 9)).ok());
    return outside;
  }
  // One of each kind of link: out of the dataset (caption, image, through a linked subfolder), dangling (caption,
  // image), and inside the dataset (to a subfolder, and out and back in).
  void WriteLinkedFolder() {
    const std::string outside = Outside();
    Write("cap_out.png", Png(4, 4, 1));
    Link(JoinPath(outside, "passwd"), "cap_out.txt");  // p.txt -> /etc/passwd
    Link(JoinPath(outside, "photo.png"), "img_out.png");
    Write("img_out.txt", "a photo from the library");
    ASSERT_TRUE(MakeDirs(JoinPath(dir_, "sub")).ok());
    ASSERT_EQ(::symlink(outside.c_str(), JoinPath(dir_, "sub/lib").c_str()), 0);
    Write("via_sub.png", Png(4, 4, 2));
    Link("sub/lib/passwd", "via_sub.txt");  // inside by name, outside once resolved
    Write("cap_gone.png", Png(4, 4, 3));
    Link("no_such.txt", "cap_gone.txt");
    Link("no_such.png", "img_gone.png");
    Write("img_gone.txt", "a picture that is not there");
    Write("sub/in.txt", "a caption kept in a subfolder");
    Write("sub/in.png", Png(4, 4, 4));
    Write("in.png", Png(4, 4, 5));
    Link("sub/in.txt", "in.txt");
    Link("sub/in.png", "in_img.png");
    Write("in_img.txt", "an image kept in a subfolder");
    const std::string name = std::filesystem::path(dir_).filename().string();
    Write("back.png", Png(4, 4, 6));
    Link(absl::StrCat("../", name, "/sub/in.txt"), "back.txt");  // out by name, inside once resolved
  }
  static std::string Png(int w, int h, uint8_t shade) {
    Image img(w, h);
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(shade + i);
    return *EncodePng(img);
  }
  static std::string Jpeg(int w, int h) {
    Image img(w, h);
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 3);
    return *EncodeJpeg(img);
  }
  // Three good samples plus one of each kind of bad file, and files the scan must ignore.
  void WriteMixedFolder() {
    Write("a.png", Png(8, 6, 10));
    Write("a.txt", "  a red square \n");
    Write("b.jpg", Jpeg(16, 8));
    Write("b.txt",
          "\xEF\xBB\xBF"
          "blue circle");         // BOM is dropped
    Write("C.JPEG", Jpeg(8, 8));  // extension case does not matter
    Write("C.txt", "green");
    Write("missing.png", Png(4, 4, 0));  // no caption
    Write("zero.png", "");
    Write("zero.txt", "empty file");
    std::string png = Png(32, 32, 5);
    Write("trunc.png", png.substr(0, png.size() / 2));
    Write("trunc.txt", "cut short");
    Write("notimage.jpg", "this is text, not a JPEG");
    Write("notimage.txt", "fake");
    Write("pic.webp", "RIFF\x10\0\0\0WEBPVP8 ");
    Write("pic.txt", "webp");
    Write("notes.md", "ignored");
    Write(".hidden.png", "ignored dotfile");
    ASSERT_TRUE(MakeDirs(JoinPath(dir_, "sub.png")).ok());  // a directory: ignored
  }
  std::map<std::string, absl::Status> ErrorsByName(const Dataset& ds) {
    std::map<std::string, absl::Status> m;
    for (const FileError& e : ds.errors) m[std::filesystem::path(e.path).filename().string()] = e.status;
    return m;
  }

  std::string dir_;
};

TEST_F(DatasetTest, FindsGoodSamplesSortedAndCollectsPerFileErrors) {
  WriteMixedFolder();
  auto ds = ScanDataset(dir_);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<std::string> names;
  for (const DatasetSample& s : ds->samples) names.push_back(s.name);
  EXPECT_THAT(names, ElementsAre("C.JPEG", "a.png", "b.jpg"));  // bytewise: 'C' < 'a'

  const DatasetSample& a = ds->samples[1];
  EXPECT_EQ(a.caption, "a red square");
  EXPECT_EQ(a.image_path, JoinPath(dir_, "a.png"));
  EXPECT_EQ(a.caption_path, JoinPath(dir_, "a.txt"));
  EXPECT_EQ(a.format, ImageFormat::kPng);
  EXPECT_EQ(a.width, 8);
  EXPECT_EQ(a.height, 6);
  EXPECT_EQ(a.content_hash.size(), 64u);
  EXPECT_EQ(ds->samples[2].caption, "blue circle");
  EXPECT_EQ(ds->samples[2].format, ImageFormat::kJpeg);
  EXPECT_EQ(ds->samples[2].width, 16);

  auto errors = ErrorsByName(*ds);
  ASSERT_EQ(errors.size(), 5u);
  auto expect_error = [&](const std::string& name, absl::StatusCode code, const std::string& text) {
    ASSERT_TRUE(errors.count(name)) << name;
    const absl::Status& s = errors[name];
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(JoinPath(dir_, name)));
    EXPECT_THAT(std::string(s.message()), HasSubstr(text));
  };
  expect_error("missing.png", absl::StatusCode::kNotFound, "missing caption");
  expect_error("zero.png", absl::StatusCode::kInvalidArgument, "zero-byte");
  expect_error("trunc.png", absl::StatusCode::kInvalidArgument, "bad PNG");
  expect_error("notimage.jpg", absl::StatusCode::kInvalidArgument, "not a recognized image");
  expect_error("pic.webp", absl::StatusCode::kUnimplemented, "webp not supported by this build");
}

TEST_F(DatasetTest, TriggerWordConvention) {
  Write("1.png", Png(4, 4, 1));
  Write("1.txt", "a dog on grass");
  Write("2.png", Png(4, 4, 2));
  Write("2.txt", "photo of [trigger] dog");
  Write("3.png", Png(4, 4, 3));
  Write("3.txt", "ohwx cat");
  Write("4.png", Png(4, 4, 4));
  Write("4.txt", "  \n");
  ScanOptions opt;
  opt.trigger = "ohwx";
  auto ds = ScanDataset(dir_, opt);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->samples.size(), 4u);
  EXPECT_EQ(ds->samples[0].caption, "ohwx, a dog on grass");
  EXPECT_EQ(ds->samples[1].caption, "photo of ohwx dog");
  EXPECT_EQ(ds->samples[2].caption, "ohwx cat");
  EXPECT_EQ(ds->samples[3].caption, "ohwx");
  auto plain = ScanDataset(dir_);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->samples[0].caption, "a dog on grass");
  // The trigger is part of the content hash.
  EXPECT_NE(plain->samples[0].content_hash, ds->samples[0].content_hash);
}

TEST_F(DatasetTest, HashFollowsCaptionAndImageOnly) {
  Write("a.png", Png(8, 8, 1));
  Write("a.txt", "first caption");
  Write("b.png", Png(8, 8, 2));
  Write("b.txt", "other");
  auto before = ScanDataset(dir_);
  ASSERT_TRUE(before.ok());
  auto again = ScanDataset(dir_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(before->samples[0].content_hash, again->samples[0].content_hash);

  Write("a.txt", "second caption");
  auto after_caption = ScanDataset(dir_);
  ASSERT_TRUE(after_caption.ok());
  EXPECT_NE(after_caption->samples[0].content_hash, before->samples[0].content_hash);
  EXPECT_EQ(after_caption->samples[1].content_hash, before->samples[1].content_hash);
  // Whitespace around the caption is not content.
  Write("a.txt", "\n second caption  ");
  EXPECT_EQ(ScanDataset(dir_)->samples[0].content_hash, after_caption->samples[0].content_hash);

  Write("a.png", Png(8, 8, 3));
  auto after_image = ScanDataset(dir_);
  ASSERT_TRUE(after_image.ok());
  EXPECT_NE(after_image->samples[0].content_hash, after_caption->samples[0].content_hash);
  EXPECT_EQ(after_image->samples[0].content_hash, SampleContentHash(Png(8, 8, 3), "second caption", ""));
}

TEST_F(DatasetTest, BadCaptionsAreFileErrors) {
  Write("a.png", Png(4, 4, 1));
  Write("a.txt", "caf\xC3");  // truncated UTF-8 sequence
  Write("b.png", Png(4, 4, 2));
  Write("b.txt", "fine");
  auto ds = ScanDataset(dir_);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds->samples.size(), 1u);
  EXPECT_EQ(ds->samples[0].name, "b.png");
  ASSERT_EQ(ds->errors.size(), 1u);
  EXPECT_THAT(std::string(ds->errors[0].status.message()), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(std::string(ds->errors[0].status.message()), HasSubstr("a.txt"));
}

TEST_F(DatasetTest, WithoutDecodeCheckDamageShowsUpAtLoad) {
  std::string png = Png(32, 32, 5);
  Write("t.png", png.substr(0, png.size() / 2));  // header intact, body cut
  Write("t.txt", "cut");
  ScanOptions opt;
  opt.verify_decode = false;
  auto ds = ScanDataset(dir_, opt);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds->samples.size(), 1u);
  auto img = LoadSampleImage(ds->samples[0]);
  ASSERT_FALSE(img.ok());
  EXPECT_THAT(std::string(img.status().message()), HasSubstr("bad PNG"));
}

TEST_F(DatasetTest, LoadSampleImageDecodesAndNoticesChanges) {
  Write("a.png", Png(8, 6, 10));
  Write("a.txt", "x");
  auto ds = ScanDataset(dir_);
  ASSERT_TRUE(ds.ok());
  auto img = LoadSampleImage(ds->samples[0]);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 8);
  EXPECT_EQ(img->height, 6);
  Write("a.png", Png(8, 6, 11));
  EXPECT_EQ(LoadSampleImage(ds->samples[0]).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DatasetTest, FolderErrors) {
  EXPECT_EQ(ScanDataset(JoinPath(dir_, "nope")).status().code(), absl::StatusCode::kNotFound);
  Write("file", "x");
  EXPECT_EQ(ScanDataset(JoinPath(dir_, "file")).status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = ScanDataset(JoinPath(dir_, ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->samples.empty());
  EXPECT_TRUE(empty->errors.empty());
}

// Issue 35: a caption file over kMaxCaptionBytes is that record's error, named with its size and the limit, as an
// image over kMaxImageSide is; one exactly at the limit is a caption.
TEST_F(DatasetTest, CaptionsOverTheLimitAreRefusedByName) {
  Write("big.png", Png(4, 4, 1));
  Write("big.txt", std::string(kMaxCaptionBytes + 1, 'a'));
  Write("edge.png", Png(4, 4, 2));
  Write("edge.txt", std::string(kMaxCaptionBytes, 'b'));
  auto ds = ScanDataset(dir_);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->samples.size(), 1u);
  EXPECT_EQ(ds->samples[0].name, "edge.png");
  EXPECT_EQ(ds->samples[0].caption.size(), kMaxCaptionBytes);
  ASSERT_EQ(ds->errors.size(), 1u);
  EXPECT_EQ(ds->errors[0].path, JoinPath(dir_, "big.png"));
  EXPECT_EQ(ds->errors[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ds->errors[0].status.message(),
            absl::StrCat(JoinPath(dir_, "big.txt"), ": caption is ", kMaxCaptionBytes + 1, " bytes, over the limit of ",
                         kMaxCaptionBytes, " bytes"));
}

// Issue 35: an image or caption that resolves outside the dataset folder (`p.txt -> /etc/passwd`, directly or through
// a linked subfolder) is refused by name, as is a dangling link; links that stay inside are followed.
TEST_F(DatasetTest, LinksOutOfTheDatasetAreRefusedByName) {
  WriteLinkedFolder();
  auto ds = ScanDataset(dir_);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::map<std::string, std::string> captions;
  for (const DatasetSample& s : ds->samples) captions[s.name] = s.caption;
  EXPECT_EQ(captions, (std::map<std::string, std::string>{{"back.png", "a caption kept in a subfolder"},
                                                          {"in.png", "a caption kept in a subfolder"},
                                                          {"in_img.png", "an image kept in a subfolder"}}));
  auto errors = ErrorsByName(*ds);
  EXPECT_EQ(errors.size(), 5u);
  const std::string outside = *RealPath(dir_ + "_outside");
  auto expect_error = [&](const std::string& name, absl::StatusCode code, const std::string& text) {
    ASSERT_TRUE(errors.count(name)) << name;
    EXPECT_EQ(errors[name].code(), code) << errors[name];
    EXPECT_THAT(std::string(errors[name].message()), HasSubstr(text));
  };
  const std::string refused =
      absl::StrCat(", outside the dataset folder ", *RealPath(dir_), ": links out of the dataset are not followed");
  expect_error("cap_out.png", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "cap_out.txt"), " resolves to ", outside, "/passwd", refused));
  expect_error("img_out.png", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "img_out.png"), " resolves to ", outside, "/photo.png", refused));
  expect_error("via_sub.png", absl::StatusCode::kPermissionDenied,
               absl::StrCat(JoinPath(dir_, "via_sub.txt"), " resolves to ", outside, "/passwd", refused));
  expect_error("cap_gone.png", absl::StatusCode::kNotFound,
               absl::StrCat(JoinPath(dir_, "cap_gone.txt"), " is a dangling link (to no_such.txt)"));
  expect_error("img_gone.png", absl::StatusCode::kNotFound,
               absl::StrCat(JoinPath(dir_, "img_gone.png"), " is a dangling link (to no_such.png)"));
  for (const DatasetSample& s : ds->samples) EXPECT_THAT(s.caption, ::testing::Not(HasSubstr("root:x")));

  // The dataset folder itself may be a link: it is judged by where it resolves.
  const std::string alias = dir_ + "_outside/alias";
  ASSERT_EQ(::symlink(dir_.c_str(), alias.c_str()), 0);
  auto via_alias = ScanDataset(alias);
  ASSERT_TRUE(via_alias.ok()) << via_alias.status();
  EXPECT_EQ(via_alias->samples.size(), 3u);
  EXPECT_EQ(via_alias->errors.size(), 5u);
}

// The operator's --follow_links_into: links into those folders are followed (a dataset assembled from links into a
// shared photo library), the others still refused; a missing folder fails the scan, naming it.
TEST_F(DatasetTest, LinksIntoAFolderTheOperatorOpenedAreFollowed) {
  WriteLinkedFolder();
  ScanOptions options;
  options.follow_links_into = {dir_ + "_outside"};
  auto ds = ScanDataset(dir_, options);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::map<std::string, std::string> captions;
  for (const DatasetSample& s : ds->samples) captions[s.name] = s.caption;
  EXPECT_EQ(captions.size(), 6u);
  EXPECT_EQ(captions["cap_out.png"], "root:x:0:0:root:/root:/bin/bash");
  EXPECT_EQ(captions["img_out.png"], "a photo from the library");
  EXPECT_EQ(captions["via_sub.png"], "root:x:0:0:root:/root:/bin/bash");
  EXPECT_THAT(ErrorsByName(*ds), ::testing::SizeIs(2));  // the dangling links

  options.follow_links_into = {JoinPath(dir_, "sub")};  // inside the dataset: changes nothing
  ds = ScanDataset(dir_, options);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->samples.size(), 3u);
  options.follow_links_into = {dir_ + "_nowhere"};
  auto missing = ScanDataset(dir_, options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir_ + "_nowhere"));
}

}  // namespace
}  // namespace baton

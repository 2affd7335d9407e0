#include "encoder_worker/cache_builder.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "core/data/cache.h"
#include "core/metrics/families.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/util/files.h"

namespace baton {
namespace {

// A stand-in for the neural encoders: deterministic functions of the pixels and caption, so the tests are
// about the cache logic (skip, re-encode, errors) and run in milliseconds. The real encoders have their
// own tests (flux2_vae_test, text_encoder_test) and the pipeline folder test runs them end to end.
class FakeEncoder : public SampleEncoder {
 public:
  std::string identity() const override { return identity_; }
  int64_t latent_channels() const override { return 8; }
  int64_t text_dim() const override { return 4; }
  absl::StatusOr<at::Tensor> EncodeImage(const Image& image) override {
    ++image_calls;
    at::Tensor px = ImageToPixels(image);                                      // [1, 3, H, W]
    at::Tensor pooled = at::avg_pool2d(px, 16).squeeze(0);                     // [3, H/16, W/16]
    return pooled.flatten(1).t().repeat({1, 3}).narrow(1, 0, 8).contiguous();  // [tokens, 8]
  }
  absl::StatusOr<at::Tensor> EncodeText(const std::string& caption) override {
    captions.push_back(caption);
    return at::full({5, 4}, static_cast<float>(caption.size()) + 0.5f);
  }
  std::string identity_ = "fake-v1";
  std::vector<std::string> captions;  // every EncodeText call's
  int image_calls = 0;
};

Image Solid(int w, int h, uint8_t r) {
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.assign(static_cast<size_t>(w) * h * 3, r);
  return img;
}

class CacheBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test_util::MakeTempDir("cachebuild");
    data_ = JoinPath(root_, "data");
    ASSERT_TRUE(MakeDirs(data_).ok());
    ASSERT_TRUE(WritePng(JoinPath(data_, "a.png"), Solid(64, 64, 10)).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "a.txt"), "a red square").ok());
    ASSERT_TRUE(WritePng(JoinPath(data_, "b.png"), Solid(96, 48, 200)).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "b.txt"), "a wide bright image").ok());
    options_.dataset_dir = data_;
    options_.cache_dir = JoinPath(root_, "cache");
    options_.buckets.target_area = 64 * 64;
    options_.buckets.min_side = 32;
    options_.buckets.max_side = 256;
  }
  std::string root_, data_;
  CacheBuildOptions options_;
  FakeEncoder encoder_;
};

// Caption dropout's empty caption: encoded once per cache, as the encoder encodes "", kept by a rerun that reads it
// back whole, encoded anew when its file is damaged.
TEST_F(CacheBuilderTest, CachesTheEmptyCaptionOnceAndRebuildsItWhenDamaged) {
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  EXPECT_EQ(std::count(encoder_.captions.begin(), encoder_.captions.end(), ""), 1);
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  auto empty = (*reader)->EmptyPrompt(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(at::equal(*empty, at::full({5, 4}, 0.5f)));  // EncodeText("")
  encoder_.captions.clear();
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  EXPECT_TRUE(encoder_.captions.empty()) << "a rerun encoded " << encoder_.captions.size() << " captions";
  // A flipped byte in the tensor data: the reader refuses it, and a rerun encodes it again.
  const std::string file = JoinPath(options_.cache_dir, kEmptyPromptFile);
  auto bytes = ReadFile(file);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() - 2] ^= 0x40;
  ASSERT_TRUE(WriteFileAtomic(file, *bytes).ok());
  reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  auto damaged = (*reader)->EmptyPrompt(0);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("checksum"), std::string::npos) << damaged.status();
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  EXPECT_EQ(encoder_.captions, std::vector<std::string>{""});
  reader = CacheReader::Open(options_.cache_dir);
  EXPECT_TRUE((*reader)->EmptyPrompt(0).ok());
}

// Masked loss: a.mask.png beside a.png lands in a's record on the latent grid (4 x 4 cells of 16 pixels: the left
// half white, the right half black); b has none; a bad mask fails its sample alone; a changed mask re-encodes it.
TEST_F(CacheBuilderTest, AMaskBesideItsImageWeightsTheRecordsTokens) {
  Image mask = Solid(64, 64, 0);
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 32; ++x) mask.at(x, y)[0] = mask.at(x, y)[1] = mask.at(x, y)[2] = 255;
  }
  ASSERT_TRUE(WritePng(JoinPath(data_, "a.mask.png"), mask).ok());
  auto first = BuildCache(encoder_, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->encoded, 2);  // the mask is no sample of its own
  EXPECT_TRUE(first->errors.empty());
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  auto a = (*reader)->Load(0), b = (*reader)->Load(1);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->loss_mask.defined());
  EXPECT_TRUE(at::equal(a->loss_mask, at::tensor({1.0f, 1.0f, 0.0f, 0.0f}).repeat({4, 1}))) << a->loss_mask;
  EXPECT_FALSE(b->loss_mask.defined());

  Image colored = Solid(96, 48, 255);
  colored.at(0, 0)[2] = 0;
  ASSERT_TRUE(WritePng(JoinPath(data_, "b.mask.png"), colored).ok());
  mask.at(40, 40)[0] = mask.at(40, 40)[1] = mask.at(40, 40)[2] = 128;
  ASSERT_TRUE(WritePng(JoinPath(data_, "a.mask.png"), mask).ok());
  auto second = BuildCache(encoder_, options_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->encoded, 1);  // a, for its new mask
  ASSERT_EQ(second->errors.size(), 1u);
  EXPECT_NE(second->errors[0].status.message().find("b.mask.png: the mask is not gray-scale"), std::string::npos)
      << second->errors[0].status;
}

// Reference images: a control folder with a.png (one) and b_0.png, b_1.png (two). Each is resized and cropped to
// its image's bucket and encoded as the image is, into the record; a changed reference re-encodes its sample alone; a
// bad layout fails its sample alone; a video encoder refuses the folder.
TEST_F(CacheBuilderTest, AControlFolderCachesEachSamplesReferenceImagesAtItsBucket) {
  const std::string control = JoinPath(root_, "control");
  ASSERT_TRUE(MakeDirs(control).ok());
  ASSERT_TRUE(WritePng(JoinPath(control, "a.png"), Solid(80, 40, 90)).ok());  // another shape than a's 64x64
  ASSERT_TRUE(WritePng(JoinPath(control, "b_0.png"), Solid(96, 48, 30)).ok());
  ASSERT_TRUE(WritePng(JoinPath(control, "b_1.png"), Solid(50, 70, 250)).ok());
  options_.control_dir = control;
  auto first = BuildCache(encoder_, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->encoded, 2);
  EXPECT_TRUE(first->errors.empty());
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  const auto& records = (*reader)->index().records;
  EXPECT_EQ(records[0].references, 1);
  EXPECT_EQ(records[1].references, 2);
  EXPECT_EQ(records[1].BucketKey(), absl::StrCat(records[1].grid_h, "x", records[1].grid_w, "/5+2ref"));
  for (size_t i = 0; i < 2; ++i) {
    auto s = (*reader)->Load(i);
    ASSERT_TRUE(s.ok()) << s.status();
    const Bucket bucket{static_cast<int>(s->grid_w * 16), static_cast<int>(s->grid_h * 16)};
    const std::vector<std::string> files =
        i == 0 ? std::vector<std::string>{"a.png"} : std::vector<std::string>{"b_0.png", "b_1.png"};
    ASSERT_EQ(s->references.size(0), static_cast<int64_t>(files.size()));
    for (size_t k = 0; k < files.size(); ++k) {
      auto image = ReadImageFile(JoinPath(control, files[k]));
      ASSERT_TRUE(image.ok());
      auto want = encoder_.EncodeImage(ResizeToBucket(*image, bucket));
      ASSERT_TRUE(want.ok());
      EXPECT_TRUE(at::equal(s->references[static_cast<int64_t>(k)], *want)) << files[k];
    }
  }

  ASSERT_TRUE(WritePng(JoinPath(control, "a.png"), Solid(80, 40, 91)).ok());
  ASSERT_TRUE(WritePng(JoinPath(control, "b.png"), Solid(96, 48, 30)).ok());  // b.png beside b_0.png: ambiguous
  auto second = BuildCache(encoder_, options_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->encoded, 1);  // a, for its new reference
  ASSERT_EQ(second->errors.size(), 1u);
  EXPECT_NE(second->errors[0].status.message().find("b.png: the control folder holds b.png, b_0.png, b_1.png"),
            std::string::npos)
      << second->errors[0].status;

  options_.control_dir = JoinPath(root_, "missing");
  auto missing = BuildCache(encoder_, options_);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("control folder"), std::string::npos) << missing.status();

  struct VideoEncoder : FakeEncoder {
    bool encodes_video() const override { return true; }
  } video;
  options_.control_dir = control;
  auto wan = BuildCache(video, options_);
  ASSERT_FALSE(wan.ok());
  EXPECT_NE(wan.status().message().find("reference images are FLUX.2's"), std::string::npos) << wan.status();
}

// Several resolutions: each image at each, as "<name>@<resolution>" in id order, in the bucket of that area; a rerun
// keeps them all; a job's `resolutions:` reads only those it names; a validation holds an image out at both or neither.
TEST_F(CacheBuilderTest, SeveralResolutionsCacheEachImageAtEach) {
  options_.resolutions = {64, 32};
  auto first = BuildCache(encoder_, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->encoded, 4);
  auto index = ReadCacheIndex(options_.cache_dir);
  ASSERT_TRUE(index.ok());
  std::vector<std::string> ids;
  for (const CacheRecordInfo& r : index->records) {
    ids.push_back(r.id);
    EXPECT_EQ(r.id, absl::StrCat(r.SampleName(), "@", r.resolution));
    const Bucket b{static_cast<int>(r.grid_w * 16), static_cast<int>(r.grid_h * 16)};
    EXPECT_EQ(r.bucket, b.ToString());
    EXPECT_LE(b.width * b.height, r.resolution * r.resolution) << r.id;
    EXPECT_GT(b.width * b.height, r.resolution * r.resolution / 2) << r.id;
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"a.png@32", "a.png@64", "b.png@32", "b.png@64"}));
  auto second = BuildCache(encoder_, options_);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->kept, 4);

  auto only32 = CacheReader::OpenAll({options_.cache_dir}, {{32}});
  ASSERT_TRUE(only32.ok()) << only32.status();
  ASSERT_EQ((*only32)->size(), 2u);
  for (const CacheRecordInfo& r : (*only32)->index().records) EXPECT_EQ(r.resolution, 32);
  EXPECT_FALSE(CacheReader::OpenAll({options_.cache_dir}, {{48}}).ok());
  auto held = HeldOutRecords(*index, 1);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ(index->records[(*held)[0]].SampleName(), index->records[(*held)[1]].SampleName());

  options_.resolutions = {};  // one resolution again: records named as the images, the others dropped
  auto single = BuildCache(encoder_, options_);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->encoded, 2);
  auto plain = CacheReader::OpenAll({options_.cache_dir}, {{64}});
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("was encoded at one resolution"), std::string::npos) << plain.status();
}

TEST_F(CacheBuilderTest, EncodesThenSkipsUnchangedSamples) {
  auto first = BuildCache(encoder_, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->encoded, 2);
  EXPECT_EQ(first->kept, 0);
  EXPECT_TRUE(first->errors.empty());
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->size(), 2u);
  const CacheRecordInfo& b = (*reader)->index().records[1];
  EXPECT_EQ(b.id, "b.png");
  EXPECT_EQ(b.grid_w * 16, std::stoi(b.bucket.substr(0, b.bucket.find('x'))));
  EXPECT_GT(b.grid_w, b.grid_h);  // the wide image went to a landscape bucket
  auto sample = (*reader)->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->prompt_embeds[0][0].item<float>(), 12.5f);  // strlen("a red square") + 0.5

  encoder_.image_calls = 0;
  auto second = BuildCache(encoder_, options_);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->kept, 2);
  EXPECT_EQ(second->encoded, 0);
  EXPECT_EQ(encoder_.image_calls, 0);
}

// File names near the file system's 255 bytes (82 CJK characters make 246): each record gets a file of at most 239
// bytes (its temporary's suffix fits), two such names differing only at the end get two, and a rerun keeps both.
TEST_F(CacheBuilderTest, LongFileNamesGetRecordFilesOfTheirOwn) {
  std::string stem;
  for (int i = 0; i < 82; ++i) stem += "\xe7\x8c\xab";  // 猫, 3 bytes in UTF-8
  auto png = EncodePng(Solid(64, 64, 40));
  ASSERT_TRUE(png.ok());
  for (const std::string& name : {stem + "1", stem + "2"}) {  // 251-byte names: no room for a temporary's suffix
    std::ofstream(JoinPath(data_, name + ".png"), std::ios::binary) << *png;
    std::ofstream(JoinPath(data_, name + ".txt")) << "a cat";
  }
  auto first = BuildCache(encoder_, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->encoded, 4);
  for (const FileError& e : first->errors) ADD_FAILURE() << e.status;
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::set<std::string> files;
  for (const CacheRecordInfo& r : (*reader)->index().records) {
    const std::string base = r.file.substr(r.file.find('/') + 1);
    EXPECT_LE(base.size(), 239u) << r.id;
    EXPECT_TRUE(PathExists(JoinPath(options_.cache_dir, r.file))) << r.file;
    files.insert(r.file);
  }
  EXPECT_EQ(files.size(), 4u);
  for (size_t i = 0; i < (*reader)->size(); ++i) EXPECT_TRUE((*reader)->Load(i).ok()) << i;
  auto second = BuildCache(encoder_, options_);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->kept, 4);
}

TEST_F(CacheBuilderTest, ChangedCaptionOrEncoderReencodes) {
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "a.txt"), "a dark square").ok());
  auto changed = BuildCache(encoder_, options_);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->encoded, 1);
  EXPECT_EQ(changed->kept, 1);
  encoder_.identity_ = "fake-v2";
  auto other = BuildCache(encoder_, options_);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->encoded, 2);
}

TEST_F(CacheBuilderTest, CorruptRecordIsDetectedAndReencoded) {
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  std::string path = JoinPath(options_.cache_dir, "records/a.png.safetensors");
  auto bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomic(path, bytes->substr(0, bytes->size() - 7)).ok());  // a torn write
  // Training refuses it...
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->Load(0).status().code(), absl::StatusCode::kDataLoss);
  // ...and a rerun repairs it.
  auto rerun = BuildCache(encoder_, options_);
  ASSERT_TRUE(rerun.ok());
  EXPECT_EQ(rerun->reencoded_corrupt, 1);
  EXPECT_EQ(rerun->encoded, 1);
  auto repaired = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(repaired.ok());
  EXPECT_TRUE((*repaired)->Load(0).ok());
}

// A bit flip keeps the size and the safetensors header and leaves a finite value: only the checksum sees it.
TEST_F(CacheBuilderTest, RecordFailingItsChecksumIsRebuilt) {
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  const std::string path = JoinPath(options_.cache_dir, "records/a.png.safetensors");
  auto good = ReadFile(path);
  ASSERT_TRUE(good.ok());
  std::string flipped = *good;
  flipped[flipped.size() - 4] ^= 1;  // the lowest bit of the last float
  ASSERT_TRUE(WriteFileAtomic(path, flipped).ok());
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  auto refused = (*reader)->Load(0);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cache record a.png"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("checksum"), std::string::npos) << refused.status();
  encoder_.image_calls = 0;
  auto rerun = BuildCache(encoder_, options_);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_EQ(rerun->reencoded_corrupt, 1);
  EXPECT_EQ(rerun->encoded, 1);
  EXPECT_EQ(rerun->kept, 1);
  EXPECT_EQ(encoder_.image_calls, 1);
  auto rebuilt = ReadFile(path);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_EQ(*rebuilt, *good);
  auto repaired = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(repaired.ok());
  EXPECT_TRUE((*repaired)->Load(0).ok());
}

// A cache indexed before checksums: a rerun keeps its records and adds their checksums to the index.
TEST_F(CacheBuilderTest, RerunAddsChecksumsToAnOlderIndex) {
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  auto index = ReadCacheIndex(options_.cache_dir);
  ASSERT_TRUE(index.ok());
  const std::string checksum = index->records[0].checksum;
  ASSERT_FALSE(checksum.empty());
  for (CacheRecordInfo& r : index->records) r.checksum.clear();
  ASSERT_TRUE(WriteCacheIndex(options_.cache_dir, *index).ok());
  auto rerun = BuildCache(encoder_, options_);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_EQ(rerun->kept, 2);
  auto after = ReadCacheIndex(options_.cache_dir);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->records[0].checksum, checksum);
}

TEST_F(CacheBuilderTest, BadFilesAreReportedAndTheRestEncodes) {
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "c.png"), "").ok());  // zero bytes
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "c.txt"), "empty").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "d.png"), "this is not an image").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "d.txt"), "text").ok());
  ASSERT_TRUE(WritePng(JoinPath(data_, "e.png"), Solid(64, 64, 1)).ok());  // no caption
  auto png = EncodePng(Solid(64, 64, 5));
  ASSERT_TRUE(png.ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "f.png"), png->substr(0, png->size() / 2)).ok());  // truncated
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "f.txt"), "cut").ok());
  auto report = BuildCache(encoder_, options_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->encoded, 2);
  ASSERT_EQ(report->errors.size(), 4u);
  std::string all;
  for (const auto& e : report->errors) all += e.path + ": " + std::string(e.status.message()) + "\n";
  for (const char* name : {"c.png", "d.png", "e.png", "f.png"}) EXPECT_NE(all.find(name), std::string::npos) << all;
}

TEST_F(CacheBuilderTest, RemovedSamplesLeaveTheCache) {
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());
  ASSERT_TRUE(RemoveAll(JoinPath(data_, "b.png")).ok());
  auto report = BuildCache(encoder_, options_);
  ASSERT_TRUE(report.ok());
  auto reader = CacheReader::Open(options_.cache_dir);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->size(), 1u);
  EXPECT_FALSE(PathExists(JoinPath(options_.cache_dir, "records/b.png.safetensors")));
}

// baton_encoder_*: what BuildCache reports, counted (deltas: the registry is process-wide).
TEST_F(CacheBuilderTest, MetricsCountEncodedKeptAndFailedSamples) {
  EncoderMetrics& m = EncoderFamilies();
  auto values = [&] {
    return std::vector<double>{
        m.samples_encoded.Add({}).Value(), m.samples_kept.Add({}).Value(), m.samples_failed.Add({}).Value(),
        static_cast<double>(m.sample_seconds.Add({}, EncoderSampleBuckets()).Collect().histogram.sample_count)};
  };
  const std::vector<double> before = values();
  ASSERT_TRUE(BuildCache(encoder_, options_).ok());  // a, b encoded
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "d.png"), "this is not an image").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "d.txt"), "text").ok());
  ASSERT_TRUE(WritePng(JoinPath(data_, "e.png"), Solid(64, 64, 1)).ok());  // no caption: a scan error
  auto rerun = BuildCache(encoder_, options_);                             // a, b kept; d, e failed
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  ASSERT_EQ(rerun->errors.size(), 2u);
  const std::vector<double> after = values();
  EXPECT_EQ(after[0] - before[0], 2) << "encoded";
  EXPECT_EQ(after[1] - before[1], 2) << "kept";
  EXPECT_EQ(after[2] - before[2], 2) << "failed";
  EXPECT_EQ(after[3] - before[3], 2) << "seconds per sample: one observation per encoded sample";
}

}  // namespace
}  // namespace baton

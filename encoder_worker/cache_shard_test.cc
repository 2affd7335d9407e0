// Several encoder workers on one dataset: the shares (--shard i/N), the merge, and the equivalence that matters --
// two shards merged are the cache one worker writes, record for record and byte for byte -- on the bundled sample
// data with the tiny FLUX.2 pipeline. tests/encoder_shard_test.cc runs the binary: flags, SIGKILL, reruns.
#include "core/data/cache_shard.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "core/data/cache.h"
#include "core/data/cache_merge.h"
#include "core/encode/flux2_encoder.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "encoder_worker/cache_builder.h"
#include "encoder_worker/encoder_service.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

TEST(ShardTest, ParsesIOfNAndRefusesAnythingElseSayingWhatIsExpected) {
  for (const char* good : {"0/1", "0/2", "1/2", "7/8"}) {
    auto spec = ParseShard(good);
    ASSERT_TRUE(spec.ok()) << good << ": " << spec.status();
    EXPECT_EQ(spec->ToString(), good);
  }
  auto check = [](const char* value, const char* says) {
    auto spec = ParseShard(value);
    ASSERT_FALSE(spec.ok()) << value;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(spec.status().message());
    EXPECT_NE(message.find(absl::StrCat("--shard \"", value, "\": ")), std::string::npos) << message;
    EXPECT_NE(message.find(says), std::string::npos) << message;
  };
  check("2/2", "the share i must be one of 0 .. 1 for N = 2 workers, not 2");
  check("-1/2", "the share i must be one of 0 .. 1");
  check("0/0", "the worker count N must be between 1 and 4096, not 0");
  check("0/5000", "the worker count N must be between 1 and 4096");
  for (const char* malformed : {"", "1", "two", "1/2/3", "/2", "1/", "a/b", "0.5/2"}) check(malformed, "expected i/N");
}

// The share is the sample name's alone (so a rerun, an added sample or another machine never moves one), every
// name has exactly one, and a large dataset splits evenly.
TEST(ShardTest, EveryNameHasOneStableShareAndLargeDatasetsSplitEvenly) {
  // Pinned: a change here re-deals every existing shard cache (each sample would be re-encoded by another worker).
  EXPECT_EQ(ShardOfName("red_circle.png", 2), 0);
  EXPECT_EQ(ShardOfName("blue_square.png", 2), 1);
  EXPECT_EQ(ShardOfName("white_triangle.png", 3), 2);
  std::map<int64_t, int> per_share;
  for (int i = 0; i < 4000; ++i) {
    const std::string name = absl::StrCat("img_", i, ".jpg");
    const int64_t share = ShardOfName(name, 4);
    ASSERT_EQ(share, ShardOfName(name, 4));
    int owners = 0;
    for (int64_t k = 0; k < 4; ++k) owners += ShardSpec{k, 4}.Contains(name) ? 1 : 0;
    ASSERT_EQ(owners, 1) << name;
    ++per_share[share];
  }
  ASSERT_EQ(per_share.size(), 4u);
  for (const auto& entry : per_share) {
    // 1000 expected, binomial sd ~27: ±100 is beyond 3.5 sd.
    EXPECT_NEAR(entry.second, 1000, 100) << "share " << entry.first;
  }
  EXPECT_EQ(ShardOfName("anything", 1), 0);
}

// The bytes of every file of a cache folder, by relative path.
std::map<std::string, std::string> FolderBytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    auto bytes = ReadFile(entry.path().string());
    EXPECT_TRUE(bytes.ok()) << entry.path();
    files[fs::relative(entry.path(), dir).string()] = bytes.ok() ? *bytes : "";
  }
  return files;
}

class CacheShardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(test_util::MakeTempDir("cache_shard"));
    ASSERT_TRUE(WriteTinyFlux2Pipeline(JoinPath(*root_, "pipeline"), 0).ok());
    Flux2EncoderOptions options;
    options.max_sequence_length = 96;
    auto encoder = Flux2SampleEncoder::Open(JoinPath(*root_, "pipeline"), options);
    ASSERT_TRUE(encoder.ok()) << encoder.status();
    encoder_ = encoder->release();
  }
  static void TearDownTestSuite() {
    delete encoder_;
    delete root_;
  }

  // The bundled sample data (data/sample: eight drawn PNGs) copied, so a test may edit it.
  std::string CopySampleData(const std::string& name) {
    const std::string dir = JoinPath(*root_, name);
    fs::copy(JoinPath(test_util::SourceDir(), "data/sample"), dir,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return dir;
  }
  CacheBuildReport Build(const std::string& data, const std::string& cache, std::optional<ShardSpec> shard) {
    CacheBuildOptions options;
    options.dataset_dir = data;
    options.cache_dir = JoinPath(*root_, cache);
    options.buckets = BucketsForResolution(64);
    options.shard = shard;
    auto report = BuildCache(*encoder_, options);
    EXPECT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(!report.ok() || report->errors.empty());
    return report.ok() ? *report : CacheBuildReport{};
  }
  std::string Dir(const std::string& name) { return JoinPath(*root_, name); }

  static std::string* root_;
  static Flux2SampleEncoder* encoder_;
};
std::string* CacheShardTest::root_ = nullptr;
Flux2SampleEncoder* CacheShardTest::encoder_ = nullptr;

TEST_F(CacheShardTest, TwoShardsMergedAreTheCacheOneWorkerWrites) {
  const std::string data = JoinPath(test_util::SourceDir(), "data/sample");
  const CacheBuildReport whole = Build(data, "whole", std::nullopt);
  ASSERT_EQ(whole.encoded, 8);
  const CacheBuildReport first = Build(data, "shard0", ShardSpec{0, 2});
  const CacheBuildReport second = Build(data, "shard1", ShardSpec{1, 2});
  EXPECT_EQ(first.encoded, 5);  // red_circle, green_triangle, orange_circle, red_stripes_wide, yellow_square
  EXPECT_EQ(second.encoded, 3);
  auto marker = ReadCacheShard(Dir("shard1"));
  ASSERT_TRUE(marker.ok() && marker->has_value()) << marker.status();
  EXPECT_EQ((*marker)->ToString(), "1/2");
  EXPECT_FALSE(ReadCacheShard(Dir("whole"))->has_value());

  auto merged = MergeShardCaches({Dir("shard1"), Dir("shard0")}, Dir("merged"));  // in any order
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->records, 8);
  EXPECT_EQ(merged->linked + merged->copied, 8);
  // Same records, bitwise the same tensors, the same index (here byte for byte: the merge lists records in the
  // order of the single worker's sorted scan).
  const auto expected = FolderBytes(Dir("whole"));
  const auto actual = FolderBytes(Dir("merged"));
  ASSERT_EQ(expected.size(), 10u);  // index.json, empty_prompt.safetensors and 8 records
  EXPECT_EQ(actual.size(), expected.size());
  for (const auto& entry : expected) {
    auto it = actual.find(entry.first);
    ASSERT_NE(it, actual.end()) << entry.first;
    EXPECT_TRUE(it->second == entry.second) << entry.first << " differs";
  }
  auto reader = CacheReader::Open(Dir("merged"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (size_t i = 0; i < (*reader)->size(); ++i) EXPECT_TRUE((*reader)->Load(i).ok()) << i;

  // Reruns: each shard keeps every record, the merge links nothing anew.
  EXPECT_EQ(Build(data, "shard0", ShardSpec{0, 2}).kept, 5);
  EXPECT_EQ(Build(data, "shard1", ShardSpec{1, 2}).kept, 3);
  auto again = MergeShardCaches({Dir("shard0"), Dir("shard1")}, Dir("merged"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->unchanged, 8);
  EXPECT_EQ(again->linked + again->copied, 0);
  EXPECT_EQ(FolderBytes(Dir("merged")), actual);
}

// An edited sample is re-encoded by the one worker whose share it is, a removed one leaves that shard and the
// merged cache, and the others are kept everywhere.
TEST_F(CacheShardTest, IncrementalRebuildsReencodeOnlyWhatChanged) {
  const std::string data = CopySampleData("edited_data");
  Build(data, "edit0", ShardSpec{0, 2});
  Build(data, "edit1", ShardSpec{1, 2});
  ASSERT_TRUE(MergeShardCaches({Dir("edit0"), Dir("edit1")}, Dir("edit_merged")).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "blue_square.txt"), "a blue square, edited").ok());  // share 1
  ASSERT_TRUE(RemoveAll(JoinPath(data, "red_circle.png")).ok());                                  // share 0
  const CacheBuildReport first = Build(data, "edit0", ShardSpec{0, 2});
  const CacheBuildReport second = Build(data, "edit1", ShardSpec{1, 2});
  EXPECT_EQ(first.encoded, 0);
  EXPECT_EQ(first.kept, 4);
  EXPECT_EQ(second.encoded, 1);
  EXPECT_EQ(second.kept, 2);
  auto merged = MergeShardCaches({Dir("edit0"), Dir("edit1")}, Dir("edit_merged"));
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->records, 7);
  EXPECT_EQ(merged->unchanged, 6);
  EXPECT_EQ(merged->linked + merged->copied, 1);
  EXPECT_EQ(merged->removed, 1);
  EXPECT_FALSE(PathExists(JoinPath(Dir("edit_merged"), "records/red_circle.png.safetensors")));
  // Still exactly what one worker makes of the edited dataset.
  Build(data, "edit_whole", std::nullopt);
  EXPECT_EQ(FolderBytes(Dir("edit_merged")), FolderBytes(Dir("edit_whole")));
}

TEST_F(CacheShardTest, ABuildRefusesAFolderHoldingAnotherShareOrTheWholeDataset) {
  const std::string data = JoinPath(test_util::SourceDir(), "data/sample");
  Build(data, "own0", ShardSpec{0, 2});
  const auto before = FolderBytes(Dir("own0"));
  CacheBuildOptions options;
  options.dataset_dir = data;
  options.cache_dir = Dir("own0");
  options.buckets = BucketsForResolution(64);
  options.shard = ShardSpec{1, 2};
  auto other = BuildCache(*encoder_, options);
  ASSERT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
  EXPECT_NE(other.status().message().find("holds shard 0/2, and this run encodes shard 1/2: give each shard"),
            std::string::npos)
      << other.status();
  options.shard.reset();
  auto whole = BuildCache(*encoder_, options);
  ASSERT_EQ(whole.status().code(), absl::StatusCode::kFailedPrecondition) << whole.status();
  EXPECT_NE(whole.status().message().find("holds shard 0/2, and this run encodes the whole dataset"), std::string::npos)
      << whole.status();
  EXPECT_EQ(FolderBytes(Dir("own0")), before);  // nothing deleted, nothing rewritten
  // And the reverse: a whole-dataset cache is no shard's folder.
  Build(data, "own_whole", std::nullopt);
  options.cache_dir = Dir("own_whole");
  options.shard = ShardSpec{0, 2};
  auto share = BuildCache(*encoder_, options);
  ASSERT_EQ(share.status().code(), absl::StatusCode::kFailedPrecondition) << share.status();
  EXPECT_NE(share.status().message().find("holds the whole dataset, and this run encodes shard 0/2"), std::string::npos)
      << share.status();
}

TEST_F(CacheShardTest, MergeRefusesMissingRepeatedOrForeignSharesAndCorruptRecords) {
  const std::string data = JoinPath(test_util::SourceDir(), "data/sample");
  Build(data, "m0", ShardSpec{0, 2});
  Build(data, "m1", ShardSpec{1, 2});
  Build(data, "m_whole", std::nullopt);
  auto expect = [](const absl::StatusOr<CacheMergeReport>& r, absl::StatusCode code, const std::string& says) {
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status();
  };
  expect(MergeShardCaches({Dir("m0")}, Dir("m_out")), absl::StatusCode::kFailedPrecondition,
         "the merge needs all 2 shards of the split; missing: 1/2");
  expect(MergeShardCaches({Dir("m0"), Dir("m0")}, Dir("m_out")), absl::StatusCode::kFailedPrecondition,
         "are both shard 0/2");
  expect(MergeShardCaches({Dir("m0"), Dir("m_whole")}, Dir("m_out")), absl::StatusCode::kFailedPrecondition,
         "is not a shard");
  expect(MergeShardCaches({Dir("m0"), Dir("m1")}, Dir("m0")), absl::StatusCode::kInvalidArgument,
         "is one of the shard folders");
  expect(MergeShardCaches({Dir("m0"), Dir("absent")}, Dir("m_out")), absl::StatusCode::kFailedPrecondition,
         "has its encoder_worker --shard run finished?");
  EXPECT_FALSE(PathExists(JoinPath(Dir("m_out"), "index.json")));

  // A bit flipped in a shard's record: the merge names it and writes no index.
  const std::string record = JoinPath(Dir("m1"), "records/blue_square.png.safetensors");
  auto bytes = ReadFile(record);
  ASSERT_TRUE(bytes.ok());
  std::string flipped = *bytes;
  flipped[flipped.size() - 4] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(record, flipped).ok());
  expect(MergeShardCaches({Dir("m0"), Dir("m1")}, Dir("m_out")), absl::StatusCode::kDataLoss,
         "cache record blue_square.png");
  EXPECT_FALSE(PathExists(JoinPath(Dir("m_out"), "index.json")));
}

}  // namespace
}  // namespace baton

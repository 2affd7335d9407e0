// A cache record's bytes and values are verified whenever they are read (core/data/cache.h): a bit flip that keeps
// the size and the header, a value near 1e38 or a NaN is an error naming the record id and its file, in training
// (StepSampler) and in validation (BuildValidationSet) alike; an index written before checksums still opens.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/data/cache.h"
#include "core/data/crc32c.h"
#include "core/model/flux2_family.h"
#include "core/sample/validation.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train/job.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::TinyFlux2Config;

TEST(Crc32cTest, KnownValueBothWaysAndStreaming) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xe3069283u);  // the CRC-32C check value (RFC 3720, B.4)
  EXPECT_EQ(Crc32cPortable(0, "123456789", 9), 0xe3069283u);
  std::string data(100003, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 11);
  for (size_t offset : {0, 1, 5}) {
    const char* p = data.data() + offset;
    const size_t n = data.size() - offset;
    const uint32_t whole = Crc32c(0, p, n);
    EXPECT_EQ(whole, Crc32cPortable(0, p, n));
    EXPECT_EQ(whole, Crc32c(Crc32c(0, p, 777), p + 777, n - 777));
  }
}

// Flips the lowest bit of the last float in the file: same size, same header, a value off by one ulp.
void FlipLowBit(const std::string& path) {
  auto bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  (*bytes)[bytes->size() - 4] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(path, *bytes).ok());
}

class CacheIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("cache_integrity");
    cache_dir_ = JoinPath(dir_, "cache");
    const Flux2Config c = TinyFlux2Config();
    ASSERT_TRUE(WriteSyntheticCache(cache_dir_, c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3).ok());
  }
  std::unique_ptr<CacheReader> Open() {
    auto cache = CacheReader::Open(cache_dir_);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  JobConfig Job(const std::string& extra = "") {
    auto job = ParseJobYaml(absl::StrCat("model: m\ndataset: ", cache_dir_,
                                         "\nsteps: 4\nbatch_size: 4\nmicro_batches: 2\nseed: 3\n", extra));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobConfig();
  }
  // The first error of the training steps of one epoch (every record is drawn once), or OK.
  absl::Status TrainingEpoch(const CacheReader& cache, const JobConfig& job) {
    auto sampler = StepSampler::Create(&cache, job, &family_);
    if (!sampler.ok()) return sampler.status();
    const int64_t steps = sampler->micro_batches_per_epoch() / job.micro_batches;
    for (int64_t step = 0; step < steps; ++step) {
      if (auto batches = sampler->Step(step); !batches.ok()) return batches.status();
    }
    return absl::OkStatus();
  }
  // Rewrites record i with `latents` and lists it in the index as the encoder would (checksum of the new bytes).
  void RewriteRecord(size_t i, const at::Tensor& latents) {
    auto index = ReadCacheIndex(cache_dir_);
    ASSERT_TRUE(index.ok());
    CacheRecordInfo& r = index->records[i];
    CacheRecordInfo unused;
    auto s = ReadCacheRecord(cache_dir_, r.file, index->layout(), &unused, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    CacheSample bad{latents, s->prompt_embeds, r.grid_h, r.grid_w, r.frames};
    auto info = WriteCacheRecord(cache_dir_, r.id, r.hash, "synthetic", bad, r.bucket);
    ASSERT_TRUE(info.ok()) << info.status();
    r = *info;
    ASSERT_TRUE(WriteCacheIndex(cache_dir_, *index).ok());
  }
  void ExpectNamesRecord(const absl::Status& status, size_t i, const std::string& what) {
    ASSERT_FALSE(status.ok()) << "record " << i << " was trained or validated on";
    auto index = ReadCacheIndex(cache_dir_);
    ASSERT_TRUE(index.ok());
    const CacheRecordInfo& r = index->records[i];
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find(absl::StrCat("cache record ", r.id, " (", JoinPath(cache_dir_, r.file), ")")),
              std::string::npos)
        << status;
    EXPECT_NE(status.message().find(what), std::string::npos) << status;
  }

  std::string dir_, cache_dir_;
  Flux2Family family_{TinyFlux2Config(), nullptr};
};

TEST_F(CacheIntegrityTest, IndexCarriesAChecksumPerRecordThatMatchesItsBytes) {
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  for (size_t i = 0; i < cache->size(); ++i) {
    const CacheRecordInfo& r = cache->index().records[i];
    ASSERT_EQ(r.checksum.rfind("crc32c:", 0), 0u) << r.id << ": '" << r.checksum << "'";
    auto s = cache->Load(i);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(CacheSampleChecksum(s->latents, s->prompt_embeds), r.checksum);
  }
}

TEST_F(CacheIntegrityTest, BitFlippedTrainingRecordIsAnErrorNamingIt) {
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(TrainingEpoch(*cache, Job()).ok());
  FlipLowBit(JoinPath(cache_dir_, cache->index().records[5].file));
  ExpectNamesRecord(TrainingEpoch(*cache, Job()), 5, "checksum of the tensor bytes is crc32c:");
  EXPECT_TRUE(cache->Load(4).ok());  // the others still read
}

TEST_F(CacheIntegrityTest, BitFlippedHeldOutRecordFailsValidation) {
  JobConfig job = Job("validation: {every: 2, samples: 3}\n");
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(BuildValidationSet(job, family_, *cache).ok());
  auto held_out = HeldOutRecords(cache->index(), 3);
  ASSERT_TRUE(held_out.ok());
  const size_t victim = static_cast<size_t>((*held_out)[1]);
  FlipLowBit(JoinPath(cache_dir_, cache->index().records[victim].file));
  ExpectNamesRecord(BuildValidationSet(job, family_, *cache).status(), victim, "checksum");
  ASSERT_TRUE(TrainingEpoch(*cache, job).ok());  // a held-out record is never trained on
}

TEST_F(CacheIntegrityTest, AbsurdValueIsAnErrorInTrainingAndValidation) {
  // Written as the encoder would write it, checksum and all: only the value check can tell.
  at::Tensor latents = Open()->Load(7)->latents.clone();
  latents.view(-1)[3] = 1.7e38f;
  RewriteRecord(7, latents);
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  ExpectNamesRecord(TrainingEpoch(*cache, Job()), 7, "latents [6, 4] holds an absurd value at element 3: 1.7e+38");
  JobConfig separate = Job(absl::StrCat("validation: {every: 2, samples: 0, dataset: ", cache_dir_, "}\n"));
  ExpectNamesRecord(BuildValidationSet(separate, family_, *cache).status(), 7, "absurd value");
}

TEST_F(CacheIntegrityTest, NonFiniteValueIsNamedToo) {
  at::Tensor latents = Open()->Load(2)->latents.clone();
  latents.view(-1)[5] = std::numeric_limits<float>::quiet_NaN();
  RewriteRecord(2, latents);
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  ExpectNamesRecord(cache->Load(2).status(), 2, "holds a non-finite value at element 5: nan");
}

TEST_F(CacheIntegrityTest, IndexWithoutChecksumsStillOpensAndValuesAreStillChecked) {
  const std::string index_path = JoinPath(cache_dir_, "index.json");
  auto text = ReadFile(index_path);
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  for (auto& r : j["records"]) r.erase("checksum");
  ASSERT_TRUE(WriteFileAtomic(index_path, j.dump(1)).ok());
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->index().records[0].checksum.empty());
  ASSERT_TRUE(TrainingEpoch(*cache, Job()).ok());
  // Without a checksum a low-bit flip cannot be seen; a flipped exponent (value ~1e38) still is.
  auto bytes = ReadFile(JoinPath(cache_dir_, cache->index().records[1].file));
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() - 1] = 0x7e;  // the last float's sign and exponent: now ~1e38 (prompt_embeds is stored last)
  ASSERT_TRUE(WriteFileAtomic(JoinPath(cache_dir_, cache->index().records[1].file), *bytes).ok());
  ExpectNamesRecord(cache->Load(1).status(), 1, "prompt_embeds");
}

}  // namespace
}  // namespace baton

// Several datasets with repeats, caption dropout, masked loss and FLUX.2 reference images, end to end (issue 44): real
// stage_worker processes
// on loopback, held to the single-process trainer. Which records a step takes and which captions it drops depend only
// on the seed, the step and the record (core/train/data_order.h), and the masks travel to the last stage with the
// target, so 2 stages, 2 replicas (one micro-batch each: the gradients are summed in one order) and a resumed run all
// train the single process's LoRA bit for bit.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "coordinator/job_partition.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

class DatasetsTest : public ::testing::Test {
 protected:
  // The tiny model, a 12-record two-bucket cache and a second 4-record cache of another seed, and that cache again
  // with a mask on each record (white on one side of the 2 x 2 grid, gray on the other).
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("datasets"));
    test_util::WriteTinyModelAndTwoBucketCache(*dir_);
    Flux2Config c = test_util::TinyFlux2Config();
    for (const char* name : {"extra", "masked", "refs"}) {
      ASSERT_TRUE(
          WriteSyntheticCache(JoinPath(*dir_, name), c.in_channels, c.joint_attention_dim, 4, {{2, 2}}, 5, 9).ok());
    }
    const std::string masked = JoinPath(*dir_, "masked");
    auto index = ReadCacheIndex(masked);
    auto reader = CacheReader::Open(masked);
    ASSERT_TRUE(index.ok() && reader.ok());
    for (size_t i = 0; i < index->records.size(); ++i) {
      CacheSample s = *(*reader)->Load(i);
      s.loss_mask = i % 2 ? at::tensor({1.0f, 0.25f, 1.0f, 0.25f}).reshape({2, 2})
                          : at::tensor({0.5f, 0.5f, 1.0f, 1.0f}).reshape({2, 2});
      const CacheRecordInfo& r = index->records[i];
      auto info = WriteCacheRecord(masked, r.id, r.hash + "-masked", index->encoder, s);
      ASSERT_TRUE(info.ok()) << info.status();
      index->records[i] = *info;
    }
    ASSERT_TRUE(WriteCacheIndex(masked, *index).ok());
    WriteReferences(JoinPath(*dir_, "refs"));
  }
  // Reference images on the records of `cache`: one on records 0 and 1, two on 2 and 3 (two buckets).
  static void WriteReferences(const std::string& cache) {
    auto index = ReadCacheIndex(cache);
    auto reader = CacheReader::Open(cache);
    ASSERT_TRUE(index.ok() && reader.ok());
    auto gen = at::detail::createCPUGenerator(17);
    for (size_t i = 0; i < index->records.size(); ++i) {
      CacheSample s = *(*reader)->Load(i);
      s.references = at::randn({i < 2 ? 1 : 2, s.latents.size(0), s.latents.size(1)}, gen);
      const CacheRecordInfo& r = index->records[i];
      auto info = WriteCacheRecord(cache, r.id, r.hash + "-refs", index->encoder, s);
      ASSERT_TRUE(info.ok()) << info.status();
      index->records[i] = *info;
    }
    ASSERT_TRUE(WriteCacheIndex(cache, *index).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  // Two datasets, the second repeated 3 times (its records masked unless `masks` is false), captions dropped from a
  // third of the first's records and every second of the second's; or (`dropout` false) none.
  static JobConfig Job(bool dropout = true, bool masks = true, const char* second = nullptr) {
    if (second == nullptr) second = masks ? "masked" : "extra";
    auto job = ParseJobYaml(absl::StrCat(
        "model: ", JoinPath(*dir_, "model"), "\ndatasets:\n  - ", JoinPath(*dir_, "cache"),
        "\n  - {path: ", JoinPath(*dir_, second), ", repeats: 3", dropout ? ", caption_dropout: 0.5" : "", "}\n",
        dropout ? "caption_dropout: 0.34\n" : "",
        "lora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\nsteps: 3\nbatch_size: 4\nmicro_batches: 2\n"
        "seed: 5\ncheckpoint_every: 1\nreplica_exchange: coordinator\n"));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobConfig{};
  }
  static CoordinatorOptions Options(int stages, int replicas, const std::string& out, int64_t steps = 0,
                                    bool resume = false) {
    CoordinatorOptions o = test_util::LocalStagesOptions(stages, JoinPath(*dir_, out));
    o.replicas = replicas;
    o.steps = steps;
    o.resume = resume;
    return o;
  }
  static void ExpectBitwiseEqual(const std::string& a, const std::string& b) {
    auto la = test_util::LoadRunLora(JoinPath(*dir_, a)), lb = test_util::LoadRunLora(JoinPath(*dir_, b));
    ASSERT_FALSE(la.empty());
    ASSERT_EQ(la.size(), lb.size());
    for (const auto& [name, t] : la) {
      ASSERT_TRUE(lb.count(name)) << name;
      EXPECT_TRUE(at::equal(t, lb.at(name))) << name << " differs between " << a << " and " << b;
    }
  }
  // The largest difference between the LoRAs of two runs (0 when either wrote none, which the caller's bar fails).
  static double LoraMoved(const std::string& a, const std::string& b) {
    auto la = test_util::LoadRunLora(JoinPath(*dir_, a)), lb = test_util::LoadRunLora(JoinPath(*dir_, b));
    double moved = 0;
    for (const auto& [name, t] : la) {
      if (lb.count(name)) moved = std::max(moved, (t - lb.at(name)).abs().max().item<double>());
    }
    return moved;
  }
  static std::string* dir_;
};
std::string* DatasetsTest::dir_ = nullptr;

TEST_F(DatasetsTest, TwoStagesTwoReplicasAndAResumeTrainTheSingleProcessLora) {
  const JobConfig job = Job();
  ASSERT_TRUE(RunLocalTraining(job, JoinPath(*dir_, "local"), job.steps).ok());
  ASSERT_TRUE(RunCoordinator(job, Options(2, 1, "stages")).ok());
  ExpectBitwiseEqual("local", "stages");
  ASSERT_TRUE(RunCoordinator(job, Options(1, 2, "replicas")).ok());
  ExpectBitwiseEqual("local", "replicas");
  ASSERT_TRUE(RunCoordinator(job, Options(2, 1, "resumed", /*steps=*/2)).ok());
  auto resumed = RunCoordinator(job, Options(2, 1, "resumed", 0, /*resume=*/true));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, 2);
  ExpectBitwiseEqual("local", "resumed");
}

// Reference images ride with the activations through both stages (the head predicts the target's tokens only), so 2
// stages train the single process's LoRA bitwise; they change what is learned; the planner sizes the largest
// micro-batch with them: 2 samples of 4 target + 8 reference tokens and 5 text tokens.
TEST_F(DatasetsTest, ReferenceImagesTrainThroughTwoStagesAsInOneProcessAndThePlanCountsThem) {
  const JobConfig job = Job(/*dropout=*/false, /*masks=*/false, "refs");
  ASSERT_TRUE(RunLocalTraining(job, JoinPath(*dir_, "refs_local"), job.steps).ok());
  ASSERT_TRUE(RunCoordinator(job, Options(2, 1, "refs_stages")).ok());
  ExpectBitwiseEqual("refs_local", "refs_stages");
  const JobConfig plain = Job(false, false, "extra");
  ASSERT_TRUE(RunLocalTraining(plain, JoinPath(*dir_, "refs_plain"), plain.steps).ok());
  EXPECT_GT(LoraMoved("refs_plain", "refs_local"), 1e-4) << "the references changed nothing";

  auto family = OpenModel(job.model);
  ASSERT_TRUE(family.ok());
  auto cache = OpenTrainingCache(job, **family);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto popts = JobPartitionOptions(job, **cache, 2, at::kFloat, false);
  ASSERT_TRUE(popts.ok()) << popts.status();
  EXPECT_EQ(popts->tokens_per_micro_batch, (4 + 8 + 5) * 2);
  EXPECT_EQ(popts->reference_tokens_per_micro_batch, 8 * 2);
}

// `loss: {weighting: cosmap}` (issue 46): the samples' weights travel to the last stage with the target, so 2 stages
// train the single process's LoRA bitwise, and the weighting changes what is learned.
TEST_F(DatasetsTest, LossWeightingTrainsThroughTwoStagesAsInOneProcess) {
  JobConfig job = Job(/*dropout=*/false, /*masks=*/true);
  job.loss_weighting = "cosmap";
  ASSERT_TRUE(RunLocalTraining(job, JoinPath(*dir_, "weighted_local"), job.steps).ok());
  ASSERT_TRUE(RunCoordinator(job, Options(2, 1, "weighted_stages")).ok());
  ExpectBitwiseEqual("weighted_local", "weighted_stages");
  const JobConfig plain = Job(false, true);
  ASSERT_TRUE(RunLocalTraining(plain, JoinPath(*dir_, "unweighted_local"), plain.steps).ok());
  EXPECT_GT(LoraMoved("unweighted_local", "weighted_local"), 1e-5) << "the weighting changed nothing";
}

TEST_F(DatasetsTest, CaptionDropoutAndMasksEachChangeTheLoraAndAResumeWithAnotherRateIsRefused) {
  const JobConfig plain = Job(/*dropout=*/false, /*masks=*/false);
  ASSERT_TRUE(RunLocalTraining(plain, JoinPath(*dir_, "plain"), plain.steps).ok());
  ASSERT_TRUE(RunLocalTraining(Job(true, false), JoinPath(*dir_, "dropped"), plain.steps).ok());
  ASSERT_TRUE(RunLocalTraining(Job(false, true), JoinPath(*dir_, "masks"), plain.steps).ok());
  ASSERT_FALSE(test_util::LoadRunLora(JoinPath(*dir_, "plain")).empty());
  for (const char* other : {"dropped", "masks"})
    EXPECT_GT(LoraMoved("plain", other), 1e-4) << other << " changed nothing";
  // A checkpoint of the dropping run does not resume without dropout: another data, named.
  ASSERT_TRUE(RunCoordinator(Job(), Options(1, 1, "refused", /*steps=*/1)).ok());
  auto refused = RunCoordinator(plain, Options(1, 1, "refused", 0, /*resume=*/true));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("caption_dropout"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace baton

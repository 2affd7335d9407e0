// The validation set and loss (core/sample/validation.h) and the held-out records (core/train/batches.h), on a
// synthetic cache and an analytic denoiser: the figures must be exactly the mean squared targets it implies.
#include "core/sample/validation.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <set>

#include "core/model/flux2_family.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::TinyFlux2Config;

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("validation");
    const Flux2Config c = TinyFlux2Config();
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(dir_, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
    auto cache = CacheReader::Open(JoinPath(dir_, "cache"));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }
  JobConfig Job(const std::string& validation) {
    auto job = ParseJobYaml(
        absl::StrCat("model: m\ndataset: ", JoinPath(dir_, "cache"),
                     "\nsteps: 4\nbatch_size: 2\nmicro_batches: 2\nseed: 3\nvalidation: ", validation, "\n"));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobConfig();
  }
  std::string dir_;
  std::unique_ptr<CacheReader> cache_;
  Flux2Family family_{TinyFlux2Config(), nullptr};
};

// Two datasets whose files share names (001.png in each) are 24 images, not 12: the same counts hold out the same
// number of images, and every image but one may be held out.
TEST_F(ValidationTest, HeldOutImagesOfSeveralDatasetsAreTheirFoldersOwn) {
  const Flux2Config c = TinyFlux2Config();
  ASSERT_TRUE(
      WriteSyntheticCache(JoinPath(dir_, "twin"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
          .ok());
  auto both = CacheReader::OpenAll({JoinPath(dir_, "cache"), JoinPath(dir_, "twin")}, {});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ((*both)->size(), 24u);
  auto three = HeldOutRecords(**both, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->size(), 3u);
  EXPECT_TRUE(HeldOutRecords(**both, 23).ok());
  EXPECT_FALSE(HeldOutRecords(**both, 24).ok());
}

TEST_F(ValidationTest, HeldOutRecordsAreStableAndNeverTrainedOn) {
  auto a = HeldOutRecords(cache_->index(), 3), b = HeldOutRecords(cache_->index(), 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  ASSERT_EQ(a->size(), 3u);
  EXPECT_TRUE(std::is_sorted(a->begin(), a->end()));
  auto more = HeldOutRecords(cache_->index(), 4);  // a prefix of the same order: one more record, the rest kept
  ASSERT_TRUE(more.ok());
  for (int64_t i : *a) EXPECT_TRUE(std::count(more->begin(), more->end(), i)) << i;
  EXPECT_FALSE(HeldOutRecords(cache_->index(), 12).ok());  // nothing left to train on

  JobConfig job = Job("{every: 2, samples: 3}");
  EXPECT_EQ(job.validation.held_out(), 3);
  auto sampler = StepSampler::Create(cache_.get(), job, &family_);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const std::set<int64_t> held(a->begin(), a->end());
  for (int64_t step = 0; step < 20; ++step) {
    auto mbs = sampler->Step(step);
    ASSERT_TRUE(mbs.ok());
    for (const MicroBatch& mb : *mbs) {
      for (int64_t s : mb.samples) EXPECT_FALSE(held.count(s)) << "held-out record " << s << " trained at " << step;
    }
  }
}

TEST_F(ValidationTest, LossIsTheMeanSquaredErrorPerTimestep) {
  JobConfig job = Job("{every: 2, samples: 3, timesteps: [0.2, 0.9]}");
  auto set = BuildValidationSet(job, family_, *cache_);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->records, 3);
  ASSERT_EQ(set->inputs.size(), 6u);
  // The same noise for a record at both timesteps: x_t = (1 - t)·x0 + t·ε, target ε − x0.
  for (size_t r = 0; r < 3; ++r) {
    const NoisyBatch &lo = set->inputs[2 * r], &hi = set->inputs[2 * r + 1];
    EXPECT_FLOAT_EQ(lo.timestep.item<float>(), 0.2f);
    EXPECT_FLOAT_EQ(hi.timestep.item<float>(), 0.9f);
    at::Tensor eps = (hi.noisy * 0.8 - lo.noisy * 0.1) / (0.9 * 0.8 - 0.2 * 0.1);  // solves the two mixtures
    at::Tensor x0 = (lo.noisy - 0.2 * eps) / 0.8;
    EXPECT_TRUE(at::allclose(set->targets[2 * r], eps - x0, 1e-4, 1e-4));
  }
  // A denoiser predicting zero: each figure is the mean of target² over its timestep's records.
  int calls = 0;
  Denoiser zero = [&](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
    ++calls;
    EXPECT_LE(batches.size(), 4u);
    std::vector<at::Tensor> out;
    for (const NoisyBatch& b : batches) out.push_back(at::zeros_like(b.noisy));
    return out;
  };
  auto result = RunValidation(zero, *set, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(calls, 2);  // 6 evaluations, 4 per call
  for (size_t ti = 0; ti < 2; ++ti) {
    double expected = 0;
    for (size_t r = 0; r < 3; ++r) expected += set->targets[2 * r + ti].pow(2).mean().item<double>() / 3;
    EXPECT_NEAR(result->losses[ti], expected, 1e-6 * expected);
  }
  EXPECT_NEAR(result->mean, (result->losses[0] + result->losses[1]) / 2, 1e-12);
  // A perfect denoiser (it knows the target) scores 0.
  size_t next = 0;
  Denoiser oracle = [&](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < batches.size(); ++i) out.push_back(set->targets[next++]);
    return out;
  };
  auto perfect = RunValidation(oracle, *set, 4);
  ASSERT_TRUE(perfect.ok());
  EXPECT_EQ(perfect->mean, 0.0);
}

TEST_F(ValidationTest, SeparateDatasetHoldsNothingOut) {
  JobConfig job = Job(absl::StrCat("{every: 5, dataset: ", JoinPath(dir_, "cache"), ", samples: 0}"));
  EXPECT_EQ(job.validation.held_out(), 0);
  auto set = BuildValidationSet(job, family_, *cache_);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->records, 12);             // samples: 0 = every record of the validation dataset
  EXPECT_EQ(set->inputs.size(), 12u * 5);  // the default timesteps 0.1 .. 0.9
}

TEST(JobEvalKeysTest, ValidationAndSamplesParseAndRefuseNonsense) {
  auto job = ParseJobYaml(
      "model: m\ndataset: d\nsamples: {every: 10, prompts: [a dog, a cat], steps: 20, guidance: 3.5, size: [512, 256], "
      "seed: 9}\nvalidation: {every: 5, samples: 2, timesteps: [0.5]}\n",
      "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->samples.prompts, (std::vector<std::string>{"a dog", "a cat"}));
  EXPECT_EQ(job->samples.width, 512);
  EXPECT_EQ(job->samples.height, 256);
  EXPECT_EQ(job->samples.steps, 20);
  EXPECT_EQ(job->samples.seed, 9u);
  EXPECT_EQ(job->validation.timesteps, (std::vector<double>{0.5}));
  EXPECT_EQ(job->validation.held_out(), 2);
  for (const auto& [yaml, words] : std::vector<std::pair<std::string, std::string>>{
           {"samples: {every: 10, prompts: []}", "'prompts' must list"},
           {"samples: {every: 10, prompts: [x], size: [500, 512]}", "multiples of 16"},
           {"samples: {every: 0, prompts: [x]}", "'every' must be positive"},
           {"samples: {every: 1, prompts: [x], colour: red}", "unknown key 'colour'"},
           {"validation: {every: 2, timesteps: [0, 0.5]}", "(0, 1]"},
           {"validation: {every: 2, samples: 0}", "'samples' must be positive"},
       }) {
    auto bad = ParseJobYaml(absl::StrCat("model: m\ndataset: d\n", yaml, "\n"), "job.yaml");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(words), std::string::npos) << bad.status();
    EXPECT_NE(bad.status().message().find("job.yaml:3"), std::string::npos) << bad.status();
  }
}

}  // namespace
}  // namespace baton

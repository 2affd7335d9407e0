// The resume fingerprint: each result-relevant job key changes it (and is named), nothing else does — moving the
// model or the cache, recompute, threads, devices, stages' schedule, steps.
#include "core/train/job_fingerprint.h"

#include <absl/strings/str_join.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

class JobFingerprintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("fingerprint"));
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model"), 1).ok());
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model2"), 2).ok());  // same shapes, other values
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache"), c.in_channels, c.joint_attention_dim, 6, {{2, 2}}, 5, 3).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache2"), c.in_channels, c.joint_attention_dim, 6, {{2, 2}}, 5, 4).ok());
    std::filesystem::create_directories(JoinPath(*dir_, "moved/data"));
    std::filesystem::copy(JoinPath(*dir_, "model"), JoinPath(*dir_, "moved/model"),
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::create_hard_links);
    std::filesystem::copy(JoinPath(*dir_, "cache"), JoinPath(*dir_, "moved/data/cache"),
                          std::filesystem::copy_options::recursive);
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string Yaml(const std::string& model = "model", const std::string& cache = "cache") {
    return absl::StrCat("model: ", JoinPath(*dir_, model), "\ndataset: ", JoinPath(*dir_, cache),
                        "\nlora: {rank: 4, targets: attention}\noptimizer: {lr: 0.01}\nsteps: 3\nbatch_size: 4\n"
                        "micro_batches: 2\nseed: 3\n");
  }
  static JobFingerprint Fingerprint(const std::string& yaml) {
    auto job = ParseJobYaml(yaml);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    auto model = Flux2Checkpoint::Open(job->model);
    EXPECT_TRUE(model.ok()) << model.status();
    auto cache = ReadCacheIndex(job->dataset);
    EXPECT_TRUE(cache.ok()) << cache.status();
    if (!model.ok() || !cache.ok()) return {};
    auto f = MakeJobFingerprint(*job, (*model)->FilePaths(), *cache);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *f : JobFingerprint{};
  }
  static std::string* dir_;
};
std::string* JobFingerprintTest::dir_ = nullptr;

TEST_F(JobFingerprintTest, EachResultKeyChangesItAndIsNamed) {
  const JobFingerprint base = Fingerprint(Yaml());
  ASSERT_FALSE(base.empty());
  // (YAML appended to the base job — a later key overrides an earlier one —, the key the difference names)
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"optimizer: {lr: 0.02}\n", "optimizer.lr: 0.01 → 0.02"},
      {"optimizer: {lr: 0.01, weight_decay: 0.1}\n", "optimizer.weight_decay: 0 → 0.1"},
      {"optimizer: {lr: 0.01, betas: [0.8, 0.999]}\n", "optimizer.betas: 0.9, 0.999 → 0.8, 0.999"},
      {"optimizer: {lr: 0.01, eps: 1e-6}\n", "optimizer.eps"},
      {"optimizer: {lr: 0.01, clip: 0.5}\n", "optimizer.clip: 1 → 0.5"},
      {"optimizer: {lr: 0.01, warmup_steps: 5}\n", "optimizer.warmup_steps: 0 → 5"},
      // A schedule; absent from the fingerprint at constant, so older checkpoints still resume.
      {"optimizer: {lr: 0.01, schedule: cosine}\n", "optimizer.schedule: (absent) → cosine"},
      {"loss: {weighting: cosmap}\n", "loss.weighting: (absent) → cosmap"},
      // The recipes around the update; absent at their defaults (AdamW, plain LoRA, no EMA).
      {"optimizer: {lr: 0.01, type: adafactor, relative_step: false}\n", "optimizer.type: (absent) → adafactor (eps"},
      {"optimizer: {lr: 0.01, type: adamw8bit}\n", "optimizer.type: (absent) → adamw8bit (min_8bit_size 4096)"},
      {"lora: {rank: 4, targets: attention, plus_ratio: 16}\n", "lora.plus_ratio: (absent) → 16"},
      {"ema: {decay: 0.99}\n", "ema: (absent) → decay 0.99, min_decay 0"},
      {"timesteps: {sampling: logit_normal}\n", "timesteps.sampling: none → logit_normal"},
      {"timesteps: {shift: flux2_empirical}\n", "timesteps.shift: none → flux2_empirical"},
      {"timesteps: {logit_std: 2.0}\n", "timesteps.logit_std: 1 → 2"},
      // A Wan A14B expert's range; absent from the fingerprint at [0, 1], so older checkpoints still resume.
      {"timesteps: {min: 0.875}\n", "timesteps.min: (absent) → 0.875"},
      {"guidance: 4.0\n", "guidance: 3.5 → 4"},
      {"seed: 4\n", "seed: 3 → 4"},
      {"batch_size: 2\n", "batch_size: 4 → 2"},
      {"micro_batches: 4\n", "micro_batches: 2 → 4"},
      {"lora: {rank: 8, alpha: 4, targets: attention}\n", "lora.rank: 4 → 8"},
      {"lora: {rank: 4, alpha: 2, targets: attention}\n", "lora.alpha: 4 → 2"},
      {"lora: {rank: 4, targets: all-linear}\n", "lora.targets"},
      {"lora: {rank: 4, targets: attention, dropout: 0.1}\n", "lora.dropout: 0 → 0.1"},
      {"dtype: bf16\nlora_dtype: fp32\n", "dtype: fp32 → bf16"},
      {"quantize: int8\n", "quantize: none → int8"},
  };
  for (const auto& [yaml, named] : changes) {
    // ParseJobYaml refuses duplicate keys: replace the base's line of that key instead.
    const std::string key = yaml.substr(0, yaml.find(':') + 1);
    std::string text = Yaml();
    const size_t at = text.find("\n" + key);
    if (at != std::string::npos) text.erase(at + 1, text.find('\n', at + 1) - at);
    auto diffs = FingerprintDifferences(base, Fingerprint(text + yaml));
    ASSERT_EQ(diffs.size(), 1u) << yaml << absl::StrJoin(diffs, "\n");
    EXPECT_NE(diffs[0].find(named), std::string::npos) << diffs[0];
  }
  // A bf16 job's adapter math follows its dtype unless lora_dtype keeps it fp32: each is another result.
  auto math = FingerprintDifferences(Fingerprint(Yaml() + "dtype: bf16\nlora_dtype: fp32\n"),
                                     Fingerprint(Yaml() + "dtype: bf16\n"));
  ASSERT_EQ(math.size(), 1u) << absl::StrJoin(math, "\n");
  EXPECT_EQ(math[0], "lora_dtype: (absent) → bf16");
  // Other weights (same names and shapes) and another dataset: named as weights and data.
  auto weights = FingerprintDifferences(base, Fingerprint(Yaml("model2")));
  ASSERT_EQ(weights.size(), 1u);
  EXPECT_EQ(weights[0].rfind("weights: sha256:", 0), 0u) << weights[0];
  auto data = FingerprintDifferences(base, Fingerprint(Yaml("model", "cache2")));
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(data[0].rfind("data: sha256:", 0), 0u) << data[0];
}

TEST_F(JobFingerprintTest, PathsRecomputeThreadsScheduleAndStepsDoNotChangeIt) {
  const JobFingerprint base = Fingerprint(Yaml());
  ASSERT_FALSE(base.empty());
  const std::string moved = Yaml("moved/model", "moved/data/cache");
  EXPECT_EQ(Fingerprint(moved), base);
  EXPECT_EQ(Fingerprint(Yaml() + "recompute: true\nthreads: 2\nschedule: gpipe\ncheckpoint_every: 1\nname: other\n"
                                 "save_bfl: true\nmemory_per_stage: [1GB]\ndevices: [cpu]\n"),
            base);
  std::string longer = Yaml();
  longer.replace(longer.find("steps: 3"), 8, "steps: 30");
  EXPECT_EQ(Fingerprint(longer), base);
}

TEST_F(JobFingerprintTest, DifferencesListEveryKeyInBothDirections) {
  JobFingerprint was = {{"a", "1"}, {"b", "2"}, {"old", "x"}};
  JobFingerprint now = {{"a", "1"}, {"b", "3"}, {"new", "y"}};
  EXPECT_EQ(FingerprintDifferences(was, now),
            std::vector<std::string>({"b: 2 → 3", "new: (absent) → y", "old: x → (absent)"}));
  EXPECT_TRUE(FingerprintDifferences(now, now).empty());
}

TEST_F(JobFingerprintTest, WeightsThatAreNotSafetensorsAreAnErrorNotACrash) {
  const std::string junk = JoinPath(*dir_, "junk.safetensors");
  ASSERT_TRUE(WriteFileAtomic(junk, std::string(8, '\xff') + "x").ok());
  EXPECT_FALSE(WeightsIdentity({junk}).ok());
  EXPECT_FALSE(WeightsIdentity({JoinPath(*dir_, "absent.safetensors")}).ok());
}

}  // namespace
}  // namespace baton

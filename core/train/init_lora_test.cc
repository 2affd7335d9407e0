// Starting a job from a LoRA file (job key init_lora): the file's weights become the step-0 masters, and a file
// that does not fit the job's lora spec is an error naming the mismatch.
#include "core/train/init_lora.h"

#include <gtest/gtest.h>

#include "core/data/cache.h"
#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::MakeTempDir;
using test_util::TinyFlux2Config;

class InitLoraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("init_lora");
    config_ = TinyFlux2Config();
    spec_ = {4, 4.0, *ResolveLoraTargets("attention"), 0.0, 3};
    seeded_ = Adapters(spec_, 0);
    trained_ = Adapters(spec_, 7);
  }
  // Adapter parameters for `spec`; random (also B) when `seed` > 0, else the seeded init.
  std::map<std::string, at::Tensor> Adapters(const LoraSpec& spec, uint64_t seed) {
    Flux2Stage stage(config_, Flux2StageRange::Full(config_), at::TensorOptions());
    EXPECT_TRUE(AttachLora(*stage, spec).ok());
    std::map<std::string, at::Tensor> out;
    at::manual_seed(seed);
    for (auto& [name, p] : LoraParameters(*stage)) out[name] = seed > 0 ? at::randn_like(p) : p.detach().clone();
    return out;
  }
  std::string dir_;
  Flux2Config config_;
  LoraSpec spec_;
  std::map<std::string, at::Tensor> seeded_, trained_;
};

TEST_F(InitLoraTest, DiffusersFileWithAnotherAlphaGivesTheSameDeltaW) {
  LoraSpec saved = spec_;
  saved.alpha = 8.0;  // scale 2, folded into the file's B; the job's scale is 1, so its B is doubled
  std::string path = JoinPath(dir_, "init.safetensors");
  ASSERT_TRUE(SaveLoraDiffusers(path, trained_, saved).ok());
  auto init = LoadInitLora(path, spec_, seeded_);
  ASSERT_TRUE(init.ok()) << init.status();
  ASSERT_EQ(init->size(), seeded_.size());
  for (const auto& [name, t] : trained_) {
    bool is_b = name.find("lora_B") != std::string::npos;
    EXPECT_TRUE(at::equal(init->at(name), is_b ? t * 2.0 : t)) << name;
  }
}

TEST_F(InitLoraTest, BflFileRoundTrips) {
  std::string path = JoinPath(dir_, "init_bfl.safetensors");
  ASSERT_TRUE(SaveLoraBfl(path, trained_, spec_).ok());
  auto init = LoadInitLora(path, spec_, seeded_);
  ASSERT_TRUE(init.ok()) << init.status();
  for (const auto& [name, t] : trained_) EXPECT_TRUE(at::allclose(init->at(name), t, 1e-6, 1e-6)) << name;
}

TEST_F(InitLoraTest, MismatchesAreNamed) {
  LoraSpec rank2 = spec_;
  rank2.rank = 2;
  std::string path = JoinPath(dir_, "rank2.safetensors");
  ASSERT_TRUE(SaveLoraDiffusers(path, Adapters(rank2, 1), rank2).ok());
  auto wrong_rank = LoadInitLora(path, spec_, seeded_);
  ASSERT_FALSE(wrong_rank.ok());
  EXPECT_EQ(wrong_rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_rank.status().message().find("init_lora " + path), std::string::npos) << wrong_rank.status();
  EXPECT_NE(
      wrong_rank.status().message().find("transformer_blocks.0.attn.to_q has rank 2 but the job's lora.rank is 4"),
      std::string::npos)
      << wrong_rank.status();

  LoraSpec fewer = spec_;
  fewer.targets = {"to_q",       "to_k",       "to_v",       "to_out.0",        "add_q_proj",
                   "add_k_proj", "add_v_proj", "to_add_out", "to_qkv_mlp_proj", "ff.linear_in"};
  std::string other = JoinPath(dir_, "other_targets.safetensors");
  ASSERT_TRUE(SaveLoraDiffusers(other, Adapters(fewer, 1), fewer).ok());
  auto wrong_targets = LoadInitLora(other, spec_, seeded_);
  ASSERT_FALSE(wrong_targets.ok());
  const std::string message(wrong_targets.status().message());
  EXPECT_NE(message.find("adapters on modules the job's lora.targets do not select: transformer_blocks.0.ff.linear_in"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("no adapter for targeted modules: single_transformer_blocks.0.attn.to_out"), std::string::npos)
      << message;
}

TEST_F(InitLoraTest, TrainLocalStartsFromTheFile) {
  ASSERT_TRUE(WriteRandomFlux2Weights(config_, JoinPath(dir_, "model"), 1).ok());
  ASSERT_TRUE(
      WriteSyntheticCache(JoinPath(dir_, "cache"), config_.in_channels, config_.joint_attention_dim, 4, {{2, 2}}, 5, 3)
          .ok());
  std::string path = JoinPath(dir_, "init.safetensors");
  ASSERT_TRUE(SaveLoraDiffusers(path, trained_, spec_).ok());
  // lr 1e-9: Adam's first step moves each weight by at most lr, so the saved LoRA is the step-0 weights ± 1e-9.
  auto job = ParseJobYaml(absl::StrCat("model: ", JoinPath(dir_, "model"), "\ndataset: ", JoinPath(dir_, "cache"),
                                       "\nlora: {rank: 4, targets: attention}\ninit_lora: ", path,
                                       "\noptimizer: {lr: 1.0e-9}\nsteps: 1\nbatch_size: 2\nseed: 3\n"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->init_lora, path);
  auto no_init = *job;
  no_init.init_lora.clear();
  EXPECT_NE(JobHash(*job), JobHash(no_init));
  auto result = RunLocalTraining(*job, JoinPath(dir_, "out"), 1);
  ASSERT_TRUE(result.ok()) << result.status();
  auto saved = LoadAllSafetensors(JoinPath(dir_, "out/lora.safetensors"));
  ASSERT_TRUE(saved.ok());
  ASSERT_EQ(saved->size(), trained_.size());
  for (const auto& [name, t] : trained_) {
    EXPECT_LE((saved->at("transformer." + name) - t).abs().max().item<double>(), 2e-9) << name;
  }
}

}  // namespace
}  // namespace baton

#include "core/model/wan_model.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <nlohmann/json.hpp>

#include "core/keys/wan_keys.h"
#include "core/lora/lora.h"
#include "core/model/wan_family.h"
#include "core/model/wan_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/testing/tiny_wan.h"
#include "core/util/files.h"

namespace baton {
namespace {

WanConfig TinyWan(bool i2v_21 = false) {
  WanConfig c = test_util::TinyWanConfig(3);
  if (i2v_21) {
    c.in_channels = 12;
    c.image_dim = 8;
    c.added_kv_proj_dim = 24;
  }
  return c;
}

TensorMap TinyInputs(const WanConfig& c, int64_t batch, bool per_token = false) {
  at::manual_seed(7);
  TensorMap in;
  in["hidden_states"] = at::randn({batch, c.in_channels, 2, 4, 6});
  in["timestep"] = per_token ? 1000 * at::rand({batch, 2 * 2 * 3}) : 1000 * at::rand({batch});
  in["encoder_hidden_states"] = at::randn({batch, c.has_image_branch() ? 512 : 5, c.text_dim});
  if (c.has_image_branch()) in["encoder_hidden_states_image"] = at::randn({batch, 3, c.image_dim});
  return in;
}

std::unique_ptr<WanFamily> TinyModel(const WanConfig& c, const std::string& name) {
  const std::string dir = test_util::MakeTempDir(name);
  EXPECT_TRUE(WriteRandomWanWeights(c, dir, 3).ok());
  auto model = OpenWanModel(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

TensorMap Merged(const ShellOutputs& s) {
  TensorMap k = s.constants;
  k.insert(s.tables.begin(), s.tables.end());
  return k;
}

TEST(WanConfigTest, ParameterCountsMatchTheModules) {
  for (bool i2v : {false, true}) {
    const WanConfig c = TinyWan(i2v);
    int64_t total = 0;
    for (const auto& [name, shape] : WanParameterShapes(c)) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      total += n;
    }
    EXPECT_EQ(total, c.TotalParams()) << "i2v " << i2v;
  }
  // The released sizes (reference table): Wan 2.1 T2V 1.3B and 14B, TI2V-5B.
  auto billions = [](const std::string& json) { return ParseWanConfig(json)->TotalParams() / 1e9; };
  EXPECT_NEAR(billions(R"({"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30})"), 1.42, 0.01);
  EXPECT_NEAR(billions(R"({"num_attention_heads": 40})"), 14.29, 0.01);
  EXPECT_NEAR(billions(R"({"num_attention_heads": 24, "ffn_dim": 14336, "num_layers": 30, "in_channels": 48,
                           "out_channels": 48})"),
              5.00, 0.01);
}

TEST(WanConfigTest, OriginalConfigConverts) {
  auto c = ParseWanConfig(
      R"({"_class_name": "WanModel", "model_type": "i2v", "dim": 5120, "num_heads": 40, "in_dim": 36, "out_dim": 16,
          "ffn_dim": 13824, "num_layers": 40})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention_head_dim, 128);
  EXPECT_EQ(c->image_dim, 1280);
  EXPECT_EQ(c->added_kv_proj_dim, 5120);
  EXPECT_EQ(c->rope_t_dim(), 44);
  EXPECT_EQ(c->rope_h_dim(), 42);
  EXPECT_FALSE(ParseWanConfig(R"({"dim": 100, "num_heads": 3})").ok());
  EXPECT_FALSE(ParseWanConfig(R"({"num_layers": "many"})").ok());
}

TEST(WanKeysTest, EveryParameterRoundTripsThroughTheOriginalNames) {
  for (const auto& [name, shape] : WanParameterShapes(TinyWan(true))) {
    auto original = WanDiffusersToOriginal(name);
    ASSERT_TRUE(original.has_value()) << name;
    EXPECT_EQ(WanOriginalToDiffusers("model.diffusion_model." + *original), name);
  }
  EXPECT_EQ(*WanDiffusersToOriginal("blocks.3.norm2.weight"), "blocks.3.norm3.weight");  // the swap
  EXPECT_EQ(*WanDiffusersToOriginal("blocks.0.attn2.add_k_proj.bias"), "blocks.0.cross_attn.k_img.bias");
  EXPECT_EQ(*WanDiffusersToOriginal("scale_shift_table"), "head.modulation");
  EXPECT_EQ(*WanDiffusersToOriginal("blocks.1.scale_shift_table"), "blocks.1.modulation");
}

// The pipeline split is exact: stages [0, k) and [k, n) chained give the full stage's output bit for bit.
TEST(WanModelTest, ChainedStagesEqualTheFullStage) {
  for (bool i2v : {false, true}) {
    const WanConfig c = TinyWan(i2v);
    auto model = TinyModel(c, i2v ? "wan-split-i2v" : "wan-split");
    auto shell = model->BuildShell(at::kFloat, at::kCPU);
    ASSERT_TRUE(shell.ok()) << shell.status();
    auto s = (*shell)->Run(TinyInputs(c, 2), at::kFloat);
    ASSERT_TRUE(s.ok()) << s.status();
    const TensorMap k = Merged(*s);
    auto full = model->BuildStage({0, 3, true, true}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
    ASSERT_TRUE(full.ok()) << full.status();
    const at::Tensor expected = (*full)->Forward(s->inputs, k).at("output");
    EXPECT_EQ(expected.sizes().vec(), (std::vector<int64_t>{2, 4, 2, 4, 6}));
    for (int64_t split = 0; split <= 3; ++split) {
      auto a = model->BuildStage({0, split, true, false}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
      auto b = model->BuildStage({split, 3, false, true}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
      ASSERT_TRUE(a.ok() && b.ok());
      TensorMap mid = (*a)->Forward(s->inputs, k);
      ASSERT_TRUE(model->CheckWire(WireKind::kActivation, mid, at::kFloat).ok());
      EXPECT_TRUE(at::equal((*b)->Forward(mid, k).at("output"), expected)) << "split at " << split;
    }
  }
}

// ForwardCheckpointed + BackwardFromCheckpoints give bitwise the LoRA gradients of Forward + backward, for
// every recompute setting, per-token (TI2V) timesteps included.
TEST(WanModelTest, CheckpointedBackwardIsBitwiseEqual) {
  const WanConfig c = TinyWan();
  auto model = TinyModel(c, "wan-ckpt");
  auto shell = model->BuildShell(at::kFloat, at::kCPU);
  ASSERT_TRUE(shell.ok());
  for (bool per_token : {false, true}) {
    auto s = (*shell)->Run(TinyInputs(c, 2, per_token), at::kFloat);
    ASSERT_TRUE(s.ok()) << s.status();
    const TensorMap k = Merged(*s);
    LoraSpec spec;
    spec.rank = 4;
    spec.targets = *model->LoraTargets("all-linear");
    auto grads = [&](int64_t recompute) {
      auto stage = model->BuildStage({0, 3, true, true}, at::kFloat, at::kCPU, &spec, true, WeightQuant::kNone);
      EXPECT_TRUE(stage.ok());
      for (auto& [name, p] : LoraParameters((*stage)->module())) {
        if (name.find("lora_B") != std::string::npos) p.data().normal_(0, 0.1, at::detail::getDefaultCPUGenerator());
      }
      auto seed = [](const TensorMap& out) {
        at::Tensor loss = out.at("output").pow(2).mean();
        return std::make_pair(std::vector<at::Tensor>{loss}, std::vector<at::Tensor>{});
      };
      if (recompute == -2) {
        auto [roots, g] = seed((*stage)->Forward(s->inputs, k));
        torch::autograd::backward(roots, g);
      } else {
        std::vector<TensorMap> checkpoints;
        (*stage)->ForwardCheckpointed(s->inputs, k, &checkpoints, recompute);
        (*stage)->BackwardFromCheckpoints(std::move(checkpoints), k, seed, recompute);
      }
      return LoraGradients((*stage)->module());
    };
    at::manual_seed(1);
    const auto expected = grads(-2);
    EXPECT_EQ(expected.size(), 3u * 10 * 2);  // 3 blocks x (8 attention + 2 ffn) x (A, B)
    for (int64_t recompute : {StageModel::kAllBlocks, int64_t{0}, int64_t{1}, int64_t{2}}) {
      at::manual_seed(1);
      const auto got = grads(recompute);
      ASSERT_EQ(got.size(), expected.size());
      for (const auto& [name, g] : expected) {
        EXPECT_TRUE(at::equal(got.at(name), g)) << name << " recompute " << recompute << " per_token " << per_token;
      }
    }
  }
}

TEST(WanModelTest, ShellRejectsInputsTheModelCannotTake) {
  const WanConfig c = TinyWan(/*i2v_21=*/true);
  auto model = TinyModel(c, "wan-bad-inputs");
  auto shell = model->BuildShell(at::kFloat, at::kCPU);
  ASSERT_TRUE(shell.ok());
  auto message = [&](TensorMap in) {
    auto s = (*shell)->Run(in, at::kFloat);
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  TensorMap in = TinyInputs(c, 1);
  EXPECT_EQ(message(in), "ok");
  TensorMap no_image = in;
  no_image.erase("encoder_hidden_states_image");
  EXPECT_NE(message(no_image).find("encoder_hidden_states_image is required"), std::string::npos);
  TensorMap short_text = in;
  short_text["encoder_hidden_states"] = at::randn({1, 7, c.text_dim});
  EXPECT_NE(message(short_text).find("512 tokens"), std::string::npos);
  TensorMap odd = in;
  odd["hidden_states"] = at::randn({1, c.in_channels, 2, 5, 6});
  EXPECT_NE(message(odd).find("not a multiple of the patch size"), std::string::npos);
  TensorMap per_token = in;
  per_token["timestep"] = at::rand({1, 5});
  EXPECT_NE(message(per_token).find("one entry per patch"), std::string::npos);
}

TEST(WanWeightsTest, PipelineFolderExposesBothExperts) {
  const std::string dir = test_util::MakeTempDir("wan-a14b");
  WanConfig c = TinyWan();
  ASSERT_TRUE(WriteRandomWanWeights(c, JoinPath(dir, "transformer"), 1).ok());
  ASSERT_TRUE(WriteRandomWanWeights(c, JoinPath(dir, "transformer_2"), 2, at::kFloat, 4096).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "model_index.json"), R"({"boundary_ratio": 0.875})").ok());
  auto experts = DescribeWanExperts(dir);
  ASSERT_TRUE(experts.ok());
  EXPECT_TRUE(experts->two_experts);
  EXPECT_DOUBLE_EQ(experts->boundary_ratio, 0.875);
  auto high = WanCheckpoint::Open(dir);
  auto low = WanCheckpoint::Open(dir, "", WanExpert::kLowNoise);
  ASSERT_TRUE(high.ok() && low.ok()) << low.status();
  EXPECT_GT((*low)->FilePaths().size(), 1u);  // sharded
  auto a = (*high)->Load("blocks.1.attn1.to_q.weight", at::kFloat);
  auto b = (*low)->Load("blocks.1.attn1.to_q.weight", at::kFloat);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(at::equal(*a, *b));
  EXPECT_TRUE(at::equal(*b, RandomWanStateDict(c, 2).at("blocks.1.attn1.to_q.weight")));
  auto missing = WanCheckpoint::Open(JoinPath(dir, "transformer"), "", WanExpert::kLowNoise);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(IsWanModel(dir));
}

// An original checkpoint of model_type i2v without img_emb weights is Wan 2.2 I2V: no image branch.
TEST(WanWeightsTest, OriginalI2vWithoutImageWeightsHasNoImageBranch) {
  const std::string dir = test_util::MakeTempDir("wan-orig-i2v");
  WanConfig c = TinyWan();
  c.in_channels = 12;
  std::map<std::string, at::Tensor> original;
  for (auto& [name, t] : RandomWanStateDict(c, 4)) original["diffusion_model." + *WanDiffusersToOriginal(name)] = t;
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "diffusion_pytorch_model.safetensors"), original).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"),
                              R"({"_class_name": "WanModel", "model_type": "i2v", "dim": 24, "num_heads": 2,
                                  "in_dim": 12, "out_dim": 4, "ffn_dim": 32, "num_layers": 3, "text_dim": 16})")
                  .ok());
  auto model = OpenWanModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->checkpoint().is_original());
  EXPECT_FALSE((*model)->checkpoint().config().has_image_branch());
  auto stage = (*model)->BuildStage({0, 3, true, true}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
  EXPECT_TRUE(stage.ok()) << stage.status();
}

TEST(WanWeightsTest, MismatchedWeightsNameTheKeys) {
  WanConfig c = TinyWan();
  const std::string dir = test_util::MakeTempDir("wan-mismatch");
  ASSERT_TRUE(WriteRandomWanWeights(c, dir, 1).ok());
  c.ffn_dim = 40;
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), WanConfigToJson(c)).ok());
  auto model = OpenWanModel(dir);
  ASSERT_TRUE(model.ok());
  auto stage = (*model)->BuildStage({0, 1, true, false}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
  ASSERT_FALSE(stage.ok());
  EXPECT_NE(std::string(stage.status().message()).find("blocks.0.ffn.net.0.proj.weight (expected"), std::string::npos)
      << stage.status();
}

}  // namespace
}  // namespace baton

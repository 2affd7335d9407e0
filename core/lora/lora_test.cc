#include "core/lora/lora.h"

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/model/flux2_model.h"
#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::MakeTempDir;
using test_util::TinyFlux2Config;

TEST(LoraTargetsTest, PresetsSelectTheRightLinears) {
  auto attention = *ResolveLoraTargets("attention");
  EXPECT_TRUE(LoraTargetMatches("transformer_blocks.0.attn.to_q", attention));
  EXPECT_TRUE(LoraTargetMatches("transformer_blocks.0.attn.to_out.0", attention));
  EXPECT_TRUE(LoraTargetMatches("single_transformer_blocks.3.attn.to_out", attention));
  EXPECT_TRUE(LoraTargetMatches("single_transformer_blocks.3.attn.to_qkv_mlp_proj", attention));
  EXPECT_FALSE(LoraTargetMatches("transformer_blocks.0.ff.linear_in", attention));
  EXPECT_FALSE(LoraTargetMatches("x_embedder", attention));
  auto all = *ResolveLoraTargets("all-linear");
  EXPECT_TRUE(LoraTargetMatches("transformer_blocks.0.ff_context.linear_out", all));
  EXPECT_FALSE(LoraTargetMatches("double_stream_modulation_img.linear", all));
  auto custom = *ResolveLoraTargets("to_q, x_embedder");
  EXPECT_TRUE(LoraTargetMatches("x_embedder", custom));
  EXPECT_FALSE(LoraTargetMatches("transformer_blocks.0.attn.add_q_proj", custom));
  EXPECT_FALSE(ResolveLoraTargets(" , ").ok());
}

class LoraFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = TinyFlux2Config();
    stage_ = Flux2Stage(config_, Flux2StageRange::Full(config_), at::TensorOptions());
    spec_ = {3, 6.0, *ResolveLoraTargets("all-linear"), 0.0, 42};
    ASSERT_TRUE(AttachLora(*stage_, spec_).ok());
    at::NoGradGuard no_grad;
    at::manual_seed(1);
    for (auto& [name, p] : LoraParameters(*stage_)) p.copy_(at::randn_like(p));
    dir_ = MakeTempDir("lora");
  }
  Flux2Config config_;
  Flux2Stage stage_{nullptr};
  LoraSpec spec_;
  std::string dir_;
};

TEST_F(LoraFileTest, DiffusersFormatRoundTrip) {
  auto params = LoraParameters(*stage_);
  std::string path = JoinPath(dir_, "lora.safetensors");
  ASSERT_TRUE(SaveLoraDiffusers(path, params, spec_).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->Contains("transformer.transformer_blocks.0.attn.to_q.lora_A.weight"));
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  auto meta = nlohmann::json::parse((*file)->metadata().at("lora_adapter_metadata"));
  // alpha/r (2) is folded into B, so the file means the same to a reader that ignores the metadata.
  EXPECT_EQ(meta["transformer.r"], 3);
  EXPECT_EQ(meta["transformer.lora_alpha"], 3);
  auto stored = LoadAllSafetensors(path);
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(at::equal(stored->at("transformer.transformer_blocks.1.attn.to_v.lora_B.weight"),
                        params.at("transformer_blocks.1.attn.to_v.lora_B.weight") * 2.0));
  auto loaded = LoadLoraFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->at("transformer_blocks.1.attn.to_v").scale, 1.0);
  auto back = LoraWeightsToParameters(*loaded, 2.0);
  ASSERT_EQ(back.size(), params.size());
  for (const auto& [k, v] : params) EXPECT_TRUE(at::equal(back.at(k), v)) << k;  // ×2 then ÷2 is exact
  // And the loaded weights go straight back into a fresh model.
  Flux2Stage fresh(config_, Flux2StageRange::Full(config_), at::TensorOptions());
  ASSERT_TRUE(AttachLora(*fresh, spec_).ok());
  EXPECT_TRUE(AssignLoraParameters(*fresh, back).ok());
}

TEST_F(LoraFileTest, BflFormatFusesQkvAndRoundTripsExactly) {
  auto params = LoraParameters(*stage_);
  std::string path = JoinPath(dir_, "lora_bfl.safetensors");
  ASSERT_TRUE(SaveLoraBfl(path, params, spec_).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto entry = (*file)->Entry("diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight");
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->shape, (std::vector<int64_t>{9, config_.inner_dim()}));  // 3 adapters of rank 3
  // alpha/r is folded into lora_B: diffusers' FLUX.2 converter rejects leftover ".alpha" keys.
  for (const auto& key : (*file)->Keys()) EXPECT_FALSE(absl::EndsWith(key, ".alpha")) << key;
  EXPECT_FALSE((*file)->Contains("diffusion_model.double_blocks.0.img_attn.q.lora_A.weight"));
  auto loaded = LoadLoraFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->at("single_transformer_blocks.2.attn.to_out").scale, 1.0);
  auto back = LoraWeightsToParameters(*loaded, 2.0);
  ASSERT_EQ(back.size(), params.size());
  for (const auto& [k, v] : params) {
    ASSERT_TRUE(back.count(k)) << k;
    EXPECT_TRUE(at::allclose(back.at(k), v, 1e-6, 1e-6)) << k;
  }
}

TEST_F(LoraFileTest, OldBflFilesWithAlphaStillLoad) {
  // Baton before the alpha fold wrote B unscaled plus ".alpha" = (alpha/r)·rows(A).
  auto params = LoraParameters(*stage_);
  std::string path = JoinPath(dir_, "new_bfl.safetensors");
  ASSERT_TRUE(SaveLoraBfl(path, params, spec_).ok());
  auto tensors = LoadAllSafetensors(path);
  ASSERT_TRUE(tensors.ok());
  std::map<std::string, at::Tensor> old_layout;
  for (const auto& [key, t] : *tensors) {
    if (!absl::EndsWith(key, ".lora_B.weight")) continue;
    std::string base = key.substr(0, key.size() - strlen(".lora_B.weight"));
    at::Tensor a = tensors->at(base + ".lora_A.weight");
    old_layout[base + ".lora_A.weight"] = a;
    old_layout[key] = t / 2.0;
    old_layout[base + ".alpha"] = at::scalar_tensor(2.0 * static_cast<double>(a.size(0)));
  }
  std::string old_path = JoinPath(dir_, "old_bfl.safetensors");
  ASSERT_TRUE(WriteSafetensors(old_path, old_layout).ok());
  auto loaded = LoadLoraFile(old_path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->at("transformer_blocks.0.attn.to_q").scale, 2.0);
  auto back = LoraWeightsToParameters(*loaded, 2.0);
  ASSERT_EQ(back.size(), params.size());
  for (const auto& [k, v] : params) EXPECT_TRUE(at::allclose(back.at(k), v, 1e-6, 1e-6)) << k;
}

// Fuzz findings (tests/fuzz/regressions/lora): these files aborted the process (0-d tensors, a vector alpha) or
// loaded adapters no model can use (rank 0: an infinite scale; A and B of different ranks).
TEST_F(LoraFileTest, MalformedAdaptersAreErrorsNamingTheModule) {
  auto load = [&](const std::map<std::string, at::Tensor>& tensors) {
    std::string path = JoinPath(dir_, "bad.safetensors");
    EXPECT_TRUE(WriteSafetensors(path, tensors).ok());
    auto loaded = LoadLoraFile(path);
    return loaded.ok() ? std::string("loaded") : std::string(loaded.status().message());
  };
  const std::string peft = "transformer_blocks.0.attn.to_q", bfl = "diffusion_model.double_blocks.0.img_attn.proj";
  EXPECT_NE(load({{peft + ".lora_A.weight", at::ones({2, 16})}, {peft + ".lora_B.weight", at::ones({16, 3})}})
                .find("LoRA module " + peft + " has lora_A [2, 16] and lora_B [16, 3]"),
            std::string::npos);
  EXPECT_NE(load({{peft + ".lora_A.weight", at::ones({})}, {peft + ".lora_B.weight", at::ones({})}})
                .find("has lora_A [] and lora_B []"),
            std::string::npos);
  EXPECT_NE(load({{peft + ".lora_A.weight", at::ones({0, 16})}, {peft + ".lora_B.weight", at::ones({16, 0})}})
                .find("(want [r, in] and [out, r], r >= 1)"),
            std::string::npos);
  EXPECT_NE(load({{bfl + ".lora_A.weight", at::ones({2, 16})},
                  {bfl + ".lora_B.weight", at::ones({16, 2})},
                  {bfl + ".alpha", at::ones({2})}})
                .find("double_blocks.0.img_attn.proj.alpha must be one finite number, is 2 values of shape [2]"),
            std::string::npos);
}

TEST_F(LoraFileTest, PeftMetadataWithoutPrefixAndAlphaPattern) {
  // transformer.save_lora_adapter writes unprefixed keys and a LoraConfig without the "transformer." prefix.
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : LoraParameters(*stage_)) tensors[name] = t.detach().clone();
  std::string path = JoinPath(dir_, "adapter.safetensors");
  nlohmann::json meta = {{"r", 3}, {"lora_alpha", 12.0}, {"alpha_pattern", {{"attn.to_out", 1.5}}}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"lora_adapter_metadata", meta.dump()}}).ok());
  auto loaded = LoadLoraFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->at("transformer_blocks.0.attn.to_q").scale, 4.0);
  EXPECT_DOUBLE_EQ(loaded->at("single_transformer_blocks.1.attn.to_out").scale, 0.5);
  EXPECT_DOUBLE_EQ(loaded->at("transformer_blocks.0.attn.to_out.0").scale, 4.0);
}

TEST_F(LoraFileTest, AttachLoraWeightsGivesTheSameDeltaWTimesTheMultiplier) {
  std::string path = JoinPath(dir_, "lora.safetensors");
  ASSERT_TRUE(SaveLoraBfl(path, LoraParameters(*stage_), spec_).ok());
  auto loaded = LoadLoraFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Flux2Stage fresh(config_, Flux2StageRange::Full(config_), at::TensorOptions());
  auto attached = AttachLoraWeights(*fresh, *loaded, 0.5);
  ASSERT_TRUE(attached.ok()) << attached.status();
  auto original = NamedLoraLinears(*stage_);
  auto applied = NamedLoraLinears(*fresh);
  ASSERT_EQ(original.size(), applied.size());
  int compared = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    auto& o = original[i].second;
    auto& a = applied[i].second;
    ASSERT_EQ(o->has_lora(), a->has_lora()) << original[i].first;
    if (!o->has_lora()) continue;
    at::Tensor expected = at::matmul(o->lora_B(), o->lora_A()) * (o->scale() * 0.5);
    EXPECT_TRUE(at::allclose(at::matmul(a->lora_B(), a->lora_A()) * a->scale(), expected, 1e-5, 1e-6))
        << original[i].first;
    ++compared;
  }
  EXPECT_EQ(compared, *attached);
  std::map<std::string, LoraWeights> stray = {{"transformer_blocks.9.attn.to_q", loaded->begin()->second}};
  auto bad = AttachLoraWeights(*fresh, stray);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("transformer_blocks.9.attn.to_q (no such Linear in the model)"),
            std::string::npos)
      << bad.status();
}

TEST_F(LoraFileTest, FusedQkvWithSharedDownProjectionGivesTheSameDeltaW) {
  // A BFL file from another trainer: one rank-r adapter on the fused qkv (B not block-diagonal).
  const int64_t d = config_.inner_dim(), r = 2;
  at::manual_seed(5);
  at::Tensor a = at::randn({r, d}), b = at::randn({3 * d, r});
  std::string path = JoinPath(dir_, "foreign.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"diffusion_model.double_blocks.1.txt_attn.qkv.lora_A.weight", a},
                                      {"diffusion_model.double_blocks.1.txt_attn.qkv.lora_B.weight", b},
                                      {"diffusion_model.double_blocks.1.txt_attn.qkv.alpha", at::scalar_tensor(4.0)}})
                  .ok());
  auto loaded = LoadLoraFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  at::Tensor fused_delta = at::matmul(b, a) * 2.0;  // alpha / r = 2
  const char* names[] = {"transformer_blocks.1.attn.add_q_proj", "transformer_blocks.1.attn.add_k_proj",
                         "transformer_blocks.1.attn.add_v_proj"};
  for (int i = 0; i < 3; ++i) {
    const LoraWeights& w = loaded->at(names[i]);
    EXPECT_TRUE(at::allclose(at::matmul(w.B, w.A) * w.scale, fused_delta.narrow(0, i * d, d), 1e-5, 1e-5)) << names[i];
  }
}

TEST_F(LoraFileTest, AssignRejectsMismatchesByName) {
  auto params = LoraParameters(*stage_);
  params.erase(params.begin());
  params["transformer_blocks.0.attn.to_q.lora_B.weight"] = at::zeros({1, 1});
  absl::Status s = AssignLoraParameters(*stage_, params);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(missing)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("transformer_blocks.0.attn.to_q.lora_B.weight (expected [16, 3], got [1, 1])"),
            std::string::npos)
      << s;
}

TEST(LoraInitTest, AdapterInitDependsOnNameNotOnStageSplit) {
  Flux2Config c = TinyFlux2Config();
  LoraSpec spec{4, 4.0, *ResolveLoraTargets("attention"), 0.0, 9};
  Flux2Stage full(c, Flux2StageRange::Full(c), at::TensorOptions());
  Flux2Stage tail(c, Flux2StageRange{3, c.num_blocks(), false, true}, at::TensorOptions());
  ASSERT_TRUE(AttachLora(*full, spec).ok());
  ASSERT_TRUE(AttachLora(*tail, spec).ok());
  auto full_params = LoraParameters(*full);
  for (const auto& [name, p] : LoraParameters(*tail)) EXPECT_TRUE(at::equal(p, full_params.at(name))) << name;
  // Kaiming-uniform bound 1/sqrt(in) for A; B starts at zero.
  at::Tensor a = full_params.at("transformer_blocks.0.attn.to_q.lora_A.weight");
  EXPECT_LE(a.abs().max().item<double>(), 1.0 / std::sqrt(16.0));
  EXPECT_EQ(full_params.at("transformer_blocks.0.attn.to_q.lora_B.weight").abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace baton

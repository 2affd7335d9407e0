#include "core/lora/wan_lora_names.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// Every module a Wan LoRA may target, in diffusers naming, with its original name.
const std::vector<std::pair<std::string, std::string>> kPairs = {
    {"blocks.0.attn1.to_q", "blocks.0.self_attn.q"},
    {"blocks.0.attn1.to_k", "blocks.0.self_attn.k"},
    {"blocks.0.attn1.to_v", "blocks.0.self_attn.v"},
    {"blocks.0.attn1.to_out.0", "blocks.0.self_attn.o"},
    {"blocks.11.attn2.to_q", "blocks.11.cross_attn.q"},
    {"blocks.11.attn2.to_k", "blocks.11.cross_attn.k"},
    {"blocks.11.attn2.to_v", "blocks.11.cross_attn.v"},
    {"blocks.11.attn2.to_out.0", "blocks.11.cross_attn.o"},
    {"blocks.2.attn2.add_k_proj", "blocks.2.cross_attn.k_img"},
    {"blocks.2.attn2.add_v_proj", "blocks.2.cross_attn.v_img"},
    {"blocks.39.ffn.net.0.proj", "blocks.39.ffn.0"},
    {"blocks.39.ffn.net.2", "blocks.39.ffn.2"},
    {"condition_embedder.text_embedder.linear_1", "text_embedding.0"},
    {"condition_embedder.text_embedder.linear_2", "text_embedding.2"},
    {"condition_embedder.time_embedder.linear_1", "time_embedding.0"},
    {"condition_embedder.time_embedder.linear_2", "time_embedding.2"},
    {"condition_embedder.time_proj", "time_projection.1"},
    {"condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"},
    {"condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"},
    {"proj_out", "head.head"},
    {"patch_embedding", "patch_embedding"},
};

TEST(WanLoraNamesTest, ModuleNamesMapBothWays) {
  for (const auto& [diffusers, original] : kPairs) {
    EXPECT_EQ(WanDiffusersToOriginalModule(diffusers), original) << diffusers;
    EXPECT_EQ(WanOriginalToDiffusersModule(original), diffusers) << original;
    std::string kohya = original;
    std::replace(kohya.begin(), kohya.end(), '.', '_');
    EXPECT_EQ(WanKohyaToOriginalModule(kohya), original) << kohya;
  }
  for (const char* bad : {"blocks.0.attn1.norm_q", "blocks.x.attn1.to_q", "blocks.0.self_attn.q", "head.modulation",
                          "transformer_blocks.0.attn.to_q", "blocks.-1.attn1.to_q"}) {
    EXPECT_FALSE(WanDiffusersToOriginalModule(bad).has_value()) << bad;
  }
  EXPECT_FALSE(WanOriginalToDiffusersModule("blocks.0.attn1.to_q").has_value());
  EXPECT_FALSE(WanKohyaToOriginalModule("blocks_0_self_attn_norm_q").has_value());
}

// Random adapters on every module (rank 2; patch_embedding with Conv3d shapes), scale 1.
std::map<std::string, WanLoraAdapter> RandomAdapters() {
  at::manual_seed(5);
  std::map<std::string, WanLoraAdapter> out;
  for (const auto& [module, original] : kPairs) {
    if (module == "patch_embedding") {
      out[module] = {at::randn({2, 4, 1, 2, 2}), at::randn({6, 2, 1, 1, 1}), 1.0};
    } else {
      out[module] = {at::randn({2, 5}), at::randn({7, 2}), 1.0};
    }
  }
  return out;
}

void ExpectSameAdapters(const std::map<std::string, WanLoraAdapter>& got,
                        const std::map<std::string, WanLoraAdapter>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [module, w] : want) {
    ASSERT_TRUE(got.count(module)) << module;
    const auto& g = got.at(module);
    EXPECT_TRUE(at::equal(g.A, w.A)) << module;
    EXPECT_TRUE(at::allclose(g.B * g.scale, w.B * w.scale)) << module;
  }
}

TEST(WanLoraNamesTest, StateDictsRoundTripThroughBothNamings) {
  const auto adapters = RandomAdapters();
  auto diffusers = WanLoraToDiffusersStateDict(adapters);
  ASSERT_TRUE(diffusers.ok()) << diffusers.status();
  EXPECT_TRUE(diffusers->count("transformer.blocks.0.attn1.to_q.lora_A.weight"));
  auto original = WanLoraToOriginalStateDict(adapters);
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_TRUE(original->count("diffusion_model.blocks.2.cross_attn.k_img.lora_B.weight"));
  EXPECT_TRUE(original->count("diffusion_model.head.head.lora_A.weight"));
  EXPECT_EQ(original->size(), 2 * kPairs.size());
  for (const auto* sd : {&*diffusers, &*original}) {
    auto parsed = ParseWanLora(*sd);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ExpectSameAdapters(*parsed, adapters);
  }
  // Baton's internal PEFT names: no "transformer." prefix.
  std::map<std::string, at::Tensor> bare;
  for (const auto& [key, t] : *diffusers) bare[key.substr(strlen("transformer."))] = t;
  auto parsed = ParseWanLora(bare);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameAdapters(*parsed, adapters);
}

TEST(WanLoraNamesTest, KohyaAlphaIsFoldedIntoB) {
  at::manual_seed(9);
  at::Tensor down = at::randn({4, 5}), up = at::randn({7, 4});
  std::map<std::string, at::Tensor> kohya = {{"lora_unet_blocks_3_cross_attn_k_img.lora_down.weight", down},
                                             {"lora_unet_blocks_3_cross_attn_k_img.lora_up.weight", up},
                                             {"lora_unet_blocks_3_cross_attn_k_img.alpha", at::tensor(2.0)}};
  auto parsed = ParseWanLora(kohya);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->count("blocks.3.attn2.add_k_proj"));
  EXPECT_DOUBLE_EQ(parsed->at("blocks.3.attn2.add_k_proj").scale, 0.5);
  auto original = WanLoraToOriginalStateDict(*parsed);
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_EQ(original->size(), 2u);  // no ".alpha": the scale lives in lora_B
  EXPECT_TRUE(at::allclose(original->at("diffusion_model.blocks.3.cross_attn.k_img.lora_B.weight"), up * 0.5));
  // Original naming with lora_down/lora_up and an alpha reads the same.
  std::map<std::string, at::Tensor> comfy = {{"diffusion_model.blocks.3.cross_attn.k_img.lora_down.weight", down},
                                             {"diffusion_model.blocks.3.cross_attn.k_img.lora_up.weight", up},
                                             {"diffusion_model.blocks.3.cross_attn.k_img.alpha", at::tensor(2.0)}};
  auto parsed_comfy = ParseWanLora(comfy);
  ASSERT_TRUE(parsed_comfy.ok()) << parsed_comfy.status();
  ExpectSameAdapters(*parsed_comfy, *parsed);
}

TEST(WanLoraNamesTest, BadFilesAreErrorsThatNameTheKeys) {
  at::Tensor a = at::zeros({2, 5}), b = at::zeros({7, 2});
  auto unknown = ParseWanLora({{"diffusion_model.blocks.0.self_attn.q.lora_A.weight", a},
                               {"diffusion_model.blocks.0.self_attn.q.lora_B.weight", b},
                               {"diffusion_model.blocks.0.self_attn.norm_q.lora_A.weight", a}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("blocks.0.self_attn.norm_q.lora_A.weight"), std::string::npos)
      << unknown.status();
  auto mixed = ParseWanLora({{"diffusion_model.blocks.0.self_attn.q.lora_A.weight", a},
                             {"transformer.blocks.0.attn1.to_q.lora_B.weight", b}});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(std::string(mixed.status().message()).find("mix namings"), std::string::npos) << mixed.status();
  auto half = ParseWanLora({{"transformer.blocks.0.attn1.to_q.lora_A.weight", a}});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(std::string(half.status().message()).find("blocks.0.attn1.to_q lacks lora_A or lora_B"), std::string::npos);
  auto shapes = ParseWanLora({{"transformer.blocks.0.attn1.to_q.lora_A.weight", a},
                              {"transformer.blocks.0.attn1.to_q.lora_B.weight", at::zeros({7, 3})}});
  ASSERT_FALSE(shapes.ok());
  EXPECT_FALSE(ParseWanLora({}).ok());
}

TEST(WanLoraNamesTest, FamilyDetection) {
  EXPECT_TRUE(LooksLikeWanLora({"transformer.blocks.0.attn1.to_q.lora_A.weight"}));
  EXPECT_TRUE(LooksLikeWanLora({"diffusion_model.blocks.0.ffn.0.lora_A.weight"}));
  EXPECT_TRUE(LooksLikeWanLora({"lora_unet_blocks_0_self_attn_q.lora_down.weight"}));
  EXPECT_FALSE(LooksLikeWanLora({"transformer.transformer_blocks.0.attn.to_q.lora_A.weight"}));
  EXPECT_FALSE(LooksLikeWanLora({"diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight"}));
}

}  // namespace
}  // namespace baton

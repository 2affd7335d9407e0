// CLIP vision config: Wan 2.1's published image_encoder/config.json, a whole CLIPConfig, transformers' defaults for
// absent fields, rejections, and the round trip through ClipVisionConfigToJson.
#include "core/encode/clip_vision_config.h"

#include <gtest/gtest.h>

#include <string>

namespace baton {
namespace {

// Wan-AI/Wan2.1-I2V-14B-480P-Diffusers image_encoder/config.json (transformers 4.x save_pretrained).
constexpr char kWanImageEncoderJson[] = R"({
  "_name_or_path": "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
  "architectures": ["CLIPVisionModel"],
  "attention_dropout": 0.0, "dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1280, "image_size": 224,
  "initializer_factor": 1.0, "initializer_range": 0.02, "intermediate_size": 5120, "layer_norm_eps": 1e-05,
  "model_type": "clip_vision_model", "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 32,
  "patch_size": 14, "projection_dim": 1024, "torch_dtype": "float32", "transformers_version": "4.48.0.dev0"
})";

TEST(ClipVisionConfigTest, ParsesWansImageEncoder) {
  auto c = ParseClipVisionConfig(kWanImageEncoderJson, "image_encoder/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const ClipVisionConfig h14 = ClipVitH14Config();
  EXPECT_EQ(c->hidden_size, h14.hidden_size);
  EXPECT_EQ(c->intermediate_size, h14.intermediate_size);
  EXPECT_EQ(c->num_hidden_layers, h14.num_hidden_layers);
  EXPECT_EQ(c->num_attention_heads, h14.num_attention_heads);
  EXPECT_EQ(c->patch_size, h14.patch_size);
  EXPECT_EQ(c->image_size, h14.image_size);
  EXPECT_EQ(c->hidden_act, "gelu");
  EXPECT_EQ(*c->activation(), ClipActivation::kGeluErf);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-5);
  EXPECT_EQ(c->num_positions(), 257);  // [B, 257, 1280]
  EXPECT_EQ(c->head_dim(), 80);
}

TEST(ClipVisionConfigTest, DefaultsAndWholeClipConfigs) {
  auto bare = ParseClipVisionConfig("{}", "x");  // CLIPVisionConfig(): ViT-B/32
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->hidden_size, 768);
  EXPECT_EQ(bare->patch_size, 32);
  EXPECT_EQ(bare->num_positions(), 50);
  EXPECT_EQ(*bare->activation(), ClipActivation::kQuickGelu);
  auto clip = ParseClipVisionConfig(
      R"({"model_type": "clip", "text_config": {"hidden_size": 7},
          "vision_config": {"hidden_size": 64, "num_attention_heads": 2, "patch_size": [8, 8], "image_size": 32}})",
      "clip/config.json");
  ASSERT_TRUE(clip.ok()) << clip.status();
  EXPECT_EQ(clip->hidden_size, 64);
  EXPECT_EQ(clip->patch_size, 8);
  EXPECT_EQ(clip->num_positions(), 17);
  auto no_vision = ParseClipVisionConfig(R"({"model_type": "clip"})", "x");
  ASSERT_TRUE(no_vision.ok()) << no_vision.status();
  EXPECT_EQ(no_vision->hidden_size, 768);
}

TEST(ClipVisionConfigTest, RejectsWhatItCannotRun) {
  struct Case {
    const char* json;
    const char* says;
  } cases[] = {
      {R"({"model_type": "siglip_vision_model"})", "siglip_vision_model"},
      {R"({"hidden_act": "banana"})", "banana"},
      {R"({"hidden_size": 30, "num_attention_heads": 4})", "num_attention_heads"},
      {R"({"image_size": [224, 160]})", "square"},
      {R"({"patch_size": 300})", "patch_size"},
      {R"({"hidden_size": "big"})", "hidden_size"},
      {R"({"model_type": "clip", "vision_config": 3})", "vision_config"},
      {R"(not json)", "JSON"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseClipVisionConfig(c.json, "cfg.json");
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos) << parsed.status();
  }
}

TEST(ClipVisionConfigTest, RoundTrips) {
  ClipVisionConfig c = TinyClipVisionConfig();
  c.hidden_act = "quick_gelu";
  c.layer_norm_eps = 1e-6;
  auto back = ParseClipVisionConfig(ClipVisionConfigToJson(c), "tiny");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->hidden_size, c.hidden_size);
  EXPECT_EQ(back->intermediate_size, c.intermediate_size);
  EXPECT_EQ(back->num_hidden_layers, c.num_hidden_layers);
  EXPECT_EQ(back->patch_size, c.patch_size);
  EXPECT_EQ(back->projection_dim, c.projection_dim);
  EXPECT_EQ(back->hidden_act, "quick_gelu");
  EXPECT_DOUBLE_EQ(back->layer_norm_eps, 1e-6);
}

}  // namespace
}  // namespace baton

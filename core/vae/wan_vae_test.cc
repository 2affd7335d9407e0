#include "core/vae/wan_vae.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include <map>

#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "core/vae/wan_vae_random.h"

namespace baton {
namespace {

using test_util::MakeTempDir;

at::Tensor RandomPixels(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::rand(shape, gen, at::kFloat) * 2 - 1;
}

std::unique_ptr<WanVaeEncoder> LoadTinyWanVae(const std::string& name) {
  const std::string dir = JoinPath(MakeTempDir(name), "vae");
  EXPECT_TRUE(WriteRandomWanVaeEncoder(TinyWanVaeConfig(), dir, 7).ok());
  auto vae = WanVaeEncoder::Load(dir, at::kFloat, at::kCPU);
  EXPECT_TRUE(vae.ok()) << vae.status();
  return vae.ok() ? std::move(*vae) : nullptr;
}

TEST(WanVaeConfigTest, ParsesDiffusersConfigAndRoundTrips) {
  auto c = ParseWanVaeConfig(R"({"_class_name": "AutoencoderKLWan", "_diffusers_version": "0.33.0",
    "attn_scales": [], "base_dim": 96, "dim_mult": [1, 2, 4, 4], "dropout": 0.0, "num_res_blocks": 2,
    "temperal_downsample": [false, true, true], "z_dim": 16})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->base_dim, 96);
  EXPECT_EQ(c->latents_std.size(), 16u);  // Wan 2.1 defaults
  EXPECT_EQ(c->spatial_factor(), 8);
  EXPECT_EQ(c->temporal_factor(), 4);
  EXPECT_EQ(c->LatentFrames(81), 21);
  auto back = ParseWanVaeConfig(WanVaeConfigToJson(TinyWanVaeConfig()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dim_mult, TinyWanVaeConfig().dim_mult);
  EXPECT_EQ(back->latents_mean, TinyWanVaeConfig().latents_mean);
}

TEST(WanVaeConfigTest, Wan22ConfigHasSixteenfoldPatchifiedStructure) {
  WanVaeConfig c;
  c.base_dim = 160;
  c.z_dim = 48;
  c.is_residual = true;
  c.patch_size = 2;
  c.in_channels = c.out_channels = 12;
  c.latents_mean.assign(48, 0.0);
  c.latents_std.assign(48, 1.0);
  auto parsed = ParseWanVaeConfig(WanVaeConfigToJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->is_residual);
  EXPECT_EQ(parsed->spatial_factor(), 16);
  EXPECT_EQ(parsed->pixel_channels(), 3);
}

TEST(WanVaeConfigTest, UnsupportedAndBadConfigsAreNamed) {
  auto patch = ParseWanVaeConfig(R"({"is_residual": true, "patch_size": 2, "in_channels": 3})");
  EXPECT_TRUE(absl::StrContains(patch.status().message(), "patch_size")) << patch.status();
  auto attn = ParseWanVaeConfig(R"({"attn_scales": [0.5]})");
  EXPECT_EQ(attn.status().code(), absl::StatusCode::kUnimplemented);
  auto flux = ParseWanVaeConfig(R"({"_class_name": "AutoencoderKLFlux2"})");
  EXPECT_TRUE(absl::StrContains(flux.status().message(), "AutoencoderKLFlux2")) << flux.status();
  auto stats = ParseWanVaeConfig(R"({"z_dim": 4})");  // 16 default statistics for 4 channels
  EXPECT_TRUE(absl::StrContains(stats.status().message(), "latents_mean")) << stats.status();
  auto type = ParseWanVaeConfig(R"({"base_dim": "wide"})");
  EXPECT_TRUE(absl::StrContains(type.status().message(), "base_dim")) << type.status();
}

TEST(WanVaeTest, ShapesFollowChunkedEncode) {
  auto vae = LoadTinyWanVae("wan_vae_shapes");
  ASSERT_NE(vae, nullptr);
  for (int64_t f : {1, 5, 9, 13}) {
    auto mean = vae->EncodeMean(RandomPixels({2, 3, f, 32, 48}, f));
    ASSERT_TRUE(mean.ok()) << mean.status();
    EXPECT_EQ(mean->sizes(), (std::vector<int64_t>{2, 4, 1 + (f - 1) / 4, 4, 6})) << f;
  }
  auto image = vae->EncodeMean(RandomPixels({1, 3, 16, 16}, 1));  // 4-D = one frame
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->sizes(), (std::vector<int64_t>{1, 4, 1, 2, 2}));
}

TEST(WanVaeTest, EncodingIsCausalInTime) {
  // Latent frame k depends only on pixel frames up to 4k: the first 5 frames of a 9-frame clip give the first two
  // latent frames of the whole clip, and changing frame 8 leaves them untouched.
  auto vae = LoadTinyWanVae("wan_vae_causal");
  ASSERT_NE(vae, nullptr);
  at::Tensor clip = RandomPixels({1, 3, 9, 16, 16}, 3);
  auto whole = vae->EncodeMean(clip);
  auto head = vae->EncodeMean(clip.narrow(2, 0, 5));
  ASSERT_TRUE(whole.ok() && head.ok());
  EXPECT_TRUE(at::allclose(whole->narrow(2, 0, 2), *head, 1e-5, 1e-6));
  at::Tensor changed = clip.clone();
  changed.select(2, 8).fill_(0.5);
  auto other = vae->EncodeMean(changed);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(at::allclose(other->narrow(2, 0, 2), whole->narrow(2, 0, 2), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(other->narrow(2, 2, 1), whole->narrow(2, 2, 1), 1e-3, 1e-4));
}

TEST(WanVaeTest, NormalizeUsesLatentsMeanAndStd) {
  auto vae = LoadTinyWanVae("wan_vae_norm");
  ASSERT_NE(vae, nullptr);
  at::Tensor z = at::ones({1, 4, 2, 1, 1});
  at::Tensor n = vae->Normalize(z);
  const auto& c = vae->config();
  for (int64_t ch = 0; ch < 4; ++ch) {
    EXPECT_NEAR(n[0][ch][1][0][0].item<float>(), (1.0 - c.latents_mean[ch]) / c.latents_std[ch], 1e-6);
  }
}

TEST(WanVaeTest, BadInputsAndWeightsAreClearErrors) {
  auto vae = LoadTinyWanVae("wan_vae_errors");
  ASSERT_NE(vae, nullptr);
  auto frames = vae->EncodeMean(RandomPixels({1, 3, 4, 16, 16}, 1));
  EXPECT_TRUE(absl::StrContains(frames.status().message(), "4k+1")) << frames.status();
  auto size = vae->EncodeMean(RandomPixels({1, 3, 1, 20, 16}, 1));
  EXPECT_TRUE(absl::StrContains(size.status().message(), "multiples of 8")) << size.status();
  auto channels = vae->EncodeMean(RandomPixels({1, 4, 1, 16, 16}, 1));
  EXPECT_EQ(channels.status().code(), absl::StatusCode::kInvalidArgument);

  // A checkpoint missing a tensor and holding a stray encoder tensor: both named in one error.
  const std::string dir = JoinPath(MakeTempDir("wan_vae_keys"), "vae");
  ASSERT_TRUE(WriteRandomWanVaeEncoder(TinyWanVaeConfig(), dir, 1).ok());
  const std::string file = JoinPath(dir, "diffusion_pytorch_model.safetensors");
  auto tensors = LoadAllSafetensors(file);
  ASSERT_TRUE(tensors.ok());
  tensors->erase("encoder.conv_in.bias");
  (*tensors)["encoder.extra.weight"] = at::zeros({2});
  ASSERT_TRUE(WriteSafetensors(file, *tensors).ok());
  auto bad = WanVaeEncoder::Load(dir, at::kFloat, at::kCPU);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "missing keys: encoder.conv_in.bias")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "unexpected keys: encoder.extra.weight")) << bad.status();
}

}  // namespace
}  // namespace baton

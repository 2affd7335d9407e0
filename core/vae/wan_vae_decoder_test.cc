#include "core/vae/wan_vae_decoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include <map>

#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "core/vae/wan_vae.h"
#include "core/vae/wan_vae_random.h"

namespace baton {
namespace {

using test_util::MakeTempDir;

at::Tensor RandomLatents(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::kFloat);
}

// Wan 2.2's TI2V-5B structure in small: residual up blocks with the DupUp3D shortcut, 2×2 unpatchify (12 output
// channels), 16× spatial, a separate decoder_base_dim.
WanVaeConfig TinyWan22Config() {
  WanVaeConfig c = TinyWanVaeConfig();
  c.is_residual = true;
  c.patch_size = 2;
  c.in_channels = c.out_channels = 12;
  c.scale_factor_spatial = 16;
  c.decoder_base_dim = 12;
  return c;
}

std::unique_ptr<WanVaeDecoder> LoadTiny(const std::string& name, const WanVaeConfig& config = TinyWanVaeConfig()) {
  const std::string dir = JoinPath(MakeTempDir(name), "vae");
  EXPECT_TRUE(WriteRandomWanVae(config, dir, 7).ok());
  auto vae = WanVaeDecoder::Load(dir, at::kFloat, at::kCPU);
  EXPECT_TRUE(vae.ok()) << vae.status();
  return vae.ok() ? std::move(*vae) : nullptr;
}

TEST(WanVaeDecoderTest, ShapesAndFrameCounts) {
  auto vae = LoadTiny("wan_vae_decoder_shapes");
  ASSERT_NE(vae, nullptr);
  EXPECT_EQ(vae->PixelFrames(21), 81);
  for (int64_t f : {1, 2, 3}) {
    auto pixels = vae->Decode(RandomLatents({2, 4, f, 3, 5}, f));
    ASSERT_TRUE(pixels.ok()) << pixels.status();
    EXPECT_EQ(pixels->sizes(), (std::vector<int64_t>{2, 3, 4 * (f - 1) + 1, 24, 40})) << f;
    EXPECT_EQ(pixels->scalar_type(), at::kFloat);
    EXPECT_LE(pixels->abs().max().item<float>(), 1.0f);
  }
}

TEST(WanVaeDecoderTest, Wan22StructureDecodesSixteenfold) {
  auto vae = LoadTiny("wan_vae_decoder_22", TinyWan22Config());
  ASSERT_NE(vae, nullptr);
  for (int64_t f : {1, 3}) {
    auto pixels = vae->Decode(RandomLatents({1, 4, f, 2, 3}, f));
    ASSERT_TRUE(pixels.ok()) << pixels.status();
    EXPECT_EQ(pixels->sizes(), (std::vector<int64_t>{1, 3, 4 * (f - 1) + 1, 32, 48})) << f;
  }
}

TEST(WanVaeDecoderTest, DecodingIsCausalInTime) {
  // Pixel frames 0..4k depend only on latent frames up to k: the first two latents of three decode to the first 5
  // frames of the whole, and changing latent 2 leaves them untouched.
  auto vae = LoadTiny("wan_vae_decoder_causal");
  ASSERT_NE(vae, nullptr);
  at::Tensor z = RandomLatents({1, 4, 3, 2, 2}, 3);
  auto whole = vae->Decode(z);
  auto head = vae->Decode(z.narrow(2, 0, 2));
  ASSERT_TRUE(whole.ok() && head.ok());
  EXPECT_TRUE(at::allclose(whole->narrow(2, 0, 5), *head, 1e-4, 2e-5));  // conv over 3 or 2 frames: rounding
  at::Tensor changed = z.clone();
  changed.select(2, 2).fill_(0.5);
  auto other = vae->Decode(changed);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(at::allclose(other->narrow(2, 0, 5), whole->narrow(2, 0, 5), 1e-4, 2e-5));
  EXPECT_FALSE(at::allclose(other->narrow(2, 5, 4), whole->narrow(2, 5, 4), 1e-3, 1e-4));
}

TEST(WanVaeDecoderTest, DecodeUnnormalisesWithLatentsMeanAndStd) {
  auto vae = LoadTiny("wan_vae_decoder_norm");
  ASSERT_NE(vae, nullptr);
  const auto& c = vae->config();
  at::Tensor n = at::ones({1, 4, 1, 1, 1});
  at::Tensor z = vae->Denormalize(n);
  for (int64_t ch = 0; ch < 4; ++ch) {
    EXPECT_NEAR(z[0][ch][0][0][0].item<float>(), c.latents_std[ch] + c.latents_mean[ch], 1e-6);
  }
  at::Tensor latents = RandomLatents({1, 4, 2, 2, 3}, 5);
  auto a = vae->Decode(latents);
  auto b = vae->DecodeRaw(vae->Denormalize(latents));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(*a, *b));
  auto raw = vae->DecodeRaw(latents);
  ASSERT_TRUE(raw.ok());
  EXPECT_FALSE(at::allclose(*raw, *a));
}

TEST(WanVaeDecoderTest, BadInputsAreClearErrors) {
  auto vae = LoadTiny("wan_vae_decoder_errors");
  ASSERT_NE(vae, nullptr);
  auto channels = vae->Decode(RandomLatents({1, 5, 1, 2, 2}, 1));
  EXPECT_EQ(channels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(channels.status().message(), "z_dim 4")) << channels.status();
  auto four_d = vae->Decode(RandomLatents({1, 4, 2, 2}, 1));
  EXPECT_EQ(four_d.status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = vae->Decode(RandomLatents({1, 4, 0, 2, 2}, 1));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto ints = vae->Decode(at::zeros({1, 4, 1, 2, 2}, at::kLong));
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vae->Decode(at::Tensor()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WanVaeDecoderTest, RandomFolderIsCompleteAndItsEncoderHalfUnchanged) {
  const std::string full = JoinPath(MakeTempDir("wan_vae_random_full"), "vae");
  const std::string half = JoinPath(MakeTempDir("wan_vae_random_half"), "vae");
  ASSERT_TRUE(WriteRandomWanVae(TinyWanVaeConfig(), full, 3).ok());
  ASSERT_TRUE(WriteRandomWanVaeEncoder(TinyWanVaeConfig(), half, 3).ok());
  auto all = LoadAllSafetensors(JoinPath(full, "diffusion_pytorch_model.safetensors"));
  auto enc = LoadAllSafetensors(JoinPath(half, "diffusion_pytorch_model.safetensors"));
  ASSERT_TRUE(all.ok() && enc.ok());
  size_t decoder_keys = 0;
  for (const auto& [name, t] : *all) {
    if (IsWanVaeDecoderKey(name)) {
      ++decoder_keys;
    } else {
      ASSERT_TRUE(enc->count(name)) << name;
      EXPECT_TRUE(at::equal(t, enc->at(name))) << name;
    }
  }
  EXPECT_EQ(all->size(), enc->size() + decoder_keys);
  EXPECT_TRUE(all->count("post_quant_conv.weight"));
  EXPECT_TRUE(all->count("decoder.up_blocks.0.upsamplers.0.time_conv.weight"));
  EXPECT_TRUE(all->count("decoder.up_blocks.2.upsamplers.0.resample.1.weight"));
  // Both halves load from the one folder.
  EXPECT_TRUE(WanVaeEncoder::Load(full, at::kFloat, at::kCPU).ok());
  EXPECT_TRUE(WanVaeDecoder::Load(full, at::kFloat, at::kCPU).ok());
  // The encoder-only folder has no decoder: every decoder tensor is reported missing, in one error.
  auto missing = WanVaeDecoder::Load(half, at::kFloat, at::kCPU);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "missing keys: ")) << missing.status();
  for (const char* key : {"post_quant_conv.weight", "decoder.conv_in.weight", "decoder.conv_out.bias"}) {
    EXPECT_TRUE(absl::StrContains(missing.status().message(), key)) << key;
  }
  EXPECT_FALSE(absl::StrContains(missing.status().message(), "encoder.")) << missing.status();
}

TEST(WanVaeDecoderTest, MissingMisShapedAndStrayTensorsAreNamedTogether) {
  const std::string dir = JoinPath(MakeTempDir("wan_vae_decoder_keys"), "vae");
  ASSERT_TRUE(WriteRandomWanVae(TinyWanVaeConfig(), dir, 1).ok());
  const std::string file = JoinPath(dir, "diffusion_pytorch_model.safetensors");
  auto tensors = LoadAllSafetensors(file);
  ASSERT_TRUE(tensors.ok());
  tensors->erase("decoder.conv_in.bias");
  (*tensors)["decoder.norm_out.gamma"] = at::ones({3, 1, 1, 1});
  (*tensors)["decoder.extra.weight"] = at::zeros({2});
  (*tensors)["encoder.conv_in.bias"] = at::zeros({7});  // the encoder half is not the decoder's business
  ASSERT_TRUE(WriteSafetensors(file, *tensors).ok());
  auto bad = WanVaeDecoder::Load(dir, at::kFloat, at::kCPU);
  ASSERT_FALSE(bad.ok());
  const std::string message(bad.status().message());
  EXPECT_TRUE(absl::StrContains(message, "missing keys: decoder.conv_in.bias")) << message;
  EXPECT_TRUE(absl::StrContains(message, "decoder.norm_out.gamma")) << message;
  EXPECT_TRUE(absl::StrContains(message, "unexpected keys: decoder.extra.weight")) << message;
  EXPECT_FALSE(absl::StrContains(message, "encoder.conv_in")) << message;
}

TEST(WanVaeDecoderTest, BadDecoderConfigsAreNamed) {
  WanVaeConfig odd = TinyWan22Config();
  odd.out_channels = 6;  // not a multiple of patch² = 4
  auto status = ValidateWanVaeDecoderConfig(odd);
  EXPECT_TRUE(absl::StrContains(status.message(), "out_channels")) << status;
  EXPECT_FALSE(WriteRandomWanVae(odd, JoinPath(MakeTempDir("wan_vae_bad_cfg"), "vae"), 0).ok());
}

}  // namespace
}  // namespace baton

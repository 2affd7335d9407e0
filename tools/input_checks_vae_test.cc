// `baton vae-encode`'s pixel check asks the VAE it guards for the multiple H and W must have: one rule, stated once
// (Flux2VaeConfig::pixel_multiple), so the client refuses exactly what the VAE would.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "core/util/files.h"
#include "core/vae/flux2_vae.h"
#include "tools/input_checks.h"

namespace baton {
namespace {

// A tiny FLUX.2-structured VAE with 3 levels: downsampling factor 4, so H and W must be multiples of 8.
Flux2VaeConfig Factor4VaeConfig() {
  Flux2VaeConfig c = TinyFlux2VaeConfig();
  c.block_out_channels = {16, 32, 32};
  c.down_block_types.resize(3);
  c.up_block_types.resize(3);
  return c;
}

class VaePixelCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = JoinPath(::testing::TempDir(), "vae_pixel_check_XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
    ASSERT_TRUE(Factor4VaeConfig().Validate().ok());
    ASSERT_TRUE(WriteRandomFlux2Vae(Factor4VaeConfig(), dir_, /*seed=*/3).ok());
    auto vae = Flux2VaeEncoder::Load(dir_, at::kFloat, at::kCPU);
    ASSERT_TRUE(vae.ok()) << vae.status();
    vae_ = std::move(*vae);
  }
  void TearDown() override { RemoveAll(dir_).IgnoreError(); }

  static std::map<std::string, at::Tensor> Pixels(int64_t h, int64_t w) {
    return {{"pixels", at::rand({1, 3, h, w}, at::detail::createCPUGenerator(7)) * 2 - 1}};
  }

  std::string dir_;
  std::unique_ptr<Flux2VaeEncoder> vae_;
};

TEST_F(VaePixelCheckTest, TheVaeNamesItsMultiple) {
  EXPECT_EQ(vae_->config().downsample_factor(), 4);
  EXPECT_EQ(vae_->config().pixel_multiple(), 8);
  EXPECT_EQ(Flux2VaeConfig().pixel_multiple(), 16) << "FLUX.2's own VAE: 8x downsampling";
}

TEST_F(VaePixelCheckTest, AcceptsWhatTheVaeEncodes) {
  // 32x24: multiples of 8, not of 16. The client check passes and the VAE encodes it.
  const auto inputs = Pixels(32, 24);
  absl::Status check = CheckPixels(inputs, vae_->config().pixel_multiple(), "px.safetensors");
  EXPECT_TRUE(check.ok()) << check;
  auto mean = vae_->EncodeMean(inputs.at("pixels"));
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(mean->sizes(), (std::vector<int64_t>{1, 32, 8, 6}));
}

TEST_F(VaePixelCheckTest, RefusesWhatTheVaeRefusesNamingTheMultiple) {
  // 32x20: 20 is not a multiple of 8. Both refuse; the client says which multiple and why.
  const auto inputs = Pixels(32, 20);
  absl::Status check = CheckPixels(inputs, vae_->config().pixel_multiple(), "px.safetensors");
  EXPECT_EQ(check.code(), absl::StatusCode::kInvalidArgument) << check;
  EXPECT_NE(check.message().find("px.safetensors: pixels must be floating point [B, 3, H, W] with B > 0 and H, W "
                                 "positive multiples of 8 (this VAE's 2 x downsampling factor) (it is Float "
                                 "[1, 3, 32, 20])"),
            std::string::npos)
      << check;
  EXPECT_EQ(vae_->EncodeMean(inputs.at("pixels")).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton

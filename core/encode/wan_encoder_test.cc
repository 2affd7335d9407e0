#include "core/encode/wan_encoder.h"

#include <gtest/gtest.h>

#include "core/image/image.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

constexpr int64_t kWanTextLen = 10;

// One tiny Wan 2.1 pipeline folder (random weights in the real layouts) for the whole suite.
class WanEncoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("wan_encoder"));
    ASSERT_TRUE(WriteTinyWanPipeline(Pipeline(), 4).ok());
  }
  static void TearDownTestSuite() {
    (void)RemoveAll(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Pipeline() { return JoinPath(*dir_, "pipeline"); }

  static std::unique_ptr<WanSampleEncoder> Open(int64_t max_sequence_length = kWanTextLen) {
    WanEncoderOptions options;
    options.max_sequence_length = max_sequence_length;
    auto encoder = WanSampleEncoder::Open(Pipeline(), options);
    EXPECT_TRUE(encoder.ok()) << encoder.status();
    return encoder.ok() ? std::move(*encoder) : nullptr;
  }

  // A clip [1, 3, frames, h, w] in [-1, 1], different for each seed.
  static at::Tensor Clip(int64_t frames, int64_t h, int64_t w, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    return at::rand({1, 3, frames, h, w}, gen, at::kFloat) * 2 - 1;
  }

  static std::string* dir_;
};
std::string* WanEncoderTest::dir_ = nullptr;

TEST_F(WanEncoderTest, ClipLatentsHaveTheVaeShapeAndAreDeterministic) {
  auto encoder = Open();
  ASSERT_NE(encoder, nullptr);
  EXPECT_TRUE(encoder->encodes_video());
  const WanVaeConfig& vae = encoder->vae().config();
  const at::Tensor clip = Clip(5, 16, 24, 1);
  auto a = encoder->EncodeVideo(clip);
  ASSERT_TRUE(a.ok()) << a.status();
  // [C, F', H/8, W/8]: 5 frames → 1 + 4 / temporal_factor latent frames.
  EXPECT_EQ(a->sizes(), (std::vector<int64_t>{encoder->latent_channels(), vae.LatentFrames(5),
                                              16 / vae.spatial_factor(), 24 / vae.spatial_factor()}));
  EXPECT_EQ(encoder->latent_channels(), vae.z_dim);
  EXPECT_EQ(a->scalar_type(), at::kFloat);
  EXPECT_TRUE(a->device().is_cpu());
  EXPECT_TRUE(at::isfinite(*a).all().item<bool>());
  auto b = encoder->EncodeVideo(clip);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(at::equal(*a, *b)) << "one clip, two encodings";
  auto other = encoder->EncodeVideo(Clip(5, 16, 24, 2));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(at::equal(*a, *other));
}

TEST_F(WanEncoderTest, AnImageIsAOneFrameClip) {
  auto encoder = Open();
  ASSERT_NE(encoder, nullptr);
  Image image(16, 8);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>(i * 37 % 256);
  auto latents = encoder->EncodeImage(image);
  ASSERT_TRUE(latents.ok()) << latents.status();
  EXPECT_EQ(latents->sizes(), (std::vector<int64_t>{encoder->latent_channels(), 1, 1, 2}));
  auto as_clip = encoder->EncodeVideo(ImageToPixels(image).unsqueeze(2));
  ASSERT_TRUE(as_clip.ok()) << as_clip.status();
  EXPECT_TRUE(at::equal(*latents, *as_clip));
}

TEST_F(WanEncoderTest, BadClipsAreRefusedNamingTheExpectedShape) {
  auto encoder = Open();
  ASSERT_NE(encoder, nullptr);
  auto four_d = encoder->EncodeVideo(at::zeros({3, 1, 16, 16}));
  ASSERT_FALSE(four_d.ok());
  EXPECT_EQ(four_d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(four_d.status().message().find("[1, 3, F, H, W], got [3, 1, 16, 16]"), std::string::npos)
      << four_d.status();
  auto batch_of_two = encoder->EncodeVideo(at::zeros({2, 3, 1, 16, 16}));
  EXPECT_EQ(batch_of_two.status().code(), absl::StatusCode::kInvalidArgument) << batch_of_two.status();
  auto four_frames = encoder->EncodeVideo(at::zeros({1, 3, 4, 16, 16}));
  ASSERT_FALSE(four_frames.ok());
  EXPECT_NE(four_frames.status().message().find("4k+1"), std::string::npos) << four_frames.status();
  auto off_grid = encoder->EncodeVideo(at::zeros({1, 3, 1, 12, 16}));
  ASSERT_FALSE(off_grid.ok());
  EXPECT_NE(off_grid.status().message().find("multiples of 8"), std::string::npos) << off_grid.status();
}

TEST_F(WanEncoderTest, TextEmbeddingsAreMaxLengthRowsZeroAfterTheRealTokens) {
  auto encoder = Open();
  ASSERT_NE(encoder, nullptr);
  auto a = encoder->EncodeText("a cat");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sizes(), (std::vector<int64_t>{kWanTextLen, encoder->text_dim()}));
  EXPECT_EQ(encoder->text_dim(), encoder->text_encoder().config().d_model);
  auto ids = BuildWanPromptIds(encoder->tokenizer(), "a cat", kWanTextLen);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GT(ids->length, 0);
  ASSERT_LT(ids->length, kWanTextLen);
  EXPECT_GT(a->slice(0, 0, ids->length).abs().sum().item<double>(), 0);
  EXPECT_EQ(a->slice(0, ids->length).abs().sum().item<double>(), 0) << "padded rows must be zero";
  auto b = encoder->EncodeText("a cat");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(at::equal(*a, *b));
  auto other = encoder->EncodeText("a dog");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(at::equal(*a, *other));
}

TEST_F(WanEncoderTest, OpenRefusesALengthWithoutRoomForTheTemplateAndAMissingPart) {
  auto tiny = WanSampleEncoder::Open(Pipeline(), WanEncoderOptions{at::kFloat, at::kCPU, 0});
  EXPECT_FALSE(tiny.ok()) << "max_sequence_length 0 has no room for </s>";
  const std::string dir = test_util::MakeTempDir("wan_encoder_partial");
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "text_encoder")).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "tokenizer")).ok());
  auto partial = WanSampleEncoder::Open(dir, {});
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(partial.status().message().find("no vae/"), std::string::npos) << partial.status();
  (void)RemoveAll(dir);
}

TEST_F(WanEncoderTest, IdentityFollowsTheLengthAndTheFolderKindIsRecognised) {
  auto a = Open();
  auto same = Open();
  auto longer = Open(kWanTextLen + 2);
  ASSERT_TRUE(a && same && longer);
  EXPECT_EQ(a->identity(), same->identity());
  EXPECT_NE(a->identity(), longer->identity());
  EXPECT_EQ(a->identity().rfind("wan:", 0), 0u) << a->identity();

  EXPECT_TRUE(IsWanPipelineFolder(Pipeline()));
  const std::string empty = test_util::MakeTempDir("wan_encoder_empty");
  EXPECT_FALSE(IsWanPipelineFolder(empty));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(empty, "model_index.json"), R"({"_class_name": "Flux2Pipeline"})").ok());
  EXPECT_FALSE(IsWanPipelineFolder(empty));
  ASSERT_TRUE(MakeDirs(JoinPath(empty, "transformer")).ok());
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(empty, "transformer/config.json"), R"({"_class_name": "WanTransformer3DModel"})").ok());
  EXPECT_FALSE(IsWanPipelineFolder(empty)) << "model_index.json decides when present";
  ASSERT_TRUE(RemoveAll(JoinPath(empty, "model_index.json")).ok());
  EXPECT_TRUE(IsWanPipelineFolder(empty)) << "without model_index.json the transformer's class decides";
  (void)RemoveAll(empty);
}

}  // namespace
}  // namespace baton

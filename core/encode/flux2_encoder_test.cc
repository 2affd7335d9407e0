#include "core/encode/flux2_encoder.h"

#include <gtest/gtest.h>

#include "core/image/image.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

constexpr int64_t kTextLen = 12;

// One tiny FLUX.2 pipeline folder (random weights in the real layouts) for the whole suite.
class Flux2EncoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("flux2_encoder"));
    ASSERT_TRUE(WriteTinyFlux2Pipeline(Pipeline(), 3).ok());
  }
  static void TearDownTestSuite() {
    (void)RemoveAll(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Pipeline() { return JoinPath(*dir_, "pipeline"); }

  // Short prompts keep the text encoder fast.
  static Flux2EncoderOptions Options() {
    Flux2EncoderOptions options;
    options.max_sequence_length = kTextLen;
    return options;
  }
  static std::unique_ptr<Flux2SampleEncoder> Open(const Flux2EncoderOptions& options = Options()) {
    auto encoder = Flux2SampleEncoder::Open(Pipeline(), options);
    EXPECT_TRUE(encoder.ok()) << encoder.status();
    return encoder.ok() ? std::move(*encoder) : nullptr;
  }

  // A w x h image with a gradient that depends on `shade`.
  static Image Gradient(int w, int h, int shade) {
    Image image(w, h);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        uint8_t* p = image.at(x, y);
        p[0] = static_cast<uint8_t>((x * 7 + shade) % 256);
        p[1] = static_cast<uint8_t>((y * 5 + shade) % 256);
        p[2] = static_cast<uint8_t>((x + y + shade) % 256);
      }
    }
    return image;
  }

  static std::string* dir_;
};
std::string* Flux2EncoderTest::dir_ = nullptr;

TEST_F(Flux2EncoderTest, ImageLatentsArePackedTokensOfTheGridAndDeterministic) {
  auto encoder = Open();
  ASSERT_NE(encoder, nullptr);
  // 64 x 32 pixels: the VAE downsamples by 8, the 2 x 2 patches by 2 more: a 2 x 4 token grid.
  const Image image = Gradient(64, 32, 0);
  auto a = encoder->EncodeImage(image);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sizes(), (std::vector<int64_t>{2 * 4, encoder->latent_channels()}));
  EXPECT_EQ(a->scalar_type(), at::kFloat);
  EXPECT_TRUE(a->device().is_cpu());
  EXPECT_TRUE(a->is_contiguous());
  EXPECT_TRUE(at::isfinite(*a).all().item<bool>());
  auto b = encoder->EncodeImage(image);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(at::equal(*a, *b)) << "the mean latents of one image differ between two calls";
  auto other = encoder->EncodeImage(Gradient(64, 32, 90));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(at::equal(*a, *other)) << "another image gave the same latents";
}

TEST_F(Flux2EncoderTest, AnImageOffTheVaeGridIsRefusedNamingTheMultiple) {
  auto encoder = Open();
  ASSERT_NE(encoder, nullptr);
  auto latents = encoder->EncodeImage(Gradient(24, 32, 0));
  ASSERT_FALSE(latents.ok());
  EXPECT_EQ(latents.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(latents.status().message().find("multiples of 16"), std::string::npos) << latents.status();
}

TEST_F(Flux2EncoderTest, TextEmbeddingsHaveMaxLengthRowsOfStackedLayersAndAreDeterministic) {
  // The dev template puts the system message first and truncates on the right: the length must leave room for the
  // caption (about 80 tokens with the tiny tokenizer), else every caption encodes alike.
  constexpr int64_t kPromptLen = 96;
  Flux2EncoderOptions options = Options();
  options.max_sequence_length = kPromptLen;
  auto encoder = Open(options);
  ASSERT_NE(encoder, nullptr);
  for (const char* caption : {"a red cat on a mat", "a blue dog"}) {
    auto ids = encoder->PromptIdsFor(caption);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_LT(ids->length, kPromptLen) << caption << " does not fit";
  }
  auto a = encoder->EncodeText("a red cat on a mat");
  ASSERT_TRUE(a.ok()) << a.status();
  // Three hidden-state layers stacked per token.
  EXPECT_EQ(encoder->text_dim(), 3 * encoder->text_encoder().config().hidden_size);
  EXPECT_EQ(a->sizes(), (std::vector<int64_t>{kPromptLen, encoder->text_dim()}));
  EXPECT_EQ(a->scalar_type(), at::kFloat);
  auto b = encoder->EncodeText("a red cat on a mat");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(at::equal(*a, *b));
  auto other = encoder->EncodeText("a blue dog");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(at::equal(*a, *other));
}

TEST_F(Flux2EncoderTest, SampledLatentsFollowTheSeedAndDifferFromTheMean) {
  Flux2EncoderOptions sample = Options();
  sample.sample_latents = true;
  sample.seed = 5;
  auto mean = Open();
  auto sampled = Open(sample);
  auto sampled_again = Open(sample);
  sample.seed = 6;
  auto other_seed = Open(sample);
  ASSERT_TRUE(mean && sampled && sampled_again && other_seed);
  const Image image = Gradient(32, 32, 40);
  auto m = mean->EncodeImage(image);
  auto s = sampled->EncodeImage(image);
  auto s2 = sampled_again->EncodeImage(image);
  auto o = other_seed->EncodeImage(image);
  ASSERT_TRUE(m.ok() && s.ok() && s2.ok() && o.ok());
  EXPECT_EQ(s->sizes(), m->sizes());
  EXPECT_TRUE(at::equal(*s, *s2)) << "one seed, two samples";
  EXPECT_FALSE(at::equal(*s, *m));
  EXPECT_FALSE(at::equal(*s, *o));
}

TEST_F(Flux2EncoderTest, IdentityNamesEverySettingThatChangesTheNumbers) {
  auto base = Open();
  auto same = Open();
  Flux2EncoderOptions longer = Options();
  longer.max_sequence_length = kTextLen + 1;
  Flux2EncoderOptions sampled = Options();
  sampled.sample_latents = true;
  auto a = Open(longer);
  auto b = Open(sampled);
  ASSERT_TRUE(base && same && a && b);
  EXPECT_EQ(base->identity(), same->identity());
  EXPECT_EQ(base->identity().rfind("flux2:", 0), 0u) << base->identity();
  EXPECT_NE(base->identity(), a->identity());
  EXPECT_NE(base->identity(), b->identity());
  EXPECT_FALSE(base->encodes_video());
  auto video = base->EncodeVideo(at::zeros({1, 3, 1, 32, 32}));
  EXPECT_EQ(video.status().code(), absl::StatusCode::kUnimplemented) << video.status();
}

TEST_F(Flux2EncoderTest, AFolderWithoutAPartIsNotFoundNamingIt) {
  const std::string dir = test_util::MakeTempDir("flux2_encoder_partial");
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "vae")).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(dir, "tokenizer")).ok());
  auto encoder = Flux2SampleEncoder::Open(dir, {});
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(encoder.status().message().find("no text_encoder/"), std::string::npos) << encoder.status();
  (void)RemoveAll(dir);
}

}  // namespace
}  // namespace baton

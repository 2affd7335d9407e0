#include "core/sample/prompt_embeds.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/encode/flux2_encoder.h"
#include "core/encode/wan_encoder.h"
#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

constexpr int64_t kLen = 24;

class PromptEmbedsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("prompt_embeds");
    pipeline_ = JoinPath(dir_, "pipeline");
    ASSERT_TRUE(WriteTinyFlux2Pipeline(pipeline_, 7).ok());
    cache_ = JoinPath(dir_, "prompts.safetensors");
  }
  void TearDown() override { (void)RemoveAll(dir_); }

  std::vector<at::Tensor> Reference(const std::vector<std::string>& prompts, int64_t len) {
    Flux2EncoderOptions options;
    options.max_sequence_length = len;
    auto encoder = Flux2SampleEncoder::Open(pipeline_, options);
    EXPECT_TRUE(encoder.ok()) << encoder.status();
    std::vector<at::Tensor> out;
    for (const auto& p : prompts) out.push_back(*(*encoder)->EncodeText(p));
    return out;
  }

  // Makes the text encoder's weights unloadable while keeping their size and mtime (the cache identity): any
  // attempt to open the encoder now fails.
  void BreakTextEncoderWeights() {
    for (const auto& e : std::filesystem::directory_iterator(JoinPath(pipeline_, "text_encoder"))) {
      if (e.path().extension() != ".safetensors") continue;
      auto mtime = std::filesystem::last_write_time(e.path());
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      const char garbage[8] = {'\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\x7f'};
      f.write(garbage, sizeof(garbage));
      f.close();
      std::filesystem::last_write_time(e.path(), mtime);
    }
  }

  std::string dir_, pipeline_, cache_;
};

void ExpectBitwiseEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(a[i], b[i])) << "prompt " << i;
  }
}

TEST_F(PromptEmbedsTest, EqualsTheEncodersEncodeText) {
  const std::vector<std::string> prompts = {"a red fox", "a lighthouse at dusk"};
  auto got = EncodePromptsLocally(pipeline_, prompts, kLen);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].size(0), kLen);
  ExpectBitwiseEqual(*got, Reference(prompts, kLen));
  EXPECT_FALSE(PathExists(cache_));
}

TEST_F(PromptEmbedsTest, CacheIsReadWithoutOpeningTheEncoder) {
  const std::vector<std::string> prompts = {"a red fox", "a lighthouse at dusk"};
  auto first = EncodePromptsLocally(pipeline_, prompts, kLen, cache_);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(PathExists(cache_));
  auto file = SafetensorsFile::Open(cache_);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Keys().size(), 2u);
  bool has_text = false;
  for (const auto& [k, v] : (*file)->metadata()) has_text |= v == "a red fox";
  EXPECT_TRUE(has_text);

  BreakTextEncoderWeights();
  auto second = EncodePromptsLocally(pipeline_, prompts, kLen, cache_);
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectBitwiseEqual(*second, *first);
  // A prompt not in the cache needs the (now broken) encoder: proof the cached ones never opened it.
  EXPECT_FALSE(EncodePromptsLocally(pipeline_, {"a red fox", "something new"}, kLen, cache_).ok());
}

TEST_F(PromptEmbedsTest, NewPromptIsEncodedAndOldOnesRead) {
  auto first = EncodePromptsLocally(pipeline_, {"a red fox"}, kLen, cache_);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = EncodePromptsLocally(pipeline_, {"a red fox", "a blue bird"}, kLen, cache_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(at::equal((*second)[0], (*first)[0]));
  ExpectBitwiseEqual(*second, Reference({"a red fox", "a blue bird"}, kLen));
  auto file = SafetensorsFile::Open(cache_);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Keys().size(), 2u);
  // Both now cached: readable with the encoder broken.
  BreakTextEncoderWeights();
  auto third = EncodePromptsLocally(pipeline_, {"a blue bird", "a red fox"}, kLen, cache_);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(at::equal((*third)[0], (*second)[1]));
}

TEST_F(PromptEmbedsTest, ChangedMaxSequenceLengthReencodes) {
  ASSERT_TRUE(EncodePromptsLocally(pipeline_, {"a red fox"}, kLen, cache_).ok());
  auto longer = EncodePromptsLocally(pipeline_, {"a red fox"}, kLen + 8, cache_);
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_EQ((*longer)[0].size(0), kLen + 8);
  ExpectBitwiseEqual(*longer, Reference({"a red fox"}, kLen + 8));
}

TEST_F(PromptEmbedsTest, CorruptCacheIsReplaced) {
  ASSERT_TRUE(WriteFileAtomic(cache_, "this is not a safetensors file").ok());
  auto got = EncodePromptsLocally(pipeline_, {"a red fox"}, kLen, cache_);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBitwiseEqual(*got, Reference({"a red fox"}, kLen));
  auto file = SafetensorsFile::Open(cache_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Keys().size(), 1u);
}

TEST_F(PromptEmbedsTest, EmptyListAndBadLength) {
  auto none = EncodePromptsLocally(pipeline_, {}, kLen, cache_);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(EncodePromptsLocally(pipeline_, {"x"}, 0).ok());
}

TEST_F(PromptEmbedsTest, WanPipelineEncodesWithItsUmt5) {
  const std::string wan = JoinPath(test_util::MakeTempDir("prompt-embeds-wan"), "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(wan, 3).ok());
  auto got = EncodePromptsLocally(wan, {"a red dog"}, kLen);
  ASSERT_TRUE(got.ok()) << got.status();
  WanEncoderOptions options;
  options.max_sequence_length = kLen;
  auto encoder = WanSampleEncoder::Open(wan, options);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  auto expected = (*encoder)->EncodeText("a red dog");
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_TRUE(at::equal((*got)[0], *expected));
}

}  // namespace
}  // namespace baton

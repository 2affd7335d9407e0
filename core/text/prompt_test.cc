#include "core/text/prompt.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/text/tiny_tokenizer.h"
#include "core/util/files.h"

namespace baton {
namespace {

std::string FreshPromptDir(const std::string& name) {
  std::string dir = JoinPath(::testing::TempDir(), absl::StrCat("prompt_test_", name, "_", getpid()));
  EXPECT_TRUE(RemoveAll(dir).ok());
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

std::unique_ptr<BpeTokenizer> TinyMistralTokenizer() {
  const std::string dir = FreshPromptDir("tok");
  EXPECT_TRUE(WriteTinyBpeTokenizerJson(JoinPath(dir, "tokenizer.json")).ok());
  EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), TinyTokenizerConfigJson()).ok());
  auto tok = BpeTokenizer::Load(JoinPath(dir, "tokenizer.json"));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// The tiny tokenizer plus Qwen's chat tokens as added tokens at ids 1000.. (inside the tiny Qwen3 vocab).
constexpr const char* kQwenTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
std::unique_ptr<BpeTokenizer> TinyQwenTokenizer() {
  auto j = nlohmann::json::parse(BuildTinyBpeTokenizerJson().json);
  for (int i = 0; i < 5; ++i) {
    j["added_tokens"].push_back({{"id", 1000 + i},
                                 {"content", kQwenTokens[i]},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", i < 3}});
  }
  auto tok = BpeTokenizer::FromJson(j.dump(), "tiny-qwen",
                                    R"({"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>", "bos_token": null})");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<int64_t> Row(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

void Append(std::vector<int64_t>* out, const std::vector<int64_t>& ids) {
  out->insert(out->end(), ids.begin(), ids.end());
}

TEST(PromptTest, RendersTheMistralChatTemplateWithoutImageTokens) {
  EXPECT_EQ(RenderFlux2Prompt("a [IMG]cat[IMG]", TextEncoderFamily::kMistral3),
            absl::StrCat("<s>[SYSTEM_PROMPT]", kFlux2SystemMessage, "[/SYSTEM_PROMPT][INST]a cat[/INST]"));
  EXPECT_EQ(RenderFlux2Prompt("a [IMG]cat", TextEncoderFamily::kQwen3),
            "<|im_start|>user\na [IMG]cat<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(PromptTest, MistralIdsEqualIndependentlyAssembledList) {
  auto tok = TinyMistralTokenizer();
  ASSERT_NE(tok, nullptr);
  // Tekken's ids (the tiny tokenizer keeps the real ones).
  EXPECT_EQ(tok->TokenId("<s>"), 1);
  EXPECT_EQ(tok->TokenId("[INST]"), 3);
  EXPECT_EQ(tok->TokenId("[/INST]"), 4);
  EXPECT_EQ(tok->TokenId("<pad>"), 11);
  EXPECT_EQ(tok->TokenId("[SYSTEM_PROMPT]"), 17);
  EXPECT_EQ(tok->TokenId("[/SYSTEM_PROMPT]"), 18);

  auto ids = BuildFlux2PromptIds(*tok, "A red apple[IMG] on a table", TextEncoderFamily::kMistral3, 128);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<int64_t> want = {1, 17};
  Append(&want, tok->Encode(kFlux2SystemMessage));
  want.push_back(18);
  want.push_back(3);
  Append(&want, tok->Encode("A red apple on a table"));
  want.push_back(4);
  ASSERT_LT(want.size(), 128u);
  EXPECT_EQ(ids->length, static_cast<int64_t>(want.size()));
  std::vector<int64_t> padded(128 - want.size(), 11);  // left padding
  Append(&padded, want);
  EXPECT_EQ(Row(ids->input_ids), padded);
  std::vector<int64_t> mask(128 - want.size(), 0);
  mask.resize(128, 1);
  EXPECT_EQ(Row(ids->attention_mask), mask);
  EXPECT_EQ(ids->input_ids.sizes(), (at::IntArrayRef{1, 128}));
}

TEST(PromptTest, TruncatesOnTheRightAndHonoursPaddingSide) {
  auto tok = TinyMistralTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int64_t> full = tok->Encode(RenderFlux2Prompt("a dog", TextEncoderFamily::kMistral3));
  auto cut = BuildFlux2PromptIds(*tok, "a dog", TextEncoderFamily::kMistral3, 10);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(Row(cut->input_ids), std::vector<int64_t>(full.begin(), full.begin() + 10));
  EXPECT_EQ(cut->length, 10);
  EXPECT_EQ(Row(cut->attention_mask), std::vector<int64_t>(10, 1));

  auto right = BuildFlux2PromptIds(*tok, "a dog", TextEncoderFamily::kMistral3, 100, PaddingSide::kRight);
  ASSERT_TRUE(right.ok());
  std::vector<int64_t> want = full;
  want.resize(100, 11);
  EXPECT_EQ(Row(right->input_ids), want);
  EXPECT_EQ(BuildFlux2PromptIds(*tok, "a dog", TextEncoderFamily::kMistral3, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto no_pad = BpeTokenizer::FromJson(BuildTinyBpeTokenizerJson().json, "nopad", R"({"pad_token": null})");
  ASSERT_TRUE(no_pad.ok());
  EXPECT_EQ(BuildFlux2PromptIds(**no_pad, "a dog", TextEncoderFamily::kMistral3).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PromptTest, ReadsPaddingSideFromTokenizerConfig) {
  const std::string dir = FreshPromptDir("padding_side");
  const std::string path = JoinPath(dir, "tokenizer_config.json");
  auto absent = ReadTokenizerPaddingSide(path);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
  ASSERT_TRUE(WriteFileAtomic(path, R"({"padding_side": "right"})").ok());
  auto right = ReadTokenizerPaddingSide(path);
  ASSERT_TRUE(right.ok());
  EXPECT_EQ(right->value(), PaddingSide::kRight);
  ASSERT_TRUE(WriteFileAtomic(path, R"({"pad_token": "<pad>"})").ok());
  EXPECT_FALSE(ReadTokenizerPaddingSide(path)->has_value());
  ASSERT_TRUE(WriteFileAtomic(path, R"({"padding_side": "middle"})").ok());
  EXPECT_EQ(ReadTokenizerPaddingSide(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Flux2PaddingSide(TextEncoderFamily::kMistral3), PaddingSide::kLeft);
  EXPECT_EQ(Flux2PaddingSide(TextEncoderFamily::kQwen3), PaddingSide::kRight);
}

TEST(PromptTest, Qwen3IdsEqualIndependentlyAssembledList) {
  auto tok = TinyQwenTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string prompt = "A small dog with brown fur";
  auto ids = BuildFlux2PromptIds(*tok, prompt, TextEncoderFamily::kQwen3, 64);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<int64_t> want = {1001};  // <|im_start|>
  Append(&want, tok->Encode("user\n" + prompt));
  want.push_back(1002);  // <|im_end|>
  Append(&want, tok->Encode("\n"));
  want.push_back(1001);
  Append(&want, tok->Encode("assistant\n"));
  want.push_back(1003);  // <think>
  Append(&want, tok->Encode("\n\n"));
  want.push_back(1004);  // </think>
  Append(&want, tok->Encode("\n\n"));
  EXPECT_EQ(ids->length, static_cast<int64_t>(want.size()));
  std::vector<int64_t> mask(want.size(), 1);
  want.resize(64, 1000);  // right padding with <|endoftext|>
  mask.resize(64, 0);
  EXPECT_EQ(Row(ids->input_ids), want);
  EXPECT_EQ(Row(ids->attention_mask), mask);
}

TEST(PromptTest, HiddenStateLayersAndFamilies) {
  EXPECT_EQ(Flux2HiddenStateLayers(TextEncoderFamily::kMistral3), (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(Flux2HiddenStateLayers(TextEncoderFamily::kQwen3), (std::vector<int64_t>{9, 18, 27}));
  EXPECT_EQ(*Flux2FamilyForConfig(TinyMistral3TextConfig()), TextEncoderFamily::kMistral3);
  EXPECT_EQ(*Flux2FamilyForConfig(TinyQwen3TextConfig()), TextEncoderFamily::kQwen3);
  TextEncoderConfig llama = TinyMistral3TextConfig();
  llama.model_type = "llama";
  EXPECT_FALSE(Flux2FamilyForConfig(llama).ok());
}

// encode_prompt end to end: [1, 512, 3·hidden]; the real tokens' rows equal an unpadded run of the same
// ids (left padding for dev, right for klein), and the padding rows are kept.
TEST(PromptTest, EncodeFlux2PromptKeepsPaddingAndMatchesUnpaddedTokens) {
  struct Case {
    TextEncoderFamily family;
    TextEncoderConfig config;
    std::unique_ptr<BpeTokenizer> tok;
  };
  std::vector<Case> cases;
  cases.push_back({TextEncoderFamily::kMistral3, TinyMistral3TextConfig(), TinyMistralTokenizer()});
  cases.push_back({TextEncoderFamily::kQwen3, TinyQwen3TextConfig(), TinyQwenTokenizer()});
  for (const Case& c : cases) {
    ASSERT_NE(c.tok, nullptr);
    const std::string dir = FreshPromptDir("encode_" + c.config.model_type);
    ASSERT_TRUE(WriteRandomTextEncoder(c.config, dir, 17).ok());
    auto enc = TextEncoder::Open(dir, at::kFloat, at::kCPU);
    ASSERT_TRUE(enc.ok()) << enc.status();
    auto ids = BuildFlux2PromptIds(*c.tok, "A cup of coffee on a table", c.family);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto embeds = EncodeFlux2Prompt(**enc, *ids, c.family);
    ASSERT_TRUE(embeds.ok()) << embeds.status();
    ASSERT_EQ(embeds->sizes(), (at::IntArrayRef{1, 512, 3 * c.config.hidden_size}));

    const int64_t n = ids->length;
    const int64_t start = c.family == TextEncoderFamily::kMistral3 ? 512 - n : 0;
    at::Tensor real_ids = ids->input_ids.narrow(1, start, n);
    auto plain = (*enc)->Encode(real_ids, at::Tensor(), Flux2HiddenStateLayers(c.family));
    ASSERT_TRUE(plain.ok()) << plain.status();
    const double tol = 1e-4 * std::max(1.0, plain->abs().max().item<double>());
    EXPECT_TRUE(at::allclose(embeds->narrow(1, start, n), *plain, 0, tol)) << c.config.model_type;
    EXPECT_TRUE(at::isfinite(*embeds).all().item<bool>());

    const TextEncoderFamily other =
        c.family == TextEncoderFamily::kMistral3 ? TextEncoderFamily::kQwen3 : TextEncoderFamily::kMistral3;
    EXPECT_EQ(EncodeFlux2Prompt(**enc, *ids, other).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace baton

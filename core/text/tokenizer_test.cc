#include "core/text/tokenizer.h"

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/text/tiny_tokenizer.h"
#include "core/util/files.h"

namespace baton {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

// Hand-built tokenizer: specials 0..3, byte b at id 4 + b, then merges in rank order. Expected
// ids in the tests are derived from these tables by hand.
constexpr int64_t kByteBase = 4;
int64_t B(char c) { return kByteBase + static_cast<unsigned char>(c); }

Json HandBuiltTokenizer(bool ignore_merges, bool merges_as_pairs) {
  Json vocab = Json::object();
  const char* specials[] = {"<s>", "</s>", "[INST]", "[/INST]"};
  for (int i = 0; i < 4; ++i) vocab[specials[i]] = i;
  for (int b = 0; b < 256; ++b) vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = kByteBase + b;
  // rank: left right -> merged id
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},     // 0 -> "he"    260
      {"l", "l"},     // 1 -> "ll"    261
      {"he", "ll"},   // 2 -> "hell"  262
      {"hell", "o"},  // 3 -> "hello" 263
      {"e", "l"},     // 4 -> "el"    264
      {"Ġ", "w"},     // 5 -> "Ġw"    265
      {"o", "r"},     // 6 -> "or"    266
      {"Ġw", "or"},   // 7 -> "Ġwor"  267
  };
  int64_t next = 260;
  Json merge_list = Json::array();
  for (const auto& [l, r] : merges) {
    vocab[l + r] = next++;
    if (merges_as_pairs) {
      merge_list.push_back({l, r});
    } else {
      merge_list.push_back(l + " " + r);
    }
  }
  vocab["Ġxyz"] = next++;  // 268: reachable only through ignore_merges
  Json added = Json::array();
  for (int i = 0; i < 4; ++i) {
    added.push_back({{"id", i},
                     {"content", specials[i]},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
  }
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", SplitPatternRegex(SplitPattern::kTekken)}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  return {{"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::unique_ptr<BpeTokenizer> MakeTokenizer(bool ignore_merges = false, bool pairs = true) {
  auto tok = BpeTokenizer::FromJson(HandBuiltTokenizer(ignore_merges, pairs).dump(), "test");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(tok).value();
}

TEST(BpeTokenizerTest, MergesApplyInRankOrder) {
  auto tok = MakeTokenizer();
  EXPECT_THAT(tok->Encode("hello"), ElementsAre(263));
  // "help": (h,e) rank 0 beats (e,l) rank 4, so "el" never forms.
  EXPECT_THAT(tok->Encode("help"), ElementsAre(260, B('l'), B('p')));
  EXPECT_THAT(tok->Encode("elp"), ElementsAre(264, B('p')));
  // " world" is one piece "Ġworld": Ġw(5), or(6), then Ġwor(7); l and d stay bytes.
  EXPECT_THAT(tok->Encode("hello world"), ElementsAre(263, 267, B('l'), B('d')));
  EXPECT_EQ(tok->vocab_size(), 269);
}

TEST(BpeTokenizerTest, MergeStringsAndPairsAreEquivalent) {
  auto a = MakeTokenizer(false, /*pairs=*/true);
  auto b = MakeTokenizer(false, /*pairs=*/false);
  for (const char* s : {"hello world", "help elp", "Hello, hello!"}) {
    EXPECT_EQ(a->Encode(s), b->Encode(s)) << s;
  }
}

TEST(BpeTokenizerTest, IgnoreMergesTakesWholeWordFromVocab) {
  EXPECT_THAT(MakeTokenizer(false)->Encode(" xyz"), ElementsAre(B(' '), B('x'), B('y'), B('z')));
  EXPECT_THAT(MakeTokenizer(true)->Encode(" xyz"), ElementsAre(268));
}

TEST(BpeTokenizerTest, SpecialTokensMatchedLiterallyAnywhere) {
  auto tok = MakeTokenizer();
  EXPECT_THAT(tok->Encode("[INST]hello[/INST]"), ElementsAre(2, 263, 3));
  EXPECT_THAT(tok->Encode("a<s>b"), ElementsAre(B('a'), 0, B('b')));
  // A near miss is ordinary text: "[INST" splits as "[" + "INST".
  std::vector<int64_t> near = tok->Encode("[INST");
  EXPECT_THAT(near, ElementsAre(B('['), B('I'), B('N'), B('S'), B('T')));
  EXPECT_EQ(tok->TokenId("[/INST]"), 3);
  EXPECT_EQ(tok->TokenId("hello"), 263);
  EXPECT_EQ(tok->TokenId("nope"), std::nullopt);
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->pad_id(), std::nullopt);
}

TEST(BpeTokenizerTest, NonAsciiBytesRoundTrip) {
  auto tok = MakeTokenizer();
  // é = C3 A9, no merges: one id per byte.
  EXPECT_THAT(tok->Encode("é"), ElementsAre(kByteBase + 0xC3, kByteBase + 0xA9));
  for (const char* s : {"é", "😀 emoji", "naïve café", "\x01\x7f control", "tab\there\n"}) {
    auto decoded = tok->Decode(tok->Encode(s));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, s);
  }
}

TEST(BpeTokenizerTest, DecodeSkipsSpecialsOnRequestAndRejectsBadIds) {
  auto tok = MakeTokenizer();
  EXPECT_EQ(*tok->Decode({0, 263, 1}), "<s>hello</s>");
  EXPECT_EQ(*tok->Decode({0, 263, 1}, /*skip_special_tokens=*/true), "hello");
  EXPECT_EQ(tok->Decode({263, 9999}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok->Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BpeTokenizerTest, ConfigNamesSpecialTokens) {
  Json config = {{"bos_token", {{"content", "[INST]"}}}, {"eos_token", "[/INST]"}, {"pad_token", nullptr}};
  auto tok = BpeTokenizer::FromJson(HandBuiltTokenizer(false, true).dump(), "t", config.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 2);
  EXPECT_EQ((*tok)->eos_id(), 3);
  EXPECT_EQ((*tok)->pad_id(), std::nullopt);
}

TEST(BpeTokenizerTest, RejectsMalformedFiles) {
  auto expect_error = [](const Json& j, const std::string& needle) {
    auto tok = BpeTokenizer::FromJson(j.dump(), "bad.json");
    ASSERT_FALSE(tok.ok()) << needle;
    EXPECT_THAT(std::string(tok.status().message()), ::testing::HasSubstr(needle));
    EXPECT_THAT(std::string(tok.status().message()), ::testing::HasSubstr("bad.json"));
  };
  Json j = HandBuiltTokenizer(false, true);
  Json unigram = j;
  unigram["model"]["type"] = "Unigram";
  expect_error(unigram, "expected \"BPE\"");
  Json bad_merge = j;
  bad_merge["model"]["merges"].push_back({"q", "zz"});
  expect_error(bad_merge, "not in vocab");
  Json no_byte = j;
  no_byte["model"]["vocab"].erase("Ā");  // byte 0x00
  expect_error(no_byte, "byte 0");
  Json regex = j;
  regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_error(regex, "unsupported pre-tokenizer");
  auto not_json = BpeTokenizer::FromJson("{not json", "x.json");
  EXPECT_FALSE(not_json.ok());
}

TEST(BpeTokenizerTest, LoadReadsFileAndSiblingConfig) {
  std::string dir = (std::filesystem::temp_directory_path() / absl::StrCat("baton_tok_test_", ::getpid())).string();
  ASSERT_TRUE(MakeDirs(dir).ok());
  std::string path = JoinPath(dir, "tokenizer.json");
  ASSERT_TRUE(WriteFileAtomic(path, HandBuiltTokenizer(false, true).dump()).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), Json({{"pad_token", "</s>"}}).dump()).ok());
  auto tok = BpeTokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->pad_id(), 1);
  EXPECT_THAT((*tok)->Encode("hello"), ElementsAre(263));
  EXPECT_FALSE(BpeTokenizer::Load(JoinPath(dir, "missing.json")).ok());
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(TinyTokenizerTest, GeneratedTokenizerLoadsAndRoundTrips) {
  TinyTokenizerJson tiny = BuildTinyBpeTokenizerJson();
  EXPECT_EQ(BuildTinyBpeTokenizerJson().json, tiny.json);  // deterministic
  auto tok = BpeTokenizer::FromJson(tiny.json, "tiny", TinyTokenizerConfigJson());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), tiny.vocab_size);
  EXPECT_GT(tiny.vocab_size, 20 + 256 + kTinyBpeNumMerges / 2);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_EQ((*tok)->pad_id(), 11);
  EXPECT_EQ((*tok)->TokenId("[SYSTEM_PROMPT]"), 17);
  EXPECT_EQ((*tok)->split_pattern(), SplitPattern::kTekken);

  // Learned merges compress English: far fewer tokens than bytes.
  std::string caption = "A photo of a red apple on a wooden table next to a glass of water.";
  EXPECT_LT((*tok)->Encode(caption).size(), caption.size() / 2);

  std::mt19937 rng(7);
  std::vector<std::string> texts = {caption, "[INST]Describe it[/INST]", "Ünïcödé ✓ 日本 😀",
                                    "  spaces\t\ttabs\r\n\nnewlines  "};
  for (int i = 0; i < 50; ++i) {
    std::string s;
    int len = rng() % 40;
    for (int k = 0; k < len; ++k) s.push_back(static_cast<char>(rng() % 256));
    texts.push_back(s);  // arbitrary bytes, including invalid UTF-8
  }
  for (const std::string& s : texts) {
    auto decoded = (*tok)->Decode((*tok)->Encode(s));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, s);
  }
}

TEST(TinyTokenizerTest, TrainerLearnsMostFrequentPairFirst) {
  auto merges = TrainByteLevelBpe({"aaab aaab aaab xy"}, SplitPattern::kTekken, 3);
  ASSERT_EQ(merges.size(), 3u);
  // Pieces: "aaab" x1, " aaab" x2, " xy" x1. Pair counts: (a,a) 6, (a,b) 3, (' ',a) 2, ...
  EXPECT_EQ(merges[0], std::make_pair(std::string("a"), std::string("a")));
  // After "aa": words are [aa,a,b] and [' ',aa,a,b]: (aa,a) 3 ties (a,b) 3; 'a'=97 < 'aa'=256.
  EXPECT_EQ(merges[1], std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(merges[2], std::make_pair(std::string("aa"), std::string("ab")));
}

}  // namespace
}  // namespace baton

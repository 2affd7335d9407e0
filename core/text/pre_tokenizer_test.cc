#include "core/text/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/text/unicode_class.h"

namespace baton {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(absl::string_view text, SplitPattern p) {
  std::vector<std::string> out;
  for (absl::string_view piece : SplitText(text, p)) out.emplace_back(piece);
  return out;
}

// Expected pieces below are what the regexes in pre_tokenizer.h match, worked out by hand
// alternative by alternative (and checked against Python's `regex` module while writing them).
TEST(PreTokenizerTest, TekkenSplitsSentence) {
  EXPECT_THAT(Split("Hello world, it's 2026!", SplitPattern::kTekken),
              ElementsAre("Hello", " world", ",", " it", "'s", " ", "2", "0", "2", "6", "!"));
}

TEST(PreTokenizerTest, QwenAndLlamaDifferInDigitGrouping) {
  EXPECT_THAT(Split("Hello world, it's 2026!", SplitPattern::kQwen2),
              ElementsAre("Hello", " world", ",", " it", "'s", " ", "2", "0", "2", "6", "!"));
  EXPECT_THAT(Split("Hello world, it's 2026!", SplitPattern::kLlama3),
              ElementsAre("Hello", " world", ",", " it", "'s", " ", "202", "6", "!"));
  EXPECT_THAT(Split("Hello world, it's 2026!", SplitPattern::kGpt2),
              ElementsAre("Hello", " world", ",", " it", "'s", " 2026", "!"));
}

TEST(PreTokenizerTest, TekkenSplitsOnCaseRuns) {
  EXPECT_THAT(Split("HelloWorld iPhone ABCdef NASA", SplitPattern::kTekken),
              ElementsAre("Hello", "World", " i", "Phone", " ABCdef", " NASA"));
  // Qwen has no case rule: a letter run is one piece.
  EXPECT_THAT(Split("HelloWorld iPhone", SplitPattern::kQwen2), ElementsAre("HelloWorld", " iPhone"));
}

TEST(PreTokenizerTest, Contractions) {
  // Qwen's contractions are case-insensitive and come first; Tekken has none, so "'S" is a
  // prefix char + letters.
  EXPECT_THAT(Split("IT'S we'LL", SplitPattern::kQwen2), ElementsAre("IT", "'S", " we", "'LL"));
  EXPECT_THAT(Split("IT'S", SplitPattern::kTekken), ElementsAre("IT", "'S"));
  EXPECT_THAT(Split("IT'S", SplitPattern::kGpt2), ElementsAre("IT", "'", "S"));
}

TEST(PreTokenizerTest, WhitespaceAndNewlines) {
  // \s*[\r\n]+ ends at the last newline of a whitespace run; \s+(?!\S) leaves one space for the
  // next word; trailing whitespace is one piece.
  EXPECT_THAT(Split("x  \n  y", SplitPattern::kTekken), ElementsAre("x", "  \n", " ", " y"));
  EXPECT_THAT(Split("a\n\nb", SplitPattern::kQwen2), ElementsAre("a", "\n\n", "b"));
  EXPECT_THAT(Split("a   b  ", SplitPattern::kTekken), ElementsAre("a", "  ", " b", "  "));
  EXPECT_THAT(Split("a\t\tb", SplitPattern::kTekken), ElementsAre("a", "\t", "\tb"));
}

TEST(PreTokenizerTest, PunctuationTail) {
  // Tekken's punctuation alternative also swallows trailing slashes and newlines.
  EXPECT_THAT(Split("x://y", SplitPattern::kTekken), ElementsAre("x", "://", "y"));
  EXPECT_THAT(Split("end.\n\nNext", SplitPattern::kTekken), ElementsAre("end", ".\n\n", "Next"));
  EXPECT_THAT(Split("end. \nNext", SplitPattern::kTekken), ElementsAre("end", ".", " \n", "Next"));
}

TEST(PreTokenizerTest, NonAsciiLettersAndNumbers) {
  // é is Ll, É is Lu, CJK ideographs are Lo (in both Tekken classes), ² is No, ٣ is Nd.
  EXPECT_THAT(Split("café Éclair", SplitPattern::kTekken), ElementsAre("café", " Éclair"));
  EXPECT_THAT(Split("日本語です", SplitPattern::kTekken), ElementsAre("日本語です"));
  EXPECT_THAT(Split("x²٣", SplitPattern::kQwen2), ElementsAre("x", "²", "٣"));
  EXPECT_THAT(Split("a😀b", SplitPattern::kTekken), ElementsAre("a", "😀b"));
}

TEST(PreTokenizerTest, PiecesCoverInvalidUtf8) {
  std::string text = "ab\xff\xc3 cd\xe2\x82";
  std::string joined;
  for (absl::string_view p : SplitText(text, SplitPattern::kTekken)) joined += std::string(p);
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizerTest, RegexRoundTrip) {
  for (SplitPattern p : {SplitPattern::kTekken, SplitPattern::kQwen2, SplitPattern::kLlama3, SplitPattern::kGpt2}) {
    auto back = SplitPatternFromRegex(SplitPatternRegex(p));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, p);
  }
  EXPECT_EQ(SplitPatternFromRegex("\\w+").status().code(), absl::StatusCode::kUnimplemented);
}

TEST(UnicodeClassTest, ClassifiesSamples) {
  EXPECT_EQ(ClassifyCodePoint('a'), CharClass::kLower);
  EXPECT_EQ(ClassifyCodePoint('Q'), CharClass::kUpper);
  EXPECT_EQ(ClassifyCodePoint('7'), CharClass::kNumber);
  EXPECT_EQ(ClassifyCodePoint('\n'), CharClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint('!'), CharClass::kOther);
  EXPECT_EQ(ClassifyCodePoint(0xE9), CharClass::kLower);          // é
  EXPECT_EQ(ClassifyCodePoint(0x100), CharClass::kUpper);         // Ā (alternating run)
  EXPECT_EQ(ClassifyCodePoint(0x101), CharClass::kLower);         // ā
  EXPECT_EQ(ClassifyCodePoint(0x1C5), CharClass::kUpper);         // ǅ (Lt)
  EXPECT_EQ(ClassifyCodePoint(0x416), CharClass::kUpper);         // Ж
  EXPECT_EQ(ClassifyCodePoint(0x436), CharClass::kLower);         // ж
  EXPECT_EQ(ClassifyCodePoint(0x4E2D), CharClass::kOtherLetter);  // 中
  EXPECT_EQ(ClassifyCodePoint(0x301), CharClass::kMark);          // combining acute
  EXPECT_EQ(ClassifyCodePoint(0xBD), CharClass::kNumber);         // ½
  EXPECT_EQ(ClassifyCodePoint(0xA0), CharClass::kSpace);          // no-break space
  EXPECT_EQ(ClassifyCodePoint(0x3000), CharClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint(0x1F600), CharClass::kOther);   // 😀
  EXPECT_EQ(ClassifyCodePoint(0x1D7CE), CharClass::kNumber);  // mathematical bold digit zero
}

}  // namespace
}  // namespace baton

// Wan's prompt cleaning (Python's html.unescape twice + diffusers' whitespace_clean, expected values printed
// by Python 3.11 / diffusers) and id layout (truncation keeps </s>, right padding) on a hand-made Unigram
// tokenizer.json. Tokenizer and embeddings against upstream: tests/upstream/test_umt5.py.
#include "core/text/wan_prompt.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/text/html_unescape.h"
#include "core/text/unigram_tokenizer.h"

namespace baton {
namespace {

TEST(HtmlUnescapeTest, MatchesPython) {
  EXPECT_EQ(HtmlUnescape("&amp;lt;b&amp;gt;"), "&lt;b&gt;");
  EXPECT_EQ(HtmlUnescape("&notit; &not &amp &AMP; &ampx"), "\u00acit; \u00ac & & &x");
  EXPECT_EQ(HtmlUnescape("&#0;|&#x80;|&#xD800;|&#1114112;|&#x1F600|&#65;&#x41;"),
            "\ufffd|\u20ac|\ufffd|\ufffd|\U0001F600|AA");
  EXPECT_EQ(HtmlUnescape("&#xZ &# & ;"), "&#xZ &# & ;");
  EXPECT_EQ(HtmlUnescape("&unknownname;"), "&unknownname;");
  EXPECT_EQ(HtmlUnescape("&Eacute;t&eacute"), "\u00c9t\u00e9");
}

TEST(WanPromptTest, CleanMatchesDiffusers) {
  EXPECT_EQ(WanPromptClean("&amp;lt;b&amp;gt;"), "<b>");
  EXPECT_EQ(WanPromptClean("\x1c a \x1f"), "a");
  EXPECT_EQ(WanPromptClean(" a\u3000\u3000b\u200b"
                           "c\n\td "),
            "a b\u200b"
            "c d");
  EXPECT_EQ(WanPromptClean(""), "");
}

std::vector<int64_t> WanPromptRow(const at::Tensor& t) {
  at::Tensor row = t[0].contiguous();
  return std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
}

constexpr char kTinyUnigram[] = R"({
  "added_tokens": [{"id": 0, "content": "<pad>"}, {"id": 1, "content": "</s>"}, {"id": 2, "content": "<unk>"}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
  "model": {"type": "Unigram", "unk_id": 2, "byte_fallback": false, "vocab": [
    ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["\u2581", -1.0], ["a", -2.0], ["b", -2.0], ["\u2581a", -1.5],
    ["ab", -1.0]]}
})";

TEST(WanPromptTest, TruncatesBeforeEosAndPadsRight) {
  auto tok = UnigramTokenizer::FromJson(kTinyUnigram, "tiny");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "▁ab": ▁ + ab (-2) beats ▁a + b (-3.5); unknown "z" costs min_score - 10 and fuses with "zz".
  EXPECT_EQ((*tok)->Encode("ab", true), (std::vector<int64_t>{3, 7, 1}));
  EXPECT_EQ((*tok)->Encode("a zzz", false), (std::vector<int64_t>{6, 3, 2}));
  auto ids = BuildWanPromptIds(**tok, "  a a a a a  ", 4);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->length, 4);
  EXPECT_EQ(WanPromptRow(ids->input_ids), (std::vector<int64_t>{6, 6, 6, 1}));
  auto short_ids = BuildWanPromptIds(**tok, "a", 4);
  ASSERT_TRUE(short_ids.ok());
  EXPECT_EQ(WanPromptRow(short_ids->input_ids), (std::vector<int64_t>{6, 1, 0, 0}));
  EXPECT_EQ(WanPromptRow(short_ids->attention_mask), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_FALSE(BuildWanPromptIds(**tok, "a", 1).ok());  // no room beside </s>
}

}  // namespace
}  // namespace baton

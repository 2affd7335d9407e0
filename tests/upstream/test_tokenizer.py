"""Referee: Baton's byte-level BPE tokenizer (core/text/tokenizer.h) and NFC normalizer (core/text/nfc.h)
against Hugging Face `tokenizers`, id for id.

The test trains two small byte-level BPE tokenizers with `tokenizers` itself, set up as the real models'
tokenizer.json files are: a Mistral-Small-3.1 "Tekken"-like one (Tekken split regex, ByteLevel without its
own regex, ignore_merges, no normalizer, Mistral's special tokens) and a Qwen2/3-like one (Qwen2 split regex,
NFC normalizer, <|im_start|>-style special tokens and the non-special <think> tokens). Both are run on a
corpus of hard strings and on seeded random strings; `baton tokenize` must return exactly
`Tokenizer.encode(text, add_special_tokens=False).ids`. A third tokenizer (NFC + bare byte vocabulary) makes
the ids spell the normalized bytes, which checks NFC on every code point with a canonical decomposition.
"""

import json
import os
import random
import unicodedata
import unittest

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import referee

TEKKEN_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

MISTRAL_SPECIAL = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[IMG]", "<pad>", "[SYSTEM_PROMPT]",
                   "[/SYSTEM_PROMPT]"]
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_PLAIN_ADDED = ["<think>", "</think>"]

# Strings that have broken tokenizers before: each line names its trap.
HARD_STRINGS = [
    "", " ", "a", "Hello, world!", "  leading spaces", "trailing spaces   ", "multiple    spaces   between",
    "tabs\tand\nnewlines\r\n\r\nmixed", "\n\n\n", " \n \n ", "line\n  indented\n\tmore", "end with newline\n",
    # digits: Tekken and Qwen split every digit; other scripts' digits and numerals are \p{N} too
    "1234567890", "3.14159", "1,000,000 and 2026", "٣٤٥ Arabic-Indic", "²³ superscripts ½ ¾", "Ⅻ Roman", "x1y22z333",
    # accents composed and decomposed (NFC changes the second of each pair)
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m", "\u212b sign",
    "s\u0307\u0323 reordered marks", "a\u0300\u0301 blocked", "\u0958 exclusion", "Ω \u2126 ohm sign",
    "e\u0301\u0301\u0301 stacked", "\u0301 leading mark",
    # compatibility forms NFC keeps
    "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "①②③", "㎏ ㍿",
    # emoji, ZWJ sequences, flags, variation selectors, skin tones
    "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇫🇷🇩🇪 flags", "❤️ heart", "emoji at end 😀", "😀😃😄😁",
    # CJK, kana, Hangul (composed and as jamo)
    "日本語のテキストです。", "中文字符和标点，。！？", "한국어 텍스트", "\u1112\u1161\u11ab\u1100\u1173\u11af", "カタカナとひらがな",
    # mixed scripts, RTL, Indic marks, Thai
    "Привет мир hello κόσμος", "עברית and العربية mixed", "हिन्दी देवनागरी", "ภาษาไทย", "Ελληνικά ΚΕΦΑΛΑΙΑ",
    # long words and repetition
    "Donaudampfschifffahrtsgesellschaftskapitänsmütze", "a" * 300, "supercalifragilisticexpialidocious" * 3,
    "ab" * 150, "!" * 50,
    # case patterns (Tekken splits on them; Lt titlecase)
    "CamelCaseWordsHTTPServer", "iPhone XMLHttpRequest", "ALLCAPS", "Title Case Words", "ǅungla ǈ ǋ",
    # contractions (Qwen's case-insensitive alternatives) and look-alikes
    "It's they'RE we'VE I'LL you'd I'm", "don’t curly", "'s at start", "ſ long s: 'ſ",
    # punctuation, paths, URLs, code
    "!!!???...", "path/to/file.txt", "http://example.com/a/b?c=d&e=f", "C++ and C#", "email@example.com",
    '<tag attr="1">text</tag>', "((nested)) [brackets] {braces}", "— em – en -- dashes", "«quotes» „low“ ‘single’",
    "def f(x):\n    return x**2  # comment\n", "a/\nb//\n\nc", "/// slashes then newline\n",
    # unusual whitespace (\s but not ASCII)
    "\u00a0non-breaking\u00a0space", "\u3000ideographic space", "em\u2003space", "zero\u200bwidth",
    "line\u2028separator", "\u0085next line", "\x0bvertical\x0ctab",
    # added tokens inside text
    "<s>[INST]hi[/INST]</s>", "[IMG] in the middle [IMG]", "no<s>space</s>", "<|im_start|>user\nhi<|im_end|>\n",
    "<think>\n\n</think>\n\n", "<|endoftext|><|endoftext|>", "<think>cafe\u0301</think>",
]

# Characters for seeded random strings: every class the split regexes distinguish, plus marks that NFC
# reorders or composes.
FUZZ_POOL = (list("abcXYZ  \t\n\r0123456789.,;:!?'\"-/()[]<>#@_") +
             list("éÉñßøÆ") + ["\u0301", "\u0308", "\u0323", "\u0307", "\u030a", "\u0327"] + list("ǅǈ") +
             list("日本語中文한국어") + ["\u1100", "\u1161", "\u11a8"] + list("αβΓΔабвГД") + list("٣²½Ⅻ") +
             list("हिन्दी") + ["😀", "👍", "🏽", "\u200d", "\ufe0f", "\u00a0", "\u3000", "\u2028"] +
             ["<s>", "[INST]", "<|im_end|>", "<think>"])


def fuzz_strings(seed, count):
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(1, 40))) for _ in range(count)]


TRAINING_TEXT = HARD_STRINGS * 3 + fuzz_strings(1, 400) + [
    "A photo of a red apple on a wooden table next to a glass of water.",
    "The camera is close to the subject, and the background is soft and out of focus.",
    "It's a photo, isn't it? They're here, we've seen it, I'll check, you'd know, I'm sure.",
] * 20


def train_bpe(split_regex, normalizer, special, plain_added, ignore_merges, vocab_size=1200):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=special, show_progress=False)
    tok.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in plain_added])
    return tok


def tekken_like():
    return train_bpe(TEKKEN_REGEX, None, MISTRAL_SPECIAL, [], ignore_merges=True)


def qwen_like():
    return train_bpe(QWEN2_REGEX, normalizers.NFC(), QWEN_SPECIAL, QWEN_PLAIN_ADDED, ignore_merges=False)


def byte_vocab_nfc():
    """NFC + ByteLevel over the 256 byte tokens, no merges: the ids spell the normalized UTF-8."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


class TokenizerRefereeTest(unittest.TestCase):

    def setUp(self):
        self.tmp = referee.temp_dir()
        self.addCleanup(self.tmp.cleanup)

    def compare(self, tok, name, strings):
        path = os.path.join(self.tmp.name, name, "tokenizer.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tok.save(path)
        inputs = os.path.join(self.tmp.name, name + "-in.json")
        output = os.path.join(self.tmp.name, name + "-out.json")
        with open(inputs, "w", encoding="utf-8") as f:
            json.dump(strings, f, ensure_ascii=False)
        referee.baton("tokenize", "--tokenizer", path, "--inputs", inputs, "--output", output)
        with open(output, encoding="utf-8") as f:
            got = json.load(f)
        self.assertEqual(len(got), len(strings))
        failures = []
        for text, ids in zip(strings, got):
            want = tok.encode(text, add_special_tokens=False).ids
            if ids != want:
                failures.append(f"{text!r}:\n  tokenizers {want}\n  baton      {ids}")
        self.assertFalse(failures, f"{len(failures)}/{len(strings)} strings differ ({name}):\n" +
                         "\n".join(failures[:10]))
        return len(strings)

    def test_tekken_like_matches_tokenizers(self):
        n = self.compare(tekken_like(), "tekken", HARD_STRINGS + fuzz_strings(2, 500))
        print(f"tekken-like: {n} strings identical")

    def test_qwen_like_matches_tokenizers(self):
        n = self.compare(qwen_like(), "qwen", HARD_STRINGS + fuzz_strings(3, 500))
        print(f"qwen-like (NFC): {n} strings identical")

    def test_nfc_on_every_decomposable_code_point(self):
        # Each character with a canonical decomposition (Unicode of Python's unicodedata, which generated
        # Baton's tables), composed and decomposed, after a base letter and before a combining mark, plus
        # seeded random runs of bases and marks in arbitrary order (canonical reordering + blocking).
        chars = [chr(c) for c in range(0x110000)
                 if not 0xD800 <= c <= 0xDFFF and unicodedata.decomposition(chr(c))[:1] not in ("", "<")]
        strings = []
        for ch in chars:
            strings += [ch, unicodedata.normalize("NFD", ch), "a" + ch + "\u0323\u0301"]
        rng = random.Random(4)
        marks = ["\u0300", "\u0301", "\u0308", "\u0323", "\u0327", "\u0328", "\u031b", "\u0345", "\u093c", "\u05b0"]
        bases = list("aeiouAEOUnsczwyIΑωιυ") + ["\u1100", "\u1161", "\uac00", "\u0915", "\u05d0"]
        for _ in range(2000):
            strings.append("".join(rng.choice(bases + marks * 2) for _ in range(rng.randint(1, 8))))
        tok = byte_vocab_nfc()
        # tokenizers agrees with Python's NFC except on characters its tables lack; Baton's tables leave those
        # out too (scripts/gen_unicode_nfc.py UPSTREAM_UNMAPPED). If a tokenizers upgrade changes this set,
        # update that list and regenerate core/text/unicode_nfc_data.cc.
        nfc = normalizers.NFC()
        differ = {ord(ch) for ch in chars for form in (ch, unicodedata.normalize("NFD", ch))
                  if nfc.normalize_str(form) != unicodedata.normalize("NFC", form)}
        self.assertEqual(differ, {0x11938}, "tokenizers' NFC vs unicodedata changed: " + str(sorted(map(hex, differ))))
        n = self.compare(tok, "nfc", strings)
        print(f"NFC: {n} strings identical ({len(chars)} decomposable code points)")


if __name__ == "__main__":
    unittest.main()

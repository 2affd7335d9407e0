"""Referee: Wan's text encoder path (core/text/umt5_*, unigram_tokenizer, wan_prompt) against transformers,
tokenizers and diffusers.

1. Tokenizer: a REAL sentencepiece Unigram model trained here (normalization_rule_name nmt_nfkc, so a real
   precompiled charsmap) on generated multilingual text, converted to tokenizer.json by transformers as the
   umt5-xxl one was (T5Tokenizer from spiece.model), plus the other forms T5 tokenizer.json files take (the
   SpmConverter form: Strip + Replace(" {2,}", "▁") + Metaspace; the 2023 form: Precompiled + Replace(" {2,}",
   " "); byte_fallback). `baton tokenize --add-special-tokens true` must equal tokenizers' ids on hard strings
   (accents composed/decomposed, CJK, full-width, multiple spaces, emoji, unknown scripts, control characters,
   added tokens in the text) and seeded random ones.
2. Encoder: a tiny random transformers UMT5EncoderModel (saved fp32, bf16 and sharded) against
   `baton text-encode --input-ids` on a padded batch: last_hidden_state, 1e-4 relative.
3. Prompt path: a tiny WanPipeline folder (umT5 + the converted tokenizer) and diffusers'
   WanPipeline._get_t5_prompt_embeds (prompt_clean, truncation with </s>, right padding, trim + zero pad)
   against `baton text-encode --prompt`; prompt_clean itself against diffusers' on HTML entities and whitespace.
ftfy is not installed in the venv, so diffusers skips ftfy.fix_text, as Baton does.
"""

import copy
import json
import os
import random
import types
import unittest

import sentencepiece as spm
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
from transformers import T5Tokenizer, UMT5Config, UMT5EncoderModel
from transformers.convert_slow_tokenizer import T5Converter

import referee

TOLERANCE = 1e-4
EXTRA_IDS = 8

ALPHABETS = ["abcdefghijklmnopqrstuvwxyz", "абвгдежзиклмнопрстуфхцчшщыэюя", "αβγδεζηθικλμνξοπρστυφχψω",
             "日本語中文字符和标点の猫犬動画", "가나다라마바사아자차카타파하한국어", "éèêëàâäôöüçñß", "ＡＢＣａｂｃ１２３"]

HARD_STRINGS = [
    "", " ", "a", "A video of a cat.", "  leading and trailing  ", "multiple     spaces   inside", "tab\tnew\nline\r\nend",
    "café naïve Ångström", "cafe\u0301 nai\u0308ve A\u030angstro\u0308m", "a\u0308\u0301 stacked", "\u0301 lone mark",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "Ａ\u0301 full-width with a mark", "ﬁ ligature ① ㎏ ㍿ ½ ²", "日本語のテキストです。",
    "中文字符和标点，。！？", "한국어 텍스트", "\u1112\u1161\u11ab jamo", "Привет мир κόσμος",
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷 ❤️ #\ufe0f", "unknown scripts: עברית العربية ภาษาไทย हिन्दी", "\u00a0nbsp\u3000ideographic",
    "zero\u200bwidth joiner\u200dhere", "control\x01\x07chars\x7f", "▁ literal metaspace ▁▁", "<extra_id_3> sentinel",
    "end with eos</s>", "<pad><pad> pads", "<unk> unk typed", "x" * 200, "日" * 50,
    "line\u2028separator\u0085next", "e\u0301\u0301\u0301", "\r\n\r\n", "a\u200d", "1\ufe0f\u20e3 keycap",
]


def fuzz_strings(seed, count):
    rng = random.Random(seed)
    pool = (list("".join(ALPHABETS)) + list("  \t\n\r.,!?'\"-()") + ["\u0301", "\u0308", "\u0327", "\u200d",
            "\ufe0f", "😀", "🏽", "\u00a0", "\u3000", "ﬁ", "①", "ℌ", "ǅ", "\x01", "<extra_id_0>", "</s>"])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(count)]


_TRAINED = {}  # byte_fallback -> spiece.model bytes: each model is trained once per run


def train_spm(directory, byte_fallback=False):
    path = os.path.join(directory, "spiece.model")
    if byte_fallback not in _TRAINED:
        _TRAINED[byte_fallback] = _train_spm(directory, byte_fallback)
    with open(path, "wb") as f:
        f.write(_TRAINED[byte_fallback])
    return path


def _train_spm(directory, byte_fallback):
    rng = random.Random(0)

    def word():
        a = rng.choice(ALPHABETS)
        return "".join(rng.choice(a) for _ in range(rng.randint(1, 7)))

    corpus = os.path.join(directory, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(" ".join(word() for _ in range(rng.randint(3, 12))) for _ in range(3000)))
    prefix = os.path.join(directory, "trained")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=400, model_type="unigram",
                                   normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=0.995, byte_fallback=byte_fallback, minloglevel=2)
    with open(prefix + ".model", "rb") as f:
        return f.read()


def converted_tokenizer(directory):
    """spiece.model -> tokenizer.json by transformers' T5Tokenizer (the Wan/umt5 tokenizer folder's form)."""
    spm_dir = os.path.join(directory, "spm")
    os.makedirs(spm_dir, exist_ok=True)
    os.replace(train_spm(directory), os.path.join(spm_dir, "spiece.model"))
    tok = T5Tokenizer.from_pretrained(spm_dir, extra_ids=EXTRA_IDS)
    return tok, os.path.join(spm_dir, "spiece.model")


def spm_converter_form(spiece):
    """transformers' SpmConverter/T5Converter pipeline: Precompiled + Strip(right) + Replace(" {2,}", "▁")."""
    stub = types.SimpleNamespace(vocab_file=spiece, _extra_ids=EXTRA_IDS, legacy=True, add_prefix_space=True,
                                 convert_tokens_to_ids=lambda token: 1)
    return T5Converter(stub).converted()


def form_2023(tok):
    """The form of T5 tokenizer.json files converted before the Metaspace prepend_scheme rework."""
    tok = Tokenizer.from_str(tok.to_str())
    charsmap = json.loads(tok.to_str())["normalizer"]["precompiled_charsmap"]
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap_bytes(charsmap)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    return tok


def charsmap_bytes(b64):
    import base64
    return base64.b64decode(b64)


class TokenizerTest(unittest.TestCase):

    def setUp(self):
        self.tmp = referee.temp_dir()
        self.addCleanup(self.tmp.cleanup)

    def compare(self, tok, name, strings):
        folder = os.path.join(self.tmp.name, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "tokenizer.json")
        tok.save(path)
        inputs, output = os.path.join(folder, "in.json"), os.path.join(folder, "out.json")
        with open(inputs, "w", encoding="utf-8") as f:
            json.dump(strings, f, ensure_ascii=False)
        referee.baton("tokenize", "--tokenizer", path, "--inputs", inputs, "--output", output,
                      "--add-special-tokens", "true")
        with open(output, encoding="utf-8") as f:
            got = json.load(f)
        failures = []
        reloaded = Tokenizer.from_file(path)
        for text, ids in zip(strings, got):
            want = reloaded.encode(text, add_special_tokens=True).ids
            if ids != want:
                failures.append(f"{text!r}:\n  tokenizers {want}\n  baton      {ids}")
        self.assertEqual(len(got), len(strings))
        self.assertFalse(failures, f"{len(failures)}/{len(strings)} strings differ ({name}):\n" +
                         "\n".join(failures[:10]))
        unk = sum(reloaded.token_to_id("<unk>") in reloaded.encode(s).ids for s in strings)
        print(f"{name}: {len(strings)} strings equal ({unk} with <unk>)")

    def test_converted_t5_tokenizer(self):
        tok, _ = converted_tokenizer(self.tmp.name)
        backend = tok.backend_tokenizer
        self.assertEqual(json.loads(backend.to_str())["normalizer"]["type"], "Precompiled")
        self.assertEqual(backend.encode("").ids, [1])  # "$A </s>"
        self.compare(backend, "t5", HARD_STRINGS + fuzz_strings(1, 300))

    def test_spm_converter_form(self):
        _, spiece = converted_tokenizer(self.tmp.name)
        self.compare(spm_converter_form(spiece), "spm_converter", HARD_STRINGS + fuzz_strings(2, 300))

    def test_2023_form(self):
        tok, _ = converted_tokenizer(self.tmp.name)
        self.compare(form_2023(tok.backend_tokenizer), "t5_2023", HARD_STRINGS + fuzz_strings(3, 300))

    def test_byte_fallback(self):
        spiece = train_spm(self.tmp.name, byte_fallback=True)
        stub = types.SimpleNamespace(vocab_file=spiece, _extra_ids=EXTRA_IDS, legacy=True, add_prefix_space=True,
                                     convert_tokens_to_ids=lambda token: 1)
        converter = T5Converter(stub)
        converter.handle_byte_fallback = True
        tok = converter.converted()
        self.assertTrue(json.loads(tok.to_str())["model"]["byte_fallback"])
        self.compare(tok, "byte_fallback", HARD_STRINGS + fuzz_strings(4, 200))


def tiny_umt5(vocab_size, seed, max_distance=20):
    config = UMT5Config(vocab_size=vocab_size, d_model=32, d_kv=8, d_ff=48, num_layers=3, num_heads=4,
                        relative_attention_num_buckets=32, relative_attention_max_distance=max_distance)
    torch.manual_seed(seed)
    model = UMT5EncoderModel(config).eval()
    with torch.no_grad():  # the default init (std 0.05-ish, norms 1) leaves layers near identity
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            elif "relative_attention_bias" in name:
                p.normal_(0.0, 1.0)
            elif p.dim() == 2 and "shared" not in name:
                p.normal_(0.0, p.shape[1] ** -0.5)
    return model


def last_hidden_state(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


class EncoderTest(unittest.TestCase):
    """`baton text-encode --input-ids` (with attention_mask) on a folder holding only text_encoder/."""

    def check(self, model, name, save_dtype=torch.float32, **save_kwargs):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        copy.deepcopy(model).to(save_dtype).save_pretrained(os.path.join(tmp.name, "text_encoder"), **save_kwargs)
        torch.manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (3, 40))
        lengths = [40, 23, 1]  # right padding as the Wan tokenizer pads; one row of a single token
        mask = torch.tensor([[1] * n + [0] * (40 - n) for n in lengths])
        ids = ids.masked_fill(mask == 0, 0)
        inputs, output = os.path.join(tmp.name, "ids.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"input_ids": ids, "attention_mask": mask}, inputs)
        referee.baton("text-encode", "--model", tmp.name, "--input-ids", inputs, "--output", output)
        got = load_file(output)["prompt_embeds"]
        want = last_hidden_state(model, ids, mask)
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        err = referee.max_rel_error(got, want)  # every position, padded ones too
        print(f"umT5 {name}: rel err {err:.2e}")
        self.assertLessEqual(err, TOLERANCE)

    def test_fp32(self):
        self.check(tiny_umt5(64, seed=0), "fp32")

    def test_long_distances(self):
        # max_distance 8: most of the 40x40 offsets fall in the logarithmic and clamped buckets.
        self.check(tiny_umt5(64, seed=1, max_distance=9), "max_distance 9")

    def test_sharded(self):
        self.check(tiny_umt5(64, seed=2), "sharded", max_shard_size="20KB")

    def test_bf16_checkpoint(self):
        model = tiny_umt5(64, seed=3)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.bfloat16().float())
        self.check(model, "bf16 checkpoint", save_dtype=torch.bfloat16)


PROMPTS = [
    "A cat walks on the grass, realistic style.",
    "  Leading,   inner\t\ttabs and\nnewlines, trailing  ",
    "HTML: &amp;lt;b&amp;gt;bold&amp;lt;/b&amp;gt; &quot;q&quot; &nbsp;x &#x1F600; &#128512 &notit; &amp &AMP; &#0; &#x80;",
    "cafe\u0301 日本語 Ｆｕｌｌ 😀 한국어 עברית \x1c sep \u3000 ideographic",
    "",
    "<extra_id_0> typed sentinel </s>",
]
LONG_PROMPT = "a long prompt about colorful things and more words " * 10


class WanPromptTest(unittest.TestCase):
    """diffusers' WanPipeline._get_t5_prompt_embeds on the tiny encoder + the converted tokenizer."""

    def test_prompt_embeds(self):
        from diffusers import WanPipeline
        from transformers import AutoTokenizer
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        tok, _ = converted_tokenizer(tmp.name)
        tok.save_pretrained(os.path.join(tmp.name, "tokenizer"))
        tokenizer = AutoTokenizer.from_pretrained(os.path.join(tmp.name, "tokenizer"))
        model = tiny_umt5(tokenizer.vocab_size + 4, seed=4)
        model.save_pretrained(os.path.join(tmp.name, "text_encoder"))
        pipe = types.SimpleNamespace(tokenizer=tokenizer, text_encoder=model)  # the method reads only these
        for prompt, max_len in [(p, 64) for p in PROMPTS] + [(LONG_PROMPT, 24)]:
            output = os.path.join(tmp.name, "out.safetensors")
            referee.baton("text-encode", "--model", tmp.name, "--prompt", prompt, "--output", output,
                          "--max-sequence-length", max_len)
            got = load_file(output)
            with torch.no_grad():
                want = WanPipeline._get_t5_prompt_embeds(pipe, prompt, max_sequence_length=max_len,
                                                         device=torch.device("cpu"), dtype=torch.float32)
            from diffusers.pipelines.wan.pipeline_wan import prompt_clean
            ids = tokenizer([prompt_clean(prompt)], padding="max_length", max_length=max_len, truncation=True,
                            add_special_tokens=True, return_tensors="pt")
            self.assertEqual(got["input_ids"].tolist(), ids.input_ids.tolist(), f"ids differ for {prompt!r}")
            self.assertEqual(got["attention_mask"].tolist(), ids.attention_mask.tolist())
            self.assertEqual(tuple(got["prompt_embeds"].shape), tuple(want.shape))
            n = int(ids.attention_mask.sum())
            self.assertTrue(torch.all(got["prompt_embeds"][:, n:] == 0), "padding rows must be zeros")
            err = referee.max_rel_error(got["prompt_embeds"], want)
            print(f"Wan prompt {prompt[:30]!r} L={max_len}: {n} tokens, rel err {err:.2e}")
            self.assertLessEqual(err, TOLERANCE, prompt)


if __name__ == "__main__":
    unittest.main()

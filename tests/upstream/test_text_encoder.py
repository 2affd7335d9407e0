"""Referee: Baton's text encoders and FLUX.2 prompt path against transformers and diffusers.

1. Text encoders, ids in: tiny random transformers `Mistral3ForConditionalGeneration` (vision tower present,
   31 layers so FLUX.2-dev's layers 10/20/30 exist, head_dim != hidden/heads, GQA, with and without a sliding
   window) and `Qwen3ForCausalLM` (klein's layers 9/18/27, q_norm/k_norm), saved with save_pretrained (fp32,
   bf16, sharded) into a folder holding ONLY text_encoder/. `baton text-encode --input-ids` must equal the
   stacked hidden states the pipelines take.
2. The whole prompt path: a tiny `Flux2Pipeline` (Mistral3 + the Tekken-like tokenizer of test_tokenizer.py
   with a "<s> $A" post-processor) and a tiny `Flux2KleinPipeline` (Qwen3 + the Qwen-like tokenizer), saved
   with save_pretrained and loaded back; `pipe.encode_prompt(...)` against `baton text-encode --prompt` (chat
   template, truncation, padding side and pad id, attention mask, layer stacking) for prompts with decomposed
   accents (NFC for Qwen), emoji, "[IMG]" (removed by diffusers' format_input), special tokens typed by the
   user, an empty prompt, and one longer than max_sequence_length (truncation).
The dev tokenizer stands in for the PixtralProcessor the real pipeline holds (it needs torchvision, absent
from the venv); both tokenize a rendered template that starts with bos without adding specials. The chat
templates are trimmed copies of the real models' (Mistral-Small-3.1's system/[INST] blocks, Qwen3's
im_start/im_end with enable_thinking=False): the test cannot download the real ones.
Tolerance: 1e-4 relative (max |a - e| / max |e|) in fp32; ids must be equal.
"""

import copy
import os
import unittest

import torch
from safetensors.torch import load_file, save_file
from tokenizers import processors
from transformers import (Mistral3Config, Mistral3ForConditionalGeneration, MistralConfig, PixtralVisionConfig,
                          PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM)
from diffusers import AutoencoderKLFlux2, Flux2KleinPipeline, Flux2Pipeline, Flux2Transformer2DModel
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux2.pipeline_flux2 import format_input

import referee
import test_tokenizer

TOLERANCE = 1e-4
HIDDEN = 32

# Mistral-Small-3.1's template, trimmed to the system + user-text path Flux2Pipeline uses.
MISTRAL_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- if messages[0]['content'] is string %}{%- set system_message = messages[0]['content'] %}"
    "{%- else %}{%- set system_message = messages[0]['content'][0]['text'] %}{%- endif %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if message['content'] is string %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST]' }}{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}{%- else %}{{- '[IMG]' }}{%- endif %}"
    "{%- endfor %}{{- '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}{%- endif %}"
    "{%- endfor %}")

# Qwen3's template, trimmed to plain messages (no tools, no reasoning content).
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}")

PROMPTS = [
    "A photo of a red apple on a wooden table.",
    "Cafe\u0301 sign, \u212b, na\u0131\u0308ve: 日本語 and emoji 👍🏽 [IMG] with  two  spaces\nand a newline",
    "",
    "special tokens typed in the prompt: <s> [INST] </s> <|im_end|> <think>",
]
LONG_PROMPT = "a very long prompt about many colorful things " * 40


def tiny_mistral3(vocab_size, seed, sliding_window=None):
    text = MistralConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=31,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1e6,
                         rms_norm_eps=1e-5, max_position_embeddings=2048, sliding_window=sliding_window)
    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 head_dim=8, image_size=32, patch_size=16)
    torch.manual_seed(seed)
    model = Mistral3ForConditionalGeneration(Mistral3Config(text_config=text, vision_config=vision,
                                                            image_token_index=5)).eval()
    randomize_norms(model)
    return model


def tiny_qwen3(vocab_size, seed):
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=28,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1e6,
                         rms_norm_eps=1e-6, max_position_embeddings=2048, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    randomize_norms(model)
    return model


def randomize_norms(model):
    """RMSNorm weights default to 1; perturb them (and scale up the tiny init) so every tensor matters."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            elif p.dim() == 2:
                p.mul_(5.0)  # init std 0.02 makes every layer nearly the identity


def stacked_hidden_states(model, input_ids, attention_mask, layers):
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    return torch.cat([out.hidden_states[k] for k in layers], dim=-1)


def tiny_transformer(joint_attention_dim, guidance_embeds):
    torch.manual_seed(7)
    return Flux2Transformer2DModel(patch_size=1, in_channels=128, num_layers=1, num_single_layers=1,
                                   attention_head_dim=16, num_attention_heads=2,
                                   joint_attention_dim=joint_attention_dim, timestep_guidance_channels=256,
                                   axes_dims_rope=(4, 4, 4, 4), guidance_embeds=guidance_embeds)


def tiny_vae():
    torch.manual_seed(8)
    return AutoencoderKLFlux2(block_out_channels=(16, 32, 32, 32), layers_per_block=1, norm_num_groups=8)


class TextEncoderIdsTest(unittest.TestCase):
    """`baton text-encode --input-ids` on a folder with only text_encoder/."""

    def check(self, model, layers, name, save_dtype=torch.float32, **save_kwargs):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        copy.deepcopy(model).to(save_dtype).save_pretrained(os.path.join(tmp.name, "text_encoder"), **save_kwargs)
        if "max_shard_size" in save_kwargs:
            self.assertTrue(os.path.exists(os.path.join(tmp.name, "text_encoder", "model.safetensors.index.json")))
        self.assertEqual(os.listdir(tmp.name), ["text_encoder"])
        torch.manual_seed(1)
        vocab = model.config.get_text_config().vocab_size
        ids = torch.randint(0, vocab, (1, 45))
        inputs, output = os.path.join(tmp.name, "ids.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"input_ids": ids}, inputs)
        referee.baton("text-encode", "--model", tmp.name, "--input-ids", inputs, "--output", output)
        got = load_file(output)["prompt_embeds"]
        want = stacked_hidden_states(model, ids, torch.ones_like(ids), layers)
        self.assertEqual(tuple(got.shape), tuple(want.shape))
        err = referee.max_rel_error(got, want)
        print(f"{name} layers {layers}: rel err {err:.2e}")
        self.assertLessEqual(err, TOLERANCE)

    def test_mistral3_layers_10_20_30(self):
        self.check(tiny_mistral3(vocab_size=300, seed=0), (10, 20, 30), "Mistral3")

    def test_mistral3_sliding_window(self):
        # Keys more than sliding_window positions back are masked (45 tokens, window 16).
        self.check(tiny_mistral3(vocab_size=300, seed=2, sliding_window=16), (10, 20, 30), "Mistral3 window 16")

    def test_qwen3_layers_9_18_27(self):
        self.check(tiny_qwen3(vocab_size=300, seed=0), (9, 18, 27), "Qwen3")

    def test_sharded_checkpoint(self):
        # Real encoders ship as shards + model.safetensors.index.json.
        self.check(tiny_qwen3(vocab_size=300, seed=5), (9, 18, 27), "Qwen3 sharded", max_shard_size="40KB")

    def test_bf16_checkpoint(self):
        # Real checkpoints are bf16; Baton computes in fp32 from them, so the reference is the same bf16 weights
        # run in fp32.
        model = tiny_mistral3(vocab_size=300, seed=6)
        with torch.no_grad():  # round the weights only: module.to() would also round the RoPE inv_freq buffer
            for p in model.parameters():
                p.copy_(p.bfloat16().float())
        self.check(model, (10, 20, 30), "Mistral3 bf16 checkpoint", save_dtype=torch.bfloat16)


class EncodePromptCase(unittest.TestCase):
    """Holds compare(): `baton text-encode --prompt` against the pipeline's encode_prompt (no tests itself)."""

    def compare(self, pipe_dir, pipe, prompt, max_sequence_length):
        output = os.path.join(pipe_dir, "out.safetensors")
        referee.baton("text-encode", "--model", pipe_dir, "--prompt", prompt, "--output", output,
                      "--max-sequence-length", max_sequence_length)
        got = load_file(output)
        with torch.no_grad():
            want, _ = pipe.encode_prompt(prompt, device=torch.device("cpu"), max_sequence_length=max_sequence_length)
        if isinstance(pipe, Flux2Pipeline):
            ids = pipe.tokenizer.apply_chat_template(format_input([prompt]), add_generation_prompt=False, tokenize=True,
                                                     return_dict=True, return_tensors="pt", padding="max_length",
                                                     truncation=True, max_length=max_sequence_length)["input_ids"]
        else:
            text = pipe.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                      add_generation_prompt=True, enable_thinking=False)
            ids = pipe.tokenizer(text, return_tensors="pt", padding="max_length", truncation=True,
                                 max_length=max_sequence_length)["input_ids"]
        self.assertEqual(got["input_ids"].tolist(), ids.tolist(), f"token ids differ for {prompt!r}")
        self.assertEqual(tuple(got["prompt_embeds"].shape), tuple(want.shape))
        err = referee.max_rel_error(got["prompt_embeds"], want)
        print(f"{type(pipe).__name__} L={max_sequence_length} {prompt[:30]!r}: ids equal, rel err {err:.2e}")
        self.assertLessEqual(err, TOLERANCE, prompt)


class PromptPathTest(EncodePromptCase):
    """Tiny pipelines built and saved by diffusers."""

    def test_flux2_dev_encode_prompt(self):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        tok = test_tokenizer.tekken_like()
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                       pad_token="<pad>", padding_side="left")
        fast.chat_template = MISTRAL_TEMPLATE
        text_encoder = tiny_mistral3(vocab_size=fast.vocab_size + 8, seed=3)
        Flux2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=tiny_vae(), text_encoder=text_encoder,
                      tokenizer=fast,
                      transformer=tiny_transformer(3 * HIDDEN, guidance_embeds=True)).save_pretrained(tmp.name)
        pipe = Flux2Pipeline.from_pretrained(tmp.name)
        for prompt in PROMPTS:
            self.compare(tmp.name, pipe, prompt, 512)
        self.compare(tmp.name, pipe, LONG_PROMPT, 100)  # the template alone is ~50 tokens: truncation

    def test_flux2_klein_encode_prompt(self):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        fast = PreTrainedTokenizerFast(tokenizer_object=test_tokenizer.qwen_like(), eos_token="<|im_end|>",
                                       pad_token="<|endoftext|>", padding_side="right",
                                       chat_template=QWEN3_TEMPLATE)
        text_encoder = tiny_qwen3(vocab_size=fast.vocab_size + 8, seed=4)
        Flux2KleinPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=tiny_vae(), text_encoder=text_encoder,
                           tokenizer=fast,
                           transformer=tiny_transformer(3 * HIDDEN, guidance_embeds=False)).save_pretrained(tmp.name)
        pipe = Flux2KleinPipeline.from_pretrained(tmp.name)
        for prompt in PROMPTS:
            self.compare(tmp.name, pipe, prompt, 512)
        self.compare(tmp.name, pipe, LONG_PROMPT, 100)


class BatonTinyPipelineTest(EncodePromptCase):
    """The folder `baton init-weights --pipeline tiny` writes, read by transformers/diffusers: its text encoder,
    tokenizer (chat template, left padding) and transformer load upstream, and encode_prompt agrees with Baton."""

    def test_baton_tiny_pipeline_encode_prompt(self):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        referee.baton("init-weights", "--pipeline", "tiny", "--out", tmp.name, "--seed", 3)

        def sub(name):
            return os.path.join(tmp.name, name)

        pipe = Flux2Pipeline(
            scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(sub("scheduler")),
            vae=AutoencoderKLFlux2.from_pretrained(sub("vae")),
            text_encoder=Mistral3ForConditionalGeneration.from_pretrained(sub("text_encoder"),
                                                                          dtype=torch.float32).eval(),
            tokenizer=PreTrainedTokenizerFast.from_pretrained(sub("tokenizer")),
            transformer=Flux2Transformer2DModel.from_pretrained(sub("transformer")))
        for prompt in PROMPTS:
            self.compare(tmp.name, pipe, prompt, 512)


if __name__ == "__main__":
    unittest.main()

"""Referee: Wan LoRA files in both namings, Baton <-> diffusers.

A tiny random WanTransformer3DModel gets a PEFT LoRA (random non-zero B on attention and feed-forward), saved by
diffusers' own WanPipeline.save_lora_weights (diffusers naming, "transformer." prefix). Then:
  - `baton lora-convert --to original` writes the original/ComfyUI naming ("diffusion_model.blocks.N.self_attn.q"),
    and `--to diffusers` converts that back; diffusers' WanPipeline.load_lora_weights must load all three files onto
    the plain model and give the PEFT model's output (1e-5);
  - the other way: an original-naming file written here from the reference key table (as ComfyUI/musubi write them)
    converts with `baton lora-convert --to diffusers` and loads the same;
  - `baton forward --lora` applies each diffusers-named file as PEFT does (Baton's Wan forward, 1e-4 of max|out|).
"""

import json
import os
import unittest

import torch
from diffusers import WanPipeline, WanTransformer3DModel
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file

from referee import baton, max_rel_error, temp_dir

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "models", "wan-tiny.json")
TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]
# diffusers -> original module names for the targets (../shared/reference/models-and-trainers.md, A2).
ORIGINAL = {"attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
            "attn1.to_out.0": "self_attn.o", "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k",
            "attn2.to_v": "cross_attn.v", "attn2.to_out.0": "cross_attn.o", "ffn.net.0.proj": "ffn.0",
            "ffn.net.2": "ffn.2"}


def config():
    with open(CONFIG) as f:
        c = json.load(f)
    c.pop("_class_name")
    return c


def plain_model():
    torch.manual_seed(0)
    return WanTransformer3DModel(**config()).eval()


def inputs():
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(1, 4, 2, 8, 8, generator=g), timestep=torch.tensor([700.0]),
                encoder_hidden_states=torch.randn(1, 5, 16, generator=g))


def to_original(peft_sd):
    out = {}
    for key, t in peft_sd.items():
        module, suffix = key.rsplit(".lora_", 1)
        prefix, block, rest = module.split(".", 2)
        out[f"diffusion_model.{prefix}.{block}.{ORIGINAL[rest]}.lora_{suffix}"] = t
    return out


class WanLoraInteropTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = temp_dir()
        cls.dir = cls.tmp.name
        model = plain_model()
        # lora_alpha = r: the files carry no alpha and mean scale 1.
        model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=TARGETS, init_lora_weights=False))
        with torch.no_grad():
            cls.expected = model(**inputs()).sample
        cls.peft_sd = get_peft_model_state_dict(model)
        WanPipeline.save_lora_weights(cls.dir, transformer_lora_layers=cls.peft_sd)
        cls.diffusers_file = os.path.join(cls.dir, "pytorch_lora_weights.safetensors")
        save_file(inputs(), os.path.join(cls.dir, "inputs.safetensors"))
        plain_model().save_pretrained(os.path.join(cls.dir, "transformer"))

    def load_in_diffusers(self, path):
        pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=plain_model(), vae=None, scheduler=None)
        pipe.load_lora_weights(path)
        loaded = sum(1 for name, _ in pipe.transformer.named_modules() if name.rsplit(".", 1)[0].endswith(".lora_A"))
        self.assertEqual(loaded, len(self.peft_sd) // 2, path)
        with torch.no_grad():
            out = pipe.transformer(**inputs()).sample
        self.assertLess((out - self.expected).abs().max().item(), 1e-5, path)

    def baton_forward_matches(self, path):
        out = os.path.join(self.dir, "out.safetensors")
        baton("forward", "--model", os.path.join(self.dir, "transformer"), "--inputs",
              os.path.join(self.dir, "inputs.safetensors"), "--output", out, "--lora", path)
        self.assertLess(max_rel_error(load_file(out)["output"], self.expected), 1e-4, path)

    def test_baton_converts_diffusers_files_both_ways(self):
        original = os.path.join(self.dir, "original.safetensors")
        back = os.path.join(self.dir, "back.safetensors")
        baton("lora-convert", "--in", self.diffusers_file, "--out", original, "--to", "original")
        keys = set(load_file(original))
        self.assertIn("diffusion_model.blocks.0.self_attn.q.lora_A.weight", keys)
        self.assertIn("diffusion_model.blocks.1.ffn.2.lora_B.weight", keys)
        baton("lora-convert", "--in", original, "--out", back, "--to", "diffusers")
        for path in (self.diffusers_file, original, back):
            self.load_in_diffusers(path)
        for path in (self.diffusers_file, back):
            self.baton_forward_matches(path)

    def test_original_files_from_other_trainers_convert(self):
        comfy = os.path.join(self.dir, "comfy.safetensors")
        save_file({k: v.contiguous() for k, v in to_original(self.peft_sd).items()}, comfy)
        self.load_in_diffusers(comfy)  # diffusers' own converter reads it
        converted = os.path.join(self.dir, "converted.safetensors")
        baton("lora-convert", "--in", comfy, "--out", converted, "--to", "diffusers")
        self.load_in_diffusers(converted)
        self.baton_forward_matches(converted)


if __name__ == "__main__":
    unittest.main()

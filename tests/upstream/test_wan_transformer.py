"""Referee: Baton's Wan 2.x transformer forward against diffusers' WanTransformer3DModel, fp32.

One tiny random model per variant (Wan 2.1 T2V, Wan 2.1 I2V with the CLIP image branch, Wan 2.2 I2V without it,
Wan 2.2 TI2V with per-token timesteps, a Wan 2.2 A14B-like pipeline folder with two experts), each saved by
diffusers and also written in the original Wan naming, which diffusers' own single-file converter must read back to
the same model before Baton reads it. `baton forward` runs on each layout and must match diffusers' forward.

Tolerance: 1e-4 of the output's max |value| (as the FLUX.2 referee): a wrong weight, RoPE axis or modulation chunk
gives O(1) errors.
"""

import json
import math
import os
import unittest

import torch
from diffusers import WanTransformer3DModel
from safetensors.torch import load_file, save_file

from referee import baton, max_rel_error, temp_dir

TOLERANCE = 1e-4

BASE = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=4, text_dim=16,
    freq_dim=256, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
    rope_max_seq_len=32,
)
VARIANTS = {
    "t2v_2.1": dict(BASE),
    # 36-like input (noise + mask + image latents), CLIP branch: image_dim and added_kv_proj_dim (= inner dim).
    "i2v_2.1": dict(BASE, in_channels=12, image_dim=8, added_kv_proj_dim=24),
    "i2v_2.2": dict(BASE, in_channels=12, num_layers=3),
    "ti2v_2.2": dict(BASE, in_channels=6, out_channels=6, num_attention_heads=3, attention_head_dim=8),
}

# Original Wan names (Wan-AI / DiffSynth), from the reference table (diffusers' convert_wan_to_diffusers.py); diffusers'
# own single-file converter proves the result before Baton reads it.
GLOBAL_RENAMES = {
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "condition_embedder.image_embedder.norm1": "img_emb.proj.0",
    "condition_embedder.image_embedder.ff.net.0.proj": "img_emb.proj.1",
    "condition_embedder.image_embedder.ff.net.2": "img_emb.proj.3",
    "condition_embedder.image_embedder.norm2": "img_emb.proj.4",
    "proj_out": "head.head",
    "scale_shift_table": "head.modulation",
    "patch_embedding": "patch_embedding",
}
BLOCK_RENAMES = {
    "attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
    "attn1.to_out.0": "self_attn.o", "attn1.norm_q": "self_attn.norm_q", "attn1.norm_k": "self_attn.norm_k",
    "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k", "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o", "attn2.norm_q": "cross_attn.norm_q", "attn2.norm_k": "cross_attn.norm_k",
    "attn2.add_k_proj": "cross_attn.k_img", "attn2.add_v_proj": "cross_attn.v_img",
    "attn2.norm_added_k": "cross_attn.norm_k_img", "norm2": "norm3", "ffn.net.0.proj": "ffn.0",
    "ffn.net.2": "ffn.2", "scale_shift_table": "modulation",
}


def to_original(sd: dict, prefix: str = "") -> dict:
    out = {}
    for key, t in sd.items():
        parts = key.split(".")
        if parts[0] == "blocks":
            module, leaf = ".".join(parts[2:-1]), parts[-1]
            if key.endswith("scale_shift_table"):
                module, leaf = "scale_shift_table", None
            new = ".".join(p for p in ("blocks", parts[1], BLOCK_RENAMES[module], leaf) if p)
        else:
            module, leaf = (key, None) if key == "scale_shift_table" else (".".join(parts[:-1]), parts[-1])
            new = ".".join(p for p in (GLOBAL_RENAMES[module], leaf) if p)
        out[prefix + new] = t.contiguous()
    return out


def original_config(model, model_type: str) -> dict:
    c = model.config
    return {"_class_name": "WanModel", "model_type": model_type, "dim": c.num_attention_heads * c.attention_head_dim,
            "num_heads": c.num_attention_heads, "ffn_dim": c.ffn_dim, "freq_dim": c.freq_dim, "text_dim": c.text_dim,
            "in_dim": c.in_channels, "out_dim": c.out_channels, "num_layers": c.num_layers, "eps": c.eps,
            "patch_size": list(c.patch_size), "text_len": 512}


def make_model(seed: int, **config) -> WanTransformer3DModel:
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("scale_shift_table"):
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif p.dim() == 1 and name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p[0].numel()))
    return model


def make_inputs(model, seed: int, batch: int, frames: int, h: int, w: int, text_len: int, per_token=False) -> dict:
    c = model.config
    g = torch.Generator().manual_seed(seed)
    inputs = {
        "hidden_states": torch.randn(batch, c.in_channels, frames, h, w, generator=g),
        "timestep": 1000 * torch.rand(batch, generator=g),
        "encoder_hidden_states": torch.randn(batch, text_len, c.text_dim, generator=g),
    }
    if per_token:
        # As WanPipeline with expand_timesteps (Wan 2.2 TI2V): the first (conditioning) frame at t = 0.
        mask = torch.ones(frames, h // 2, w // 2)
        mask[0] = 0
        inputs["timestep"] = torch.stack([(mask * t).flatten() for t in inputs["timestep"]])
    if c.image_dim is not None:
        inputs["encoder_hidden_states_image"] = torch.randn(batch, 6, c.image_dim, generator=g)
    return inputs


def diffusers_forward(model, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, return_dict=False)[0]


def baton_forward(tmp: str, model_path: str, inputs: dict, *extra) -> torch.Tensor:
    in_path, out_path = os.path.join(tmp, "inputs.safetensors"), os.path.join(tmp, "baton_out.safetensors")
    save_file({k: v.contiguous() for k, v in inputs.items()}, in_path)
    baton("forward", "--model", model_path, "--inputs", in_path, "--output", out_path, *extra)
    return load_file(out_path)["output"]


class WanTransformerForwardTest(unittest.TestCase):
    def check(self, label, model, tmp, layouts, shapes, seed, per_token=False):
        for i, (batch, frames, h, w, text_len) in enumerate(shapes):
            inputs = make_inputs(model, seed * 100 + i, batch, frames, h, w, text_len, per_token)
            expected = diffusers_forward(model, inputs)
            # Every layout on the first shape; the others on the diffusers layout only (each run costs a process).
            for layout, args in layouts if i == 0 else layouts[:1]:
                got = baton_forward(tmp, *args[:1], inputs, *args[1:])
                self.assertEqual(got.shape, expected.shape)
                err = max_rel_error(got, expected)
                print(f"{label} {layout} B={batch} {frames}x{h}x{w} L={text_len}: rel error {err:.2e}")
                self.assertLess(err, TOLERANCE, f"{label}/{layout} B={batch} {frames}x{h}x{w}")

    def layouts(self, model, tmp, model_type, prefix=""):
        """The diffusers folder, an original folder (original config.json) and an original single file."""
        folder = os.path.join(tmp, "transformer")
        model.save_pretrained(folder, safe_serialization=True)
        # diffusers' converter strips "model.diffusion_model." but not ComfyUI's bare "diffusion_model.": it proves the
        # unprefixed file; Baton reads the prefixed one.
        proof = os.path.join(tmp, "wan-tiny-proof.safetensors")
        save_file(to_original(model.state_dict()), proof)
        original = to_original(model.state_dict(), prefix)
        single = os.path.join(tmp, "wan-tiny.safetensors")
        save_file(original, single)
        from_single = WanTransformer3DModel.from_single_file(proof, config=folder, local_files_only=True)
        expected_sd, got_sd = model.state_dict(), from_single.state_dict()
        self.assertEqual(sorted(expected_sd), sorted(got_sd))
        for key, t in expected_sd.items():
            self.assertTrue(torch.equal(got_sd[key], t), f"from_single_file differs at {key}")
        layouts = [("diffusers", (folder,)), ("original-file", (single, "--config", os.path.join(folder, "config.json")))]
        if model_type is not None:
            orig_dir = os.path.join(tmp, "original")
            os.makedirs(orig_dir)
            save_file(original, os.path.join(orig_dir, "diffusion_pytorch_model.safetensors"))
            with open(os.path.join(orig_dir, "config.json"), "w") as f:
                json.dump(original_config(model, model_type), f)
            layouts.append(("original-folder", (orig_dir,)))
        return layouts

    def test_t2v_2_1(self):
        model = make_model(3, **VARIANTS["t2v_2.1"])
        with temp_dir() as tmp:
            layouts = self.layouts(model, tmp, "t2v")
            self.check("t2v_2.1", model, tmp, layouts, [(1, 3, 4, 6, 7), (2, 2, 6, 4, 5)], seed=3)

    def test_i2v_2_1_with_clip_branch(self):
        model = make_model(5, **VARIANTS["i2v_2.1"])
        with temp_dir() as tmp:
            # diffusers' attention takes the last 512 context tokens as text: the text length is 512.
            layouts = self.layouts(model, tmp, None, prefix="model.diffusion_model.")
            self.check("i2v_2.1", model, tmp, layouts, [(1, 2, 4, 4, 512), (2, 1, 2, 4, 512)], seed=5)

    def test_i2v_2_2_without_clip_branch(self):
        model = make_model(7, **VARIANTS["i2v_2.2"])
        with temp_dir() as tmp:
            layouts = self.layouts(model, tmp, "i2v", prefix="diffusion_model.")
            self.check("i2v_2.2", model, tmp, layouts, [(1, 2, 4, 4, 9), (2, 3, 2, 2, 4)], seed=7)

    def test_ti2v_2_2_per_token_timesteps(self):
        model = make_model(9, **VARIANTS["ti2v_2.2"])
        with temp_dir() as tmp:
            layouts = self.layouts(model, tmp, "ti2v")
            self.check("ti2v_2.2", model, tmp, layouts, [(1, 3, 4, 4, 6), (2, 2, 4, 6, 3)], seed=9, per_token=True)

    def test_a14b_pipeline_two_experts(self):
        high, low = make_model(11, **VARIANTS["t2v_2.1"]), make_model(12, **VARIANTS["t2v_2.1"])
        with temp_dir() as tmp:
            pipe = os.path.join(tmp, "pipeline")
            high.save_pretrained(os.path.join(pipe, "transformer"), safe_serialization=True)
            low.save_pretrained(os.path.join(pipe, "transformer_2"), safe_serialization=True, max_shard_size="20KB")
            with open(os.path.join(pipe, "model_index.json"), "w") as f:
                json.dump({"_class_name": "WanPipeline", "boundary_ratio": 0.875,
                           "transformer": ["diffusers", "WanTransformer3DModel"],
                           "transformer_2": ["diffusers", "WanTransformer3DModel"]}, f)
            self.assertTrue(os.path.exists(os.path.join(pipe, "transformer_2",
                                                        "diffusion_pytorch_model.safetensors.index.json")))
            shapes = [(1, 2, 4, 4, 5)]
            self.check("a14b-high", high, tmp, [("pipeline", (pipe,)), ("pipeline", (pipe, "--expert", "high"))],
                       shapes, seed=11)
            self.check("a14b-low", low, tmp, [("pipeline", (pipe, "--expert", "low"))], shapes, seed=12)


if __name__ == "__main__":
    unittest.main()

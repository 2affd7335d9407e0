"""Tiny random FLUX.2 transformers for the referees in test_transformer.py and test_lora_interop.py.

Everything here is made by diffusers itself (Flux2Transformer2DModel, save_pretrained) from Python's RNG, so Baton
sees weights and inputs its own code did not produce. `to_bfl_state_dict` writes the original BFL layout; the
referee proves it right by reading it back with diffusers' own single-file converter.
"""

import json
import math
import os

import torch
from diffusers import Flux2Transformer2DModel
from safetensors.torch import load_file, save_file

from referee import baton


def make_model(seed: int, **config) -> Flux2Transformer2DModel:
    """A Flux2Transformer2DModel of `config` with every parameter random (norm scales near 1), in eval mode."""
    torch.manual_seed(seed)
    model = Flux2Transformer2DModel(**config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm scales
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:  # keeps activations O(1) through the blocks, so a relative error means something
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    return model


def make_inputs(model: Flux2Transformer2DModel, seed: int, batch: int, h: int, w: int, text_len: int) -> dict:
    """Random forward inputs under diffusers' argument names; ids laid out as Flux2Pipeline does."""
    c = model.config
    g = torch.Generator().manual_seed(seed)
    img_ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
    txt_ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(text_len))
    inputs = {
        "hidden_states": torch.randn(batch, h * w, c.in_channels, generator=g),
        "encoder_hidden_states": torch.randn(batch, text_len, c.joint_attention_dim, generator=g),
        "timestep": torch.rand(batch, generator=g),
        "img_ids": img_ids,
        "txt_ids": txt_ids,
    }
    if c.guidance_embeds:
        inputs["guidance"] = 1.0 + 4.0 * torch.rand(batch, generator=g)
    return inputs


def diffusers_forward(model, inputs: dict, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, return_dict=False, **kwargs)[0]


def baton_forward(tmp: str, model_path: str, inputs: dict, *extra) -> torch.Tensor:
    """Runs `baton forward` on `inputs` (written to a file under tmp) and returns its output."""
    in_path, out_path = os.path.join(tmp, "inputs.safetensors"), os.path.join(tmp, "baton_out.safetensors")
    save_file({k: v.contiguous() for k, v in inputs.items()}, in_path)
    baton("forward", "--model", model_path, "--inputs", in_path, "--output", out_path, *extra)
    return load_file(out_path)["output"]


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def to_bfl_state_dict(sd: dict) -> dict:
    """diffusers names → the original BFL checkpoint names (flux2-dev.safetensors): q/k/v fused, norm_out halves
    swapped to (shift, scale). Written independently of Baton's C++ mapping, from the BFL model's module tree."""
    rename = {
        "x_embedder": "img_in",
        "context_embedder": "txt_in",
        "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
        "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
        "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
        "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
        "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
        "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
        "single_stream_modulation.linear": "single_stream_modulation.lin",
        "proj_out": "final_layer.linear",
    }
    double = {
        "attn.norm_q.weight": "img_attn.norm.query_norm.scale",
        "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
        "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
        "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
        "attn.to_out.0.weight": "img_attn.proj.weight",
        "attn.to_add_out.weight": "txt_attn.proj.weight",
        "ff.linear_in.weight": "img_mlp.0.weight",
        "ff.linear_out.weight": "img_mlp.2.weight",
        "ff_context.linear_in.weight": "txt_mlp.0.weight",
        "ff_context.linear_out.weight": "txt_mlp.2.weight",
    }
    single = {
        "attn.to_qkv_mlp_proj.weight": "linear1.weight",
        "attn.to_out.weight": "linear2.weight",
        "attn.norm_q.weight": "norm.query_norm.scale",
        "attn.norm_k.weight": "norm.key_norm.scale",
    }
    out = {}
    for key, t in sd.items():
        parts = key.split(".")
        if parts[0] == "transformer_blocks":
            n, rest = parts[1], ".".join(parts[2:])
            streams = (("img", ("to_q", "to_k", "to_v")), ("txt", ("add_q_proj", "add_k_proj", "add_v_proj")))
            for stream, names in streams:
                if rest == f"attn.{names[0]}.weight":
                    qkv = [sd[f"transformer_blocks.{n}.attn.{m}.weight"] for m in names]
                    out[f"double_blocks.{n}.{stream}_attn.qkv.weight"] = torch.cat(qkv, 0)
            if rest in double:
                out[f"double_blocks.{n}.{double[rest]}"] = t
        elif parts[0] == "single_transformer_blocks":
            out[f"single_blocks.{parts[1]}.{single['.'.join(parts[2:])]}"] = t
        elif key == "norm_out.linear.weight":
            out["final_layer.adaLN_modulation.1.weight"] = _swap_halves(t)
        else:
            module, param = key.rsplit(".", 1)
            out[f"{rename[module]}.{param}"] = t
    return {k: v.contiguous() for k, v in out.items()}


def write_config(model, path: str):
    with open(path, "w") as f:
        json.dump(dict(model.config), f)

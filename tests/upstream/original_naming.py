"""Helpers for the referees of adapter files in the original (ComfyUI) naming: "diffusion_model.<module>.<tensor>",
the tensors as kohya/LyCORIS name them (lora_A/lora_B + dora_scale, hada_*, lokr_*, alpha).

lycoris-lora applies such a file to a module tree that carries the original module names (its keys renamed by prefix
only: "diffusion_model.a.b" → "lycoris_a_b", lora_A/lora_B → lora_down/lora_up, as LyCORIS names them, and the
".alpha" = rank LyCORIS needs where the file has none); each adapted
Linear's effective weight (W + ΔW, or DoRA's rescaled W + ΔW) is read through its forward.
"""

import os
import re

import torch
from lycoris import create_lycoris_from_weights
from safetensors.torch import load_file, save_file

_KEY = re.compile(r"^diffusion_model\.(.+?)\.(lora_[AB]\.weight|dora_scale|alpha|hada_w[12]_[ab]|lokr_w[12](?:_[ab])?)$")
_LYCORIS_PART = {"lora_A.weight": "lora_down.weight", "lora_B.weight": "lora_up.weight"}


def original_modules(sd: dict) -> set:
    """The original module names a file adapts; every key must be an original-naming adapter tensor."""
    modules = set()
    for key in sd:
        match = _KEY.match(key)
        assert match, f"not an original-naming adapter key: {key}"
        modules.add(match.group(1))
    return modules


def effective_weights(model: torch.nn.Module, names) -> dict:
    """Each named Linear's weight as it acts, adapters included: (f(I) - f(0))ᵀ."""
    modules = dict(model.named_modules())
    out = {}
    with torch.no_grad():
        for name in names:
            m = modules[name]
            eye = torch.eye(m.in_features)
            out[name] = (m(eye) - m(torch.zeros_like(eye))).T.contiguous()
    return out


def lycoris_on_original_tree(path: str, base: dict, tmp: str) -> dict:
    """Applies the original-naming file at `path` with lycoris-lora to a tree of Linears named as the original model
    and holding `base` (original module → weight [out, in]); returns each adapted module's effective weight."""
    sd = load_file(path)
    modules = original_modules(sd)
    renamed = {}
    for key, t in sd.items():
        module, part = _KEY.match(key).groups()
        lycoris = f"lycoris_{module.replace('.', '_')}"
        renamed[f"{lycoris}.{_LYCORIS_PART.get(part, part)}"] = t
        if part == "lora_A.weight" and f"diffusion_model.{module}.alpha" not in sd:
            # No ".alpha" means scale 1 (ComfyUI, diffusers); LyCORIS' LoRA module needs one: alpha = rank.
            renamed[f"{lycoris}.alpha"] = torch.tensor(float(t.shape[0]))
    renamed_path = os.path.join(tmp, "lycoris_named.safetensors")
    save_file(renamed, renamed_path)
    root = torch.nn.Module()
    for module in sorted(modules):
        weight = base[module]
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            linear.weight.copy_(weight)
        parent = root
        *path_parts, leaf = module.split(".")
        for part in path_parts:
            if part not in parent._modules:
                parent.add_module(part, torch.nn.Module())
            parent = parent._modules[part]
        parent.add_module(leaf, linear)
    network, _ = create_lycoris_from_weights(1.0, renamed_path, root)
    assert len(network.loras) == len(modules), f"LyCORIS adapted {len(network.loras)} of {len(modules)} modules"
    network.apply_to()
    return effective_weights(root, modules)

"""Referee: configs/models/wan*.json are diffusers WanTransformer3DModel configs of the real Wan 2.x models.

Each real config is instantiated by diffusers on the meta device (no memory, no download) and its parameter count
checked against the reference table (docs: ../shared/reference/models-and-trainers.md A2, computed from diffusers'
scripts/convert_wan_to_diffusers.py configs) within 1%. wan-tiny.json is built for real and runs a forward.
"""

import json
import os
import unittest

import torch
from diffusers import WanTransformer3DModel

from referee import SOURCE_DIR

CONFIGS = os.path.join(SOURCE_DIR, "configs", "models")

# name → (parameters in billions, in_channels, out_channels, has the Wan 2.1 CLIP image branch)
REAL = {
    "wan2.1-t2v-1.3b": (1.42, 16, 16, False),
    "wan2.1-t2v-14b": (14.29, 16, 16, False),
    "wan2.1-i2v-14b-480p": (16.39, 36, 16, True),
    "wan2.2-t2v-a14b": (14.29, 16, 16, False),  # each of the two experts
    "wan2.2-i2v-a14b": (14.29, 36, 16, False),
    "wan2.2-ti2v-5b": (5.00, 48, 48, False),
}


def load(name):
    with open(os.path.join(CONFIGS, f"{name}.json")) as f:
        config = json.load(f)
    return config


def build(config, device):
    kwargs = {k: v for k, v in config.items() if not k.startswith("_")}
    with torch.device(device):
        return WanTransformer3DModel(**kwargs)


class WanConfigsTest(unittest.TestCase):
    def test_every_config_file_is_checked(self):
        names = sorted(f[:-5] for f in os.listdir(CONFIGS) if f.startswith("wan") and f.endswith(".json"))
        self.assertEqual(names, sorted([*REAL, "wan-tiny"]))

    def test_real_configs_have_the_published_sizes(self):
        for name, (billions, in_ch, out_ch, image) in REAL.items():
            with self.subTest(name):
                config = load(name)
                self.assertEqual(config["_class_name"], "WanTransformer3DModel")
                model = build(config, "meta")
                # Every key of the file is a constructor argument diffusers knows (no silently ignored typo).
                self.assertEqual(set(config) - {"_class_name"} - set(model.config), set())
                count = sum(p.numel() for p in model.parameters()) / 1e9
                print(f"{name}: {count:.3f} B parameters (reference {billions} B)")
                self.assertLess(abs(count - billions) / billions, 0.01, name)
                self.assertEqual(model.config.in_channels, in_ch)
                self.assertEqual(model.config.out_channels, out_ch)
                self.assertEqual(model.condition_embedder.image_embedder is not None, image)
                self.assertEqual(model.config.attention_head_dim, 128)

    def test_tiny_config_runs(self):
        config = load("wan-tiny")
        torch.manual_seed(0)
        model = build(config, "cpu").eval()
        c = model.config
        hidden = torch.randn(1, c.in_channels, 3, 8, 8)
        text = torch.randn(1, 5, c.text_dim)
        with torch.no_grad():
            out = model(hidden_states=hidden, timestep=torch.tensor([500.0]), encoder_hidden_states=text,
                        return_dict=False)[0]
        self.assertEqual(tuple(out.shape), (1, c.out_channels, 3, 8, 8))
        self.assertTrue(torch.isfinite(out).all())


if __name__ == "__main__":
    unittest.main()

"""Referee: Baton's FLUX.2 transformer forward against diffusers' Flux2Transformer2DModel, fp32.

Random tiny models (one with the guidance embedder, one klein-like without) are made and saved by diffusers, and
also written as an original BFL single file that diffusers' own single-file loader must read back to the same
model. `baton forward` runs on both layouts with random inputs from Python and must match diffusers' forward.

Tolerance: 1e-4 of the output's max |value|. Both sides are fp32 with the same op order up to matmul blocking and
SDPA kernels; the observed error is ~1e-6, so 1e-4 still catches any wrong weight, RoPE axis or modulation chunk
(those give O(1) errors).
"""

import os
import unittest

import torch
from diffusers import Flux2Pipeline, Flux2Transformer2DModel
from safetensors.torch import save_file

from flux2_tiny import baton_forward, diffusers_forward, make_inputs, make_model, to_bfl_state_dict, write_config
from referee import baton, max_rel_error, temp_dir

TOLERANCE = 1e-4

CONFIGS = {
    # FLUX.2-dev-like: guidance embedder, 2 double + 2 single blocks.
    "guidance": dict(
        patch_size=1, in_channels=8, num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=24, timestep_guidance_channels=256, axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True,
    ),
    # klein-like: no guidance embedder, 3 heads, other rope axes and theta, 1 double + 3 single blocks.
    "klein": dict(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=3, attention_head_dim=8, num_attention_heads=3,
        joint_attention_dim=12, timestep_guidance_channels=64, axes_dims_rope=[2, 2, 2, 2], rope_theta=10000,
        guidance_embeds=False,
    ),
}


class TransformerForwardTest(unittest.TestCase):
    def check_config(self, name, seed, shapes):
        model = make_model(seed, **CONFIGS[name])
        with temp_dir() as tmp:
            folder = os.path.join(tmp, "transformer")
            model.save_pretrained(folder, safe_serialization=True)
            # The BFL single file, proven by diffusers' own converter (from_single_file) before Baton reads it.
            bfl_path = os.path.join(tmp, "flux2-tiny.safetensors")
            save_file(to_bfl_state_dict(model.state_dict()), bfl_path)
            from_bfl = Flux2Transformer2DModel.from_single_file(bfl_path, config=folder, local_files_only=True)
            expected_sd, got_sd = model.state_dict(), from_bfl.state_dict()
            self.assertEqual(sorted(expected_sd), sorted(got_sd))
            for key, t in expected_sd.items():
                self.assertTrue(torch.equal(got_sd[key], t), f"{name}: from_single_file differs at {key}")
            config_path = os.path.join(tmp, "config.json")
            write_config(model, config_path)

            for i, (batch, h, w, text_len) in enumerate(shapes):
                inputs = make_inputs(model, seed * 100 + i, batch, h, w, text_len)
                expected = diffusers_forward(model, inputs)
                for layout, extra in (("diffusers", (folder,)), ("bfl", (bfl_path, "--config", config_path))):
                    got = baton_forward(tmp, extra[0], inputs, *extra[1:])
                    self.assertEqual(got.shape, expected.shape)
                    err = max_rel_error(got, expected)
                    print(f"{name} seed {seed} {layout} B={batch} grid {h}x{w} L={text_len}: rel error {err:.2e}")
                    self.assertLess(err, TOLERANCE, f"{name}/{layout} B={batch} {h}x{w} L={text_len}")

    def test_guidance_model(self):
        self.check_config("guidance", seed=11, shapes=[(1, 4, 4, 6), (2, 3, 5, 9)])

    def test_klein_like_model_without_guidance(self):
        self.check_config("klein", seed=23, shapes=[(2, 2, 3, 4), (1, 5, 2, 7)])

    def test_reference_tokens_condition_and_only_the_target_is_predicted(self):
        # Flux2Pipeline's editing call: the reference latents' tokens follow the target's in hidden_states, their ids
        # come from _prepare_image_ids (time 10, 20, ...), and the prediction keeps the target's tokens. Baton's
        # forward must give that slice (its head predicts the target only), within 1e-5 in fp32.
        for name, seed in (("guidance", 31), ("klein", 37)):
            model = make_model(seed, **CONFIGS[name])
            c = model.config
            inputs = make_inputs(model, seed, 2, 3, 4, 6)
            refs = [torch.zeros(1, c.in_channels, 2, 3), torch.zeros(1, c.in_channels, 4, 2)]
            ref_ids = Flux2Pipeline._prepare_image_ids(refs)[0]
            g = torch.Generator().manual_seed(seed + 1)
            ref_tokens = torch.randn(2, ref_ids.shape[0], c.in_channels, generator=g)
            target = inputs["hidden_states"].shape[1]
            inputs["hidden_states"] = torch.cat([inputs["hidden_states"], ref_tokens], dim=1)
            inputs["img_ids"] = torch.cat([inputs["img_ids"], ref_ids], dim=0)
            expected = diffusers_forward(model, inputs)[:, :target]
            with temp_dir() as tmp:
                folder = os.path.join(tmp, "transformer")
                model.save_pretrained(folder, safe_serialization=True)
                got = baton_forward(tmp, folder, inputs)
            self.assertEqual(got.shape, expected.shape)
            err = max_rel_error(got, expected)
            print(f"{name} with 2 reference images: rel error {err:.2e}")
            self.assertLess(err, 1e-5, name)

    def test_baton_bfl_writer_reads_in_diffusers(self):
        # `baton init-weights --format bfl` must be what diffusers' single-file loader reads as the same model
        # that `--format diffusers` writes (same seed).
        with temp_dir() as tmp:
            config_path = os.path.join(tmp, "config.json")
            write_config(make_model(0, **CONFIGS["klein"]), config_path)
            folder, bfl_path = os.path.join(tmp, "diffusers"), os.path.join(tmp, "bfl.safetensors")
            baton("init-weights", "--config", config_path, "--out", folder, "--seed", 5)
            baton("init-weights", "--config", config_path, "--out", bfl_path, "--seed", 5, "--format", "bfl")
            reference = Flux2Transformer2DModel.from_pretrained(folder).state_dict()
            from_bfl = Flux2Transformer2DModel.from_single_file(bfl_path, config=folder, local_files_only=True)
            got = from_bfl.state_dict()
            self.assertEqual(sorted(reference), sorted(got))
            for key, t in reference.items():
                self.assertTrue(torch.equal(got[key], t), key)


if __name__ == "__main__":
    unittest.main()

"""Referee: `baton vae-encode` against diffusers' AutoencoderKLFlux2 and Flux2Pipeline's latent preparation.

A tiny AutoencoderKLFlux2 (the FLUX.2 structure: 32 latent channels, 4 levels = 8x down, mid-block attention,
a channel change so a conv_shortcut exists) gets random weights, including non-trivial GroupNorm affines and
BatchNorm running statistics (the defaults 1/0 and mean 0 / var 1 would hide normalisation bugs), and is saved
with save_pretrained. Random pixels in [-1, 1] go through
  - the posterior mode (`retrieve_latents(..., sample_mode="argmax")`), compared with Baton's `latents`;
  - Flux2Pipeline._encode_vae_image (its own code: patchify, BatchNorm normalisation) and
    Flux2Pipeline._pack_latents, compared with Baton's `packed` tokens.
Cases: fp32 and bf16 (sharded) checkpoints, batch 2 and non-square images, and the vae/ that
`baton init-weights --pipeline tiny` writes, loaded by diffusers.
Tolerance: 1e-4 relative (max |a - e| / max |e|), fp32 on both sides.
"""

import copy
import os
import types
import unittest

import torch
from diffusers import AutoencoderKLFlux2, Flux2Pipeline
from safetensors.torch import load_file, save_file

import referee

TOLERANCE = 1e-4


def tiny_vae(seed, layers_per_block):
    torch.manual_seed(seed)
    vae = AutoencoderKLFlux2(block_out_channels=(16, 32, 32, 32), layers_per_block=layers_per_block,
                             norm_num_groups=8, latent_channels=32).eval()
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if "norm" in name:  # GroupNorm affine: 1 + noise, 0 + noise
                p.add_(0.1 * torch.randn_like(p))
        vae.bn.running_mean.copy_(0.5 * torch.randn_like(vae.bn.running_mean))
        vae.bn.running_var.copy_(torch.rand_like(vae.bn.running_var) + 0.5)
    return vae


class VaeRefereeTest(unittest.TestCase):

    def check(self, layers_per_block, batch, height, width, seed, save_dtype=torch.float32, **save_kwargs):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        vae = tiny_vae(seed, layers_per_block)
        if save_dtype != torch.float32:
            with torch.no_grad():  # the reference runs in fp32 on the weights as stored
                for t in list(vae.parameters()) + [vae.bn.running_mean, vae.bn.running_var]:
                    t.copy_(t.to(save_dtype).float())
        copy.deepcopy(vae).to(save_dtype).save_pretrained(os.path.join(tmp.name, "vae"), **save_kwargs)
        if "max_shard_size" in save_kwargs:
            index = os.path.join(tmp.name, "vae", "diffusion_pytorch_model.safetensors.index.json")
            self.assertTrue(os.path.exists(index))
        self.compare(tmp.name, vae, batch, height, width, seed, f"layers_per_block={layers_per_block} {save_dtype}")

    def compare(self, pipe_dir, vae, batch, height, width, seed, name):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        torch.manual_seed(seed + 1)
        pixels = torch.rand(batch, 3, height, width) * 2 - 1
        inputs, output = os.path.join(tmp.name, "in.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"pixels": pixels}, inputs)
        referee.baton("vae-encode", "--model", pipe_dir, "--inputs", inputs, "--output", output)
        got = load_file(output)

        with torch.no_grad():
            mode = vae.encode(pixels).latent_dist.mode()
            # The pipeline's own method, bound to a stand-in that has only what it uses.
            pipe = types.SimpleNamespace(vae=vae, _patchify_latents=Flux2Pipeline._patchify_latents)
            normalized = Flux2Pipeline._encode_vae_image(pipe, pixels, generator=None)
            packed = Flux2Pipeline._pack_latents(normalized)

        self.assertEqual(tuple(got["latents"].shape), tuple(mode.shape))
        self.assertEqual(tuple(got["packed"].shape), (batch, (height // 16) * (width // 16), 128))
        err_latents = referee.max_rel_error(got["latents"], mode)
        err_packed = referee.max_rel_error(got["packed"], packed)
        print(f"{name} {batch}x3x{height}x{width}: latents rel err {err_latents:.2e}, packed rel err {err_packed:.2e}")
        self.assertLessEqual(err_latents, TOLERANCE)
        self.assertLessEqual(err_packed, TOLERANCE)

    def test_square_batch(self):
        self.check(layers_per_block=1, batch=2, height=64, width=64, seed=0)

    def test_non_square_two_resnets_per_block(self):
        self.check(layers_per_block=2, batch=1, height=48, width=80, seed=10)

    def test_bf16_sharded_checkpoint(self):
        self.check(layers_per_block=1, batch=1, height=32, width=48, seed=20, save_dtype=torch.bfloat16,
                   max_shard_size="100KB")

    def test_baton_written_vae_loads_in_diffusers(self):
        # The vae/ that `baton init-weights --pipeline tiny` writes, read by diffusers.
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        referee.baton("init-weights", "--pipeline", "tiny", "--out", tmp.name, "--seed", 5)
        vae = AutoencoderKLFlux2.from_pretrained(os.path.join(tmp.name, "vae")).eval()
        self.compare(tmp.name, vae, batch=1, height=32, width=64, seed=30, name="baton tiny pipeline vae")


if __name__ == "__main__":
    unittest.main()

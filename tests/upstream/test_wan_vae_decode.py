"""Referee: `baton vae-decode` on a Wan VAE against diffusers' AutoencoderKLWan.decode, as WanPipeline uses it.

The tiny AutoencoderKLWan of test_wan_vae.py (Wan 2.1 structure: 4 levels = 8x spatial, time upsampling in up
blocks 0 and 1 = 4x, channel changes so resnets have a conv_shortcut, the attention mid block; and the Wan 2.2
TI2V-5B structure: residual up blocks with the DupUp3D shortcut, 2x2 unpatchify, 16x spatial, here also a
decoder_base_dim of its own), random weights with non-trivial RMS-norm gammas and biases, saved with save_pretrained.
Random NORMALISED latents (what the transformer produces) are un-normalised exactly as WanPipeline.__call__ does
(latents / (1 / latents_std) + latents_mean) and decoded by vae.decode(...).sample -- diffusers' `_decode`: the
decoder once per latent frame with the causal feature cache, the first with first_chunk, "Rep" in the temporal
upsamplers, clamp to [-1, 1]. Compared with Baton's `pixels`.
Cases: 1, 2 and 3 latent frames (1, 5, 9 pixel frames), batch 2, non-square, bf16 sharded weights, raw latents
(--normalized false), the Wan 2.2 structure with 1 and 3 latent frames; wrong channel counts refused.
Tolerance: 1e-4 relative (max |a - e| / max |e|), fp32 on both sides.
"""

import copy
import os
import time
import unittest

import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import load_file, save_file

import referee
from test_wan_vae import tiny_wan_vae

TOLERANCE = 1e-4


def tiny_decoder_vae(seed, wan22=False):
    if not wan22:
        return tiny_wan_vae(seed)
    # decoder_base_dim differs from base_dim, as in the real TI2V-5B VAE (160 / 256).
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=12, z_dim=4, dim_mult=[1, 2, 2, 2], attn_scales=[],
                           temperal_downsample=[False, True, True], latents_mean=[-0.5, 0.25, 0.1, 1.0],
                           latents_std=[2.0, 0.5, 1.5, 1.25], is_residual=True, patch_size=2, in_channels=12,
                           out_channels=12, scale_factor_spatial=16, num_res_blocks=2).eval()
    referee.roughen_wan_vae(vae)
    return vae


def pipeline_decode(vae, latents):
    """WanPipeline.__call__'s tail: un-normalise in the VAE dtype, then vae.decode(...)[0]."""
    latents = latents.to(vae.dtype)
    latents_mean = torch.tensor(vae.config.latents_mean).view(1, vae.config.z_dim, 1, 1, 1).to(latents.device,
                                                                                                latents.dtype)
    latents_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, vae.config.z_dim, 1, 1, 1).to(
        latents.device, latents.dtype)
    latents = latents / latents_std + latents_mean
    return vae.decode(latents, return_dict=False)[0]


class WanVaeDecodeRefereeTest(unittest.TestCase):

    def check(self, shape, seed, wan22=False, normalized=True, save_dtype=torch.float32, **save_kwargs):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        vae = tiny_decoder_vae(seed, wan22)
        if save_dtype != torch.float32:
            with torch.no_grad():  # the reference runs in fp32 on the weights as stored
                for t in vae.parameters():
                    t.copy_(t.to(save_dtype).float())
        copy.deepcopy(vae).to(save_dtype).save_pretrained(os.path.join(tmp.name, "vae"), **save_kwargs)
        if "max_shard_size" in save_kwargs:
            index = os.path.join(tmp.name, "vae", "diffusion_pytorch_model.safetensors.index.json")
            self.assertTrue(os.path.exists(index))

        torch.manual_seed(seed + 1)
        latents = torch.randn(*shape)
        inputs, output = os.path.join(tmp.name, "in.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"latents": latents}, inputs)
        proc = referee.baton("vae-decode", "--model", tmp.name, "--inputs", inputs, "--output", output,
                             "--normalized", "true" if normalized else "false")
        got = load_file(output)["pixels"]

        start = time.monotonic()
        with torch.no_grad():
            expected = pipeline_decode(vae, latents) if normalized else vae.decode(latents).sample
        upstream_s = time.monotonic() - start

        b, _, f, h, w = shape
        up = 16 if wan22 else 8
        self.assertEqual(tuple(expected.shape), (b, 3, 4 * (f - 1) + 1, h * up, w * up))
        self.assertEqual(tuple(got.shape), tuple(expected.shape))
        # Random weights must not saturate the clamp everywhere (that would hide most of the network).
        saturated = (expected.abs() >= 1).float().mean().item()
        self.assertLess(saturated, 0.5)
        err = referee.max_rel_error(got, expected)
        print(f"{tuple(shape)} wan22={wan22} normalized={normalized} {save_dtype}: pixels rel err {err:.2e} "
              f"({saturated:.0%} clamped); baton: {proc.stdout.strip()}; diffusers {upstream_s:.3f} s")
        self.assertLessEqual(err, TOLERANCE)

    def test_one_latent_frame(self):
        self.check((1, 4, 1, 4, 4), seed=0)

    def test_two_latent_frames_non_square(self):
        self.check((1, 4, 2, 4, 6), seed=10)

    def test_three_latent_frames_batch_two(self):
        self.check((2, 4, 3, 4, 4), seed=20)

    def test_three_latent_frames_non_square_tall(self):
        self.check((1, 4, 3, 6, 4), seed=30)

    def test_raw_latents(self):
        self.check((1, 4, 2, 4, 4), seed=40, normalized=False)

    def test_bf16_sharded_checkpoint(self):
        self.check((1, 4, 2, 4, 4), seed=50, save_dtype=torch.bfloat16, max_shard_size="20KB")

    def test_wan22_one_latent_frame(self):
        self.check((1, 4, 1, 2, 3), seed=70, wan22=True)

    def test_wan22_three_latent_frames_batch_two(self):
        self.check((2, 4, 3, 2, 2), seed=80, wan22=True)

    def test_wrong_channel_count_is_rejected(self):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        tiny_wan_vae(0).save_pretrained(os.path.join(tmp.name, "vae"))
        inputs, output = os.path.join(tmp.name, "in.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"latents": torch.zeros(1, 16, 1, 4, 4)}, inputs)
        proc = referee.baton("vae-decode", "--model", tmp.name, "--inputs", inputs, "--output", output, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("z_dim 4", proc.stderr)
        self.assertFalse(os.path.exists(output))


if __name__ == "__main__":
    unittest.main()

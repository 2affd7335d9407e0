"""Referee: `baton vae-encode` on a Wan VAE against diffusers' AutoencoderKLWan.

A tiny AutoencoderKLWan with the Wan 2.1 structure (4 levels = 8x spatial, time downsampling on levels 1 and 2 =
4x, a channel change so resnets have a conv_shortcut, the attention mid block; attn_scales stays empty as in every
released Wan VAE: diffusers' own encoder fails on down-block attention, and Baton rejects it) gets random weights, including non-trivial RMS-norm gammas (the default 1 would hide a
wrong norm axis or scale), and is saved with save_pretrained. Random pixels in [-1, 1] go through
`vae.encode(x).latent_dist.mode()` -- diffusers' chunked `_encode` (frame 0 alone, then chunks of 4 frames with
the causal feature cache) -- and the normalisation Wan pipelines apply, (z - latents_mean) / latents_std
(WanImageToVideoPipeline.prepare_latents). Compared with Baton's `latents` and `normalized`.
Cases: 1 frame given as an image [B, 3, H, W], 1, 5 and 9 frames, batch 2, non-square, bf16 sharded weights, and a
bundled clip (data/wan_sample/) read and bucketed by `--video`; and the Wan 2.2 (TI2V-5B) VAE structure
(is_residual, patch_size 2) with 1 and 9 frames and an image.
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

TOLERANCE = 1e-4


def tiny_wan_vae(seed, attn_scales=(), wan22=False):
    torch.manual_seed(seed)
    # wan22: the Wan 2.2 (TI2V-5B) structure -- 2x2 pixel patchify (in_channels 12), residual down blocks with
    # the AvgDown3D shortcut, 16x spatial.
    extra = dict(is_residual=True, patch_size=2, in_channels=12, out_channels=12, scale_factor_spatial=16,
                 num_res_blocks=2) if wan22 else dict(num_res_blocks=1)
    vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], attn_scales=list(attn_scales),
                           temperal_downsample=[False, True, True], latents_mean=[-0.5, 0.25, 0.1, 1.0],
                           latents_std=[2.0, 0.5, 1.5, 1.25], **extra).eval()
    referee.roughen_wan_vae(vae)
    return vae


class WanVaeRefereeTest(unittest.TestCase):

    def check(self, shape, seed, attn_scales=(), save_dtype=torch.float32, wan22=False, **save_kwargs):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        vae = tiny_wan_vae(seed, attn_scales, wan22)
        if save_dtype != torch.float32:
            with torch.no_grad():  # the reference runs in fp32 on the weights as stored
                for t in vae.parameters():
                    t.copy_(t.to(save_dtype).float())
        copy.deepcopy(vae).to(save_dtype).save_pretrained(os.path.join(tmp.name, "vae"), **save_kwargs)
        if "max_shard_size" in save_kwargs:
            index = os.path.join(tmp.name, "vae", "diffusion_pytorch_model.safetensors.index.json")
            self.assertTrue(os.path.exists(index))

        torch.manual_seed(seed + 1)
        pixels = torch.rand(*shape) * 2 - 1
        inputs, output = os.path.join(tmp.name, "in.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"pixels": pixels}, inputs)
        proc = referee.baton("vae-encode", "--model", tmp.name, "--inputs", inputs, "--output", output)
        got = load_file(output)

        video = pixels.unsqueeze(2) if pixels.dim() == 4 else pixels
        start = time.monotonic()
        with torch.no_grad():
            mode = vae.encode(video).latent_dist.mode()
        upstream_s = time.monotonic() - start
        mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
        normalized = (mode - mean) * inv_std

        b, _, f, h, w = video.shape
        down = 16 if wan22 else 8
        self.assertEqual(tuple(mode.shape), (b, 4, 1 + (f - 1) // 4, h // down, w // down))
        self.assertEqual(tuple(got["latents"].shape), tuple(mode.shape))
        err = referee.max_rel_error(got["latents"], mode)
        err_norm = referee.max_rel_error(got["normalized"], normalized)
        print(f"{tuple(shape)} wan22={wan22} {save_dtype}: latents rel err {err:.2e}, "
              f"normalized rel err {err_norm:.2e}; baton: {proc.stdout.strip()}; diffusers {upstream_s:.3f} s")
        self.assertLessEqual(err, TOLERANCE)
        self.assertLessEqual(err_norm, TOLERANCE)

    def test_image_as_4d_pixels(self):
        self.check((1, 3, 32, 32), seed=0)

    def test_one_frame(self):
        self.check((1, 3, 1, 32, 48), seed=10)

    def test_five_frames_batch_two(self):
        self.check((2, 3, 5, 32, 32), seed=20)

    def test_nine_frames_non_square(self):
        self.check((1, 3, 9, 48, 32), seed=30)

    def test_bf16_sharded_checkpoint(self):
        self.check((1, 3, 5, 32, 32), seed=50, save_dtype=torch.bfloat16, max_shard_size="20KB")

    def test_wan22_one_frame(self):
        self.check((1, 3, 1, 32, 48), seed=70, wan22=True)

    def test_wan22_nine_frames_batch_two(self):
        self.check((2, 3, 9, 32, 32), seed=80, wan22=True)

    def test_wan22_image_input(self):
        self.check((1, 3, 64, 32), seed=90, wan22=True)

    def test_bundled_clip_through_video_flag(self):
        # data/wan_sample/ clip (MPEG-4, 17 frames 64x64) decoded and bucketed by Baton (--video, every 2nd frame
        # -> 9 frames); diffusers encodes the very pixels Baton reports it encoded.
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        vae = tiny_wan_vae(60)
        vae.save_pretrained(os.path.join(tmp.name, "vae"))
        clip = os.path.join(referee.SOURCE_DIR, "data", "wan_sample", "red_circle_right.mp4")
        output = os.path.join(tmp.name, "out.safetensors")
        referee.baton("vae-encode", "--model", tmp.name, "--video", clip, "--frame-stride", 2, "--output", output)
        got = load_file(output)
        self.assertEqual(tuple(got["pixels"].shape), (1, 3, 9, 64, 64))
        self.assertGreaterEqual(got["pixels"].min().item(), -1.0)
        self.assertLessEqual(got["pixels"].max().item(), 1.0)
        self.assertGreater(got["pixels"].std().item(), 0.1)  # a real picture, not a blank
        with torch.no_grad():
            mode = vae.encode(got["pixels"]).latent_dist.mode()
        self.assertEqual(tuple(got["latents"].shape), (1, 4, 3, 8, 8))
        err = referee.max_rel_error(got["latents"], mode)
        print(f"bundled clip --video --frame-stride 2: latents rel err {err:.2e}")
        self.assertLessEqual(err, TOLERANCE)

    def test_wrong_frame_count_is_rejected(self):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        tiny_wan_vae(0).save_pretrained(os.path.join(tmp.name, "vae"))
        inputs, output = os.path.join(tmp.name, "in.safetensors"), os.path.join(tmp.name, "out.safetensors")
        save_file({"pixels": torch.zeros(1, 3, 4, 32, 32)}, inputs)
        proc = referee.baton("vae-encode", "--model", tmp.name, "--inputs", inputs, "--output", output, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("4k+1", proc.stderr)
        self.assertFalse(os.path.exists(output))


if __name__ == "__main__":
    unittest.main()

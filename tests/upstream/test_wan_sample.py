"""Referee: `baton sample` on Wan pipeline folders (core/sample/wan_sampler.h) against diffusers' WanPipeline.__call__
and WanImageToVideoPipeline.__call__ with output_type="latent": the final normalised latents the VAE is handed.

Each tiny pipeline is written by `baton init-weights` (wan-tiny: Wan 2.1 T2V; wan-i2v-tiny: the 36-channel I2V-A14B
kind; wan-ti2v-tiny: TI2V-5B's expand_timesteps), then given a random WanTransformer3DModel made by diffusers from the
folder's own transformer/config.json and saved with save_pretrained. Both sides get the same random prompt_embeds and
negative_prompt_embeds (Baton reads them from a safetensors file), the folder's scheduler config, the same seed
(torch.Generator("cpu").manual_seed; Baton draws the same noise) and, for image-to-video, the same first-frame PNG at
the video's size (the pipeline encodes it with the folder's VAE, as Baton's WanSampleEncoder does). Cases: T2V with
CFG off (guidance 1) and on, T2V with FlowMatchEulerDiscreteScheduler (--scheduler euler), I2V with CFG, Wan 2.1 I2V
(wan-i2v-2.1-tiny: the first frame's CLIP embeddings through image_encoder/ and image_processor/) with CFG, TI2V's
clean first frame with CFG, and the two-expert I2V-A14B kind (transformer/ above boundary_ratio, transformer_2/
below, as WanImageToVideoPipeline switches them). The decoded video is refereed by test_wan_vae_decode.py (not repeated here).
Tolerance: 1e-4 relative (max |a - e| / max |e|), fp32 on both sides.
"""

import json
import os
import unittest

import numpy as np
import torch
from transformers import CLIPImageProcessor, CLIPVisionModel
from diffusers import (AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler,
                       WanImageToVideoPipeline, WanPipeline, WanTransformer3DModel)
from PIL import Image
from safetensors.torch import load_file, save_file

import referee

TOLERANCE = 1e-4
FRAMES, STEPS, SEED, TEXT_LEN = 5, 4, 7, 16


class WanSampleRefereeTest(unittest.TestCase):

    def setUp(self):
        self.tmp_handle = referee.temp_dir()
        self.addCleanup(self.tmp_handle.cleanup)
        self.tmp = self.tmp_handle.name

    def pipeline_folder(self, variant, seed):
        """The tiny folder with a diffusers-made random transformer; returns (folder, transformer, vae)."""
        folder = os.path.join(self.tmp, variant)
        referee.baton("init-weights", "--pipeline", variant, "--out", folder, "--seed", seed)
        with open(os.path.join(folder, "transformer", "config.json")) as f:
            config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        torch.manual_seed(seed)
        transformer = WanTransformer3DModel(**config).eval()
        transformer.save_pretrained(os.path.join(folder, "transformer"))
        if os.path.isdir(os.path.join(folder, "transformer_2")):  # Wan 2.2 A14B: the low-noise expert
            self.transformer_2 = WanTransformer3DModel(**config).eval()
            self.transformer_2.save_pretrained(os.path.join(folder, "transformer_2"))
        vae = AutoencoderKLWan.from_pretrained(os.path.join(folder, "vae")).eval()
        return folder, transformer, vae

    def embeddings(self, transformer, text_len=TEXT_LEN):
        torch.manual_seed(11)
        dim = transformer.config.text_dim
        prompt, negative = torch.randn(1, text_len, dim), torch.randn(1, text_len, dim)
        path = os.path.join(self.tmp, "embeds.safetensors")
        save_file({"prompt_embeds": prompt, "negative_prompt_embeds": negative}, path)
        return path, prompt, negative

    def first_frame(self, width, height):
        g = np.random.default_rng(5)
        coarse = g.uniform(0, 255, size=(4, 4, 3)).astype(np.uint8)
        image = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
        path = os.path.join(self.tmp, "first_frame.png")
        image.save(path)
        return path, image

    def baton_latents(self, folder, embeds, width, height, guidance, *extra):
        out = os.path.join(self.tmp, "ours")
        referee.baton("sample", "--model", folder, "--prompt_embeds", embeds, "--frames", FRAMES, "--steps", STEPS,
                      "--size", f"{width}x{height}", "--seed", SEED, "--guidance", guidance, "--out", out + ".mp4",
                      "--out_latents", out + ".safetensors", *extra)
        return load_file(out + ".safetensors")["latents"]

    def compare(self, name, ours, theirs):
        self.assertEqual(tuple(ours.shape), tuple(theirs.shape), name)
        err = referee.max_rel_error(ours, theirs)
        print(f"{name}: latents {tuple(ours.shape)} rel error {err:.2e}")
        self.assertLess(err, TOLERANCE, name)

    def check_t2v(self, name, guidance, euler=False):
        folder, transformer, vae = self.pipeline_folder("wan-tiny", seed=3)
        scheduler = UniPCMultistepScheduler.from_pretrained(os.path.join(folder, "scheduler"))
        if euler:
            scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=scheduler.config.num_train_timesteps,
                                                        shift=scheduler.config.flow_shift)
        pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=scheduler, transformer=transformer)
        pipe.set_progress_bar_config(disable=True)
        embeds, prompt, negative = self.embeddings(transformer)
        width, height = 48, 32
        ours = self.baton_latents(folder, embeds, width, height, guidance, *(["--scheduler", "euler"] if euler else []))
        with torch.no_grad():
            theirs = pipe(prompt_embeds=prompt, negative_prompt_embeds=negative, height=height, width=width,
                          num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=guidance, output_type="latent",
                          generator=torch.Generator("cpu").manual_seed(SEED)).frames
        self.compare(name, ours, theirs)
        return ours

    def check_i2v(self, name, variant, expand, width, height, clip=False):
        self.transformer_2 = None
        folder, transformer, vae = self.pipeline_folder(variant, seed=4)
        scheduler = UniPCMultistepScheduler.from_pretrained(os.path.join(folder, "scheduler"))
        # Wan 2.1 I2V: the CLIP image branch (image_encoder/, image_processor/), and the 512 text tokens it splits on.
        extra = dict(image_encoder=CLIPVisionModel.from_pretrained(os.path.join(folder, "image_encoder")).eval(),
                     image_processor=CLIPImageProcessor.from_pretrained(os.path.join(folder, "image_processor"))
                     ) if clip else {}
        if self.transformer_2 is not None:
            with open(os.path.join(folder, "model_index.json")) as f:
                extra.update(transformer_2=self.transformer_2, boundary_ratio=json.load(f)["boundary_ratio"])
        pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=scheduler,
                                       transformer=transformer, expand_timesteps=expand, **extra)
        pipe.set_progress_bar_config(disable=True)
        embeds, prompt, negative = self.embeddings(transformer, 512 if clip else TEXT_LEN)
        image_path, image = self.first_frame(width, height)
        ours = self.baton_latents(folder, embeds, width, height, 4.0, "--image", image_path)
        with torch.no_grad():
            theirs = pipe(image=image, prompt_embeds=prompt, negative_prompt_embeds=negative, height=height,
                          width=width, num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=4.0,
                          output_type="latent", generator=torch.Generator("cpu").manual_seed(SEED)).frames
        self.compare(name, ours, theirs)

    def test_t2v_without_guidance(self):
        self.check_t2v("t2v cfg off", 1.0)

    def test_t2v_with_guidance(self):
        with_cfg = self.check_t2v("t2v cfg 5", 5.0)
        self.assertTrue(torch.isfinite(with_cfg).all())

    def test_t2v_euler(self):
        self.check_t2v("t2v euler cfg 3", 3.0, euler=True)

    def test_i2v_first_frame(self):
        self.check_i2v("i2v (36-channel kind) cfg 4", "wan-i2v-tiny", False, 32, 48)

    def test_wan21_i2v_with_clip_image_embeddings(self):
        # The first frame at the sample size: diffusers' encode_image sees the image as given, Baton the resized one.
        self.check_i2v("wan 2.1 i2v (CLIP branch) cfg 4", "wan-i2v-2.1-tiny", False, 32, 32, clip=True)

    def test_a14b_both_experts_switch_at_the_boundary(self):
        # flow_shift 3, 4 steps: timesteps 999 and 900 go to the high-noise expert, 750 and 500 to the low-noise one.
        self.check_i2v("i2v a14b (two experts) cfg 4", "wan-i2v-a14b-tiny", False, 32, 48)

    def test_ti2v_clean_first_frame(self):
        self.check_i2v("ti2v clean first frame cfg 4", "wan-ti2v-tiny", True, 64, 32)


if __name__ == "__main__":
    unittest.main()

"""Referee: `baton sample` (FLUX.2 sampler + VAE decoder) against diffusers' Flux2Pipeline.__call__ and
AutoencoderKLFlux2.decode, on the tiny random pipeline `baton init-weights --pipeline tiny` writes.

Both sides get the same prompt embeddings (prompt_embeds=), the same seed (the pipeline's generator is
torch.Generator("cpu").manual_seed(seed); Baton draws the same noise), 4 denoising steps at a non-square size and
guidance 4.0, with and without a LoRA (random, non-zero B, PEFT format: Flux2Pipeline.load_lora_weights on one side,
`--lora` on the other). Compared:
  - the final latents (output_type="latent": the packed tokens before decoding) within 1e-4 relative;
  - the decoder alone: AutoencoderKLFlux2.decode of Baton's own final latents (un-normalised and un-patchified by the
    pipeline's own code) against Baton's decoded pixels, within 1e-4 relative;
  - the PNG against the pipeline's PIL image: equal after 8-bit rounding, up to 1 level on pixels whose float value
    sits on a rounding boundary (at most 0.1 % of them).
Reference images (editing): `--references a.png,b.png` against Flux2Pipeline(image=[a, b]) -- each cropped to multiples
of 16, VAE-encoded, given _prepare_image_ids' position ids after the target's tokens, the prediction sliced to the
target -- on the dev layout (guidance embedder; in one process and through two stage workers) and on a klein layout
(the same pipeline with a transformer without guidance embedder), to the same tolerances.
A klein base model (model_index.json: Flux2KleinPipeline, is_distilled false) against Flux2KleinPipeline's true
classifier-free guidance with a negative prompt's embedding, to the same tolerances.
"""

import json
import math
import os
import shutil
import unittest

import numpy as np
import torch
from diffusers import (AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Pipeline,
                       Flux2Transformer2DModel)
from PIL import Image
from peft import LoraConfig, get_peft_model_state_dict
from safetensors.torch import load_file, save_file

import referee

TOLERANCE = 1e-4
STEPS, WIDTH, HEIGHT, GUIDANCE, SEED = 4, 64, 48, 4.0, 7


class SampleReferee(unittest.TestCase):
    """The tiny pipeline on both sides, and the comparison of one rendering (no tests of its own)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp_handle = referee.temp_dir()
        cls.tmp = cls.tmp_handle.name
        cls.pipe_dir = os.path.join(cls.tmp, "pipeline")
        referee.baton("init-weights", "--pipeline", "tiny", "--out", cls.pipe_dir, "--seed", 3)
        sub = lambda name: os.path.join(cls.pipe_dir, name)  # noqa: E731
        # prompt_embeds are given, so the text encoder is never run.
        cls.pipe = Flux2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(sub("scheduler")),
                                 vae=AutoencoderKLFlux2.from_pretrained(sub("vae")).eval(), text_encoder=None,
                                 tokenizer=None, transformer=Flux2Transformer2DModel.from_pretrained(sub("transformer")))
        cls.pipe.set_progress_bar_config(disable=True)
        dim = cls.pipe.transformer.config.joint_attention_dim
        torch.manual_seed(0)
        cls.embeds = torch.randn(1, 12, dim)
        cls.embeds_file = os.path.join(cls.tmp, "embeds.safetensors")
        save_file({"prompt_embeds": cls.embeds.contiguous()}, cls.embeds_file)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_handle.cleanup()

    def klein_transformer(self, klein_dir):
        """A copy of the tiny pipeline in `klein_dir` with a transformer of FLUX.2 [klein]'s kind: no guidance
        embedder, random weights of a healthy scale. Returns the transformer."""
        shutil.copytree(self.pipe_dir, klein_dir, dirs_exist_ok=True)
        config = {k: v for k, v in self.pipe.transformer.config.items() if not k.startswith("_")}
        config["guidance_embeds"] = False
        torch.manual_seed(31)
        transformer = Flux2Transformer2DModel(**config).eval()
        with torch.no_grad():
            for pname, p in transformer.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else torch.randn_like(p) / math.sqrt(p.shape[1]))
        shutil.rmtree(os.path.join(klein_dir, "transformer"))
        transformer.save_pretrained(os.path.join(klein_dir, "transformer"), safe_serialization=True)
        return transformer

    def run_both(self, name, *lora_args, pipe=None, pipe_dir=None, references=(), **pipe_kwargs):
        pipe, pipe_dir = pipe or self.pipe, pipe_dir or self.pipe_dir
        out = os.path.join(self.tmp, name)
        ref_args = ("--references", ",".join(references)) if references else ()
        referee.baton("sample", "--model", pipe_dir, "--prompt_embeds", self.embeds_file, "--steps", STEPS,
                      "--size", f"{WIDTH}x{HEIGHT}", "--seed", SEED, "--guidance", GUIDANCE, "--out", out + ".png",
                      "--out_latents", out + "_latents.safetensors", "--out_pixels", out + "_pixels.safetensors",
                      *ref_args, *lora_args)
        kwargs = dict(prompt_embeds=self.embeds, num_inference_steps=STEPS, width=WIDTH, height=HEIGHT,
                      guidance_scale=GUIDANCE, **pipe_kwargs)
        if references:
            kwargs["image"] = [Image.open(f).convert("RGB") for f in references]
        latents = pipe(**kwargs, output_type="latent", generator=torch.Generator("cpu").manual_seed(SEED)).images
        image = pipe(**kwargs, output_type="pil", generator=torch.Generator("cpu").manual_seed(SEED)).images[0]
        ours = load_file(out + "_latents.safetensors")["latents"]
        if isinstance(pipe, Flux2KleinPipeline):  # its latent output: un-normalised and un-patchified
            err = referee.max_rel_error(self.vae_latents(ours), latents)
        else:
            if latents.dim() == 4:  # unpacked [B, C, h, w]: pack as _pack_latents does
                latents = latents.flatten(2).transpose(1, 2)
            err = referee.max_rel_error(ours, latents)
        print(f"{name}: latents rel error {err:.2e}")
        self.assertLess(err, TOLERANCE, f"{name}: latents")
        self.check_decoder(name, ours, load_file(out + "_pixels.safetensors")["pixels"])
        self.check_png(name, np.asarray(Image.open(out + ".png").convert("RGB")).astype(int),
                       np.asarray(image.convert("RGB")).astype(int))
        return ours

    def vae_latents(self, tokens):
        """Packed tokens [1, S, 128] as the VAE decodes them: unpacked, un-normalised and un-patchified by the
        pipeline's own code (Flux2KleinPipeline's latent output)."""
        pipe = self.pipe
        h, w = HEIGHT // 16, WIDTH // 16
        ids = Flux2Pipeline._prepare_latent_ids(torch.zeros(1, tokens.shape[2], h, w))
        x = pipe._unpack_latents_with_ids(tokens, ids)
        mean = pipe.vae.bn.running_mean.view(1, -1, 1, 1)
        std = torch.sqrt(pipe.vae.bn.running_var.view(1, -1, 1, 1) + pipe.vae.config.batch_norm_eps)
        return pipe._unpatchify_latents(x * std + mean)

    def check_decoder(self, name, tokens, pixels):
        x = self.vae_latents(tokens)
        with torch.no_grad():
            expected = self.pipe.vae.decode(x, return_dict=False)[0]
        err = referee.max_rel_error(pixels, expected)
        print(f"{name}: decoder rel error {err:.2e}")
        self.assertLess(err, TOLERANCE, f"{name}: decoder")

    def check_png(self, name, ours, theirs):
        self.assertEqual(ours.shape, (HEIGHT, WIDTH, 3))
        self.assertEqual(ours.shape, theirs.shape)
        diff = np.abs(ours - theirs)
        print(f"{name}: PNG max diff {diff.max()}, {np.count_nonzero(diff)} of {diff.size} values differ")
        self.assertLessEqual(diff.max(), 1, f"{name}: PNG")
        self.assertLessEqual(np.count_nonzero(diff), diff.size // 1000, f"{name}: PNG")



class SampleRefereeTest(SampleReferee):
    """Text to image, with and without a LoRA."""

    def test_without_lora(self):
        self.pipe.unload_lora_weights()
        self.run_both("base")

    def test_with_lora(self):
        transformer = self.pipe.transformer
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["to_q", "to_k", "to_v", "to_out.0"])
        transformer.add_adapter(config, adapter_name="probe")
        torch.manual_seed(5)
        with torch.no_grad():
            for pname, p in transformer.named_parameters():
                if "lora_" in pname:
                    p.copy_(0.3 * torch.randn_like(p))
        lora_dir = os.path.join(self.tmp, "lora")
        Flux2Pipeline.save_lora_weights(lora_dir, transformer_lora_layers=get_peft_model_state_dict(transformer, adapter_name="probe"),
                                        transformer_lora_adapter_metadata=config.to_dict())
        transformer.delete_adapters("probe")
        self.pipe.load_lora_weights(lora_dir, adapter_name="baton")
        lora_file = os.path.join(lora_dir, "pytorch_lora_weights.safetensors")
        try:
            with_lora = self.run_both("lora", "--lora", lora_file)
            # The same adapter through two stage workers (baton sample --stages 2: the stage driver's pipeline,
            # configured from the file's LoRA spec, no training job behind it).
            staged = self.run_both("lora_2_stages", "--lora", lora_file, "--stages", 2)
            print(f"two stages vs one process: latents rel error {referee.max_rel_error(staged, with_lora):.2e}")
        finally:
            self.pipe.unload_lora_weights()
        base = self.pipe(prompt_embeds=self.embeds, num_inference_steps=STEPS, width=WIDTH, height=HEIGHT,
                         guidance_scale=GUIDANCE, output_type="latent",
                         generator=torch.Generator("cpu").manual_seed(SEED)).images
        effect = referee.max_rel_error(with_lora, base.flatten(2).transpose(1, 2) if base.dim() == 4 else base)
        print(f"LoRA effect on the latents: {effect:.2e}")
        self.assertGreater(effect, 1e-2)  # the adapter really changes the picture


class ReferenceImagesRefereeTest(SampleReferee):
    """Sampling with reference images, against Flux2Pipeline(image=[...])."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        rng = np.random.default_rng(4)
        # 88x72 is cropped to 80x64 (multiples of 16); 64x96 is kept; both unlike the 64x48 target.
        cls.references = []
        for i, (w, h) in enumerate([(88, 72), (64, 96)]):
            path = os.path.join(cls.tmp, f"reference_{i}.png")
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
            cls.references.append(path)

    def test_dev_layout_with_references(self):
        plain = self.run_both("dev_plain")
        one = self.run_both("dev_refs", references=self.references)
        staged = self.run_both("dev_refs_2_stages", "--stages", 2, references=self.references)
        print(f"two stages vs one process with references: rel error {referee.max_rel_error(staged, one):.2e}")
        effect = referee.max_rel_error(one, plain)
        print(f"reference images' effect on the latents: {effect:.2e}")
        self.assertGreater(effect, 1e-2)  # the references really condition the picture

    def test_klein_layout_with_references(self):
        # The same pipeline with a transformer of FLUX.2 [klein]'s kind: no guidance embedder.
        klein_dir = os.path.join(self.tmp, "klein_pipeline")
        transformer = self.klein_transformer(klein_dir)
        klein = Flux2Pipeline(scheduler=self.pipe.scheduler, vae=self.pipe.vae, text_encoder=None, tokenizer=None,
                              transformer=transformer)
        klein.set_progress_bar_config(disable=True)
        self.run_both("klein_refs", pipe=klein, pipe_dir=klein_dir, references=self.references[:1])


class KleinGuidanceRefereeTest(SampleReferee):
    """A FLUX.2 [klein] base model (model_index.json: Flux2KleinPipeline, is_distilled false) samples with true
    classifier-free guidance: Flux2KleinPipeline's neg + guidance_scale·(pos − neg) each step, the negative prompt's
    embedding given on both sides (the pipeline's own negative prompt is "")."""

    def test_klein_base_samples_with_true_cfg(self):
        klein_dir = os.path.join(self.tmp, "klein_base")
        transformer = self.klein_transformer(klein_dir)
        index_path = os.path.join(klein_dir, "model_index.json")
        with open(index_path) as f:
            index = json.load(f)
        index.update({"_class_name": "Flux2KleinPipeline", "is_distilled": False})
        with open(index_path, "w") as f:
            json.dump(index, f)
        torch.manual_seed(8)
        negative = torch.randn_like(self.embeds)
        negative_file = os.path.join(self.tmp, "negative.safetensors")
        save_file({"prompt_embeds": negative.contiguous()}, negative_file)
        klein = Flux2KleinPipeline(scheduler=self.pipe.scheduler, vae=self.pipe.vae, text_encoder=None,
                                   tokenizer=None, transformer=transformer, is_distilled=False)
        klein.set_progress_bar_config(disable=True)
        guided = self.run_both("klein_cfg", "--negative_prompt_embeds", negative_file, pipe=klein,
                               pipe_dir=klein_dir, negative_prompt_embeds=negative)
        unguided = Flux2Pipeline(scheduler=self.pipe.scheduler, vae=self.pipe.vae, text_encoder=None,
                                 tokenizer=None, transformer=transformer)(
            prompt_embeds=self.embeds, num_inference_steps=STEPS, width=WIDTH, height=HEIGHT,
            guidance_scale=GUIDANCE, output_type="latent", generator=torch.Generator("cpu").manual_seed(SEED)).images
        if unguided.dim() == 4:
            unguided = unguided.flatten(2).transpose(1, 2)
        effect = referee.max_rel_error(guided, unguided)
        print(f"classifier-free guidance's effect on the latents: {effect:.2e}")
        self.assertGreater(effect, 1e-2)  # the guidance really steers the picture
        # With --prompt_embeds and no negative embedding, the klein base model's guidance cannot run: said so.
        proc = referee.baton("sample", "--model", klein_dir, "--prompt_embeds", self.embeds_file, "--steps", 1,
                             "--size", f"{WIDTH}x{HEIGHT}", "--out", os.path.join(self.tmp, "x.png"), check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("give --negative_prompt_embeds too", proc.stderr)


if __name__ == "__main__":
    unittest.main()

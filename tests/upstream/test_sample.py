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
"""

import math
import os
import shutil
import unittest

import numpy as np
import torch
from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Pipeline, Flux2Transformer2DModel
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

    def run_both(self, name, *lora_args, pipe=None, pipe_dir=None, references=()):
        pipe, pipe_dir = pipe or self.pipe, pipe_dir or self.pipe_dir
        out = os.path.join(self.tmp, name)
        ref_args = ("--references", ",".join(references)) if references else ()
        referee.baton("sample", "--model", pipe_dir, "--prompt_embeds", self.embeds_file, "--steps", STEPS,
                      "--size", f"{WIDTH}x{HEIGHT}", "--seed", SEED, "--guidance", GUIDANCE, "--out", out + ".png",
                      "--out_latents", out + "_latents.safetensors", "--out_pixels", out + "_pixels.safetensors",
                      *ref_args, *lora_args)
        kwargs = dict(prompt_embeds=self.embeds, num_inference_steps=STEPS, width=WIDTH, height=HEIGHT,
                      guidance_scale=GUIDANCE)
        if references:
            kwargs["image"] = [Image.open(f).convert("RGB") for f in references]
        latents = pipe(**kwargs, output_type="latent", generator=torch.Generator("cpu").manual_seed(SEED)).images
        image = pipe(**kwargs, output_type="pil", generator=torch.Generator("cpu").manual_seed(SEED)).images[0]
        ours = load_file(out + "_latents.safetensors")["latents"]
        if latents.dim() == 4:  # unpacked [B, C, h, w]: pack as _pack_latents does
            latents = latents.flatten(2).transpose(1, 2)
        err = referee.max_rel_error(ours, latents)
        print(f"{name}: latents rel error {err:.2e}")
        self.assertLess(err, TOLERANCE, f"{name}: latents")
        self.check_decoder(name, ours, load_file(out + "_pixels.safetensors")["pixels"])
        self.check_png(name, np.asarray(Image.open(out + ".png").convert("RGB")).astype(int),
                       np.asarray(image.convert("RGB")).astype(int))
        return ours

    def check_decoder(self, name, tokens, pixels):
        pipe = self.pipe
        h, w = HEIGHT // 16, WIDTH // 16
        ids = Flux2Pipeline._prepare_latent_ids(torch.zeros(1, tokens.shape[2], h, w))
        x = pipe._unpack_latents_with_ids(tokens, ids)
        mean = pipe.vae.bn.running_mean.view(1, -1, 1, 1)
        std = torch.sqrt(pipe.vae.bn.running_var.view(1, -1, 1, 1) + pipe.vae.config.batch_norm_eps)
        x = pipe._unpatchify_latents(x * std + mean)
        with torch.no_grad():
            expected = pipe.vae.decode(x, return_dict=False)[0]
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
        klein = Flux2Pipeline(scheduler=self.pipe.scheduler, vae=self.pipe.vae, text_encoder=None, tokenizer=None,
                              transformer=transformer)
        klein.set_progress_bar_config(disable=True)
        self.run_both("klein_refs", pipe=klein, pipe_dir=klein_dir, references=self.references[:1])


if __name__ == "__main__":
    unittest.main()

"""Referee: Wan image-to-video training against diffusers' WanImageToVideoPipeline and WanTransformer3DModel + peft.

A tiny pipeline folder of each kind is written by `baton init-weights` (wan-i2v-tiny: a 2·z + 4 channel transformer as
Wan2.2-I2V-A14B, no image encoder; wan-ti2v-tiny: TI2V-5B's expand_timesteps), then given a complete random
AutoencoderKLWan made by diffusers from the folder's own vae/config.json (non-trivial gammas and biases). Two clips of
random frames (PNG folders at exactly the bucket size, so the pixels are known) are encoded by `encoder_worker`.

Cases:
- Wan 2.1 I2V (wan-i2v-2.1-tiny, the CLIP image branch): each record's "image_embeds" against transformers'
  CLIPVisionModel(CLIPImageProcessor(first frame)).hidden_states[-2], as WanImageToVideoPipeline.encode_image;
- conditioning: each record's "condition" against WanImageToVideoPipeline.prepare_latents on the clip's first frame
  (the mask + first-frame latents; with last_image for first-last-frame; the clean first-frame latents with
  expand_timesteps);
- one training step: `baton step-grads` (the forward and backward passes of `baton train-local`) against diffusers'
  WanTransformer3DModel with the same peft LoRA, fed the input built here from the cache records, the step's noise
  and timesteps as WanImageToVideoPipeline.__call__ builds it (I2V: cat(noisy, condition); TI2V: the clean first frame
  at per-token timestep 0, and a loss without that frame, as DiffSynth-Studio's FlowMatchSFTLoss); the loss and every
  LoRA gradient.
Tolerance: 1e-4 relative (max |a - e| / max |e|), fp32 on both sides.
"""

import json
import os
import subprocess
import unittest

import numpy as np
import torch
from diffusers import AutoencoderKLWan, WanImageToVideoPipeline, WanPipeline, WanTransformer3DModel
from transformers import CLIPImageProcessor, CLIPVisionModel
from peft import LoraConfig
from PIL import Image
from safetensors.torch import load_file

import referee

TOLERANCE = 1e-4
SIZE, FRAMES = 32, 5
TARGETS = ["attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "ffn.net.0.proj", "ffn.net.2"]


def run(binary, *args):
    cmd = [os.path.join(referee.BIN_DIR, binary), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def random_vae(pipeline, seed):
    """A complete AutoencoderKLWan with the folder's vae/config.json, saved over the folder's encoder-only vae/."""
    with open(os.path.join(pipeline, "vae", "config.json")) as f:
        config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(**config).eval()
    referee.roughen_wan_vae(vae)
    vae.save_pretrained(os.path.join(pipeline, "vae"))
    return vae


def write_clips(dataset, seed):
    """Two clips of FRAMES random smooth frames, SIZE x SIZE PNGs, with captions; returns {name: pixels [1,3,F,H,W]}."""
    g = np.random.default_rng(seed)
    clips = {}
    for name in ("clip_a", "clip_b"):
        os.makedirs(os.path.join(dataset, name))
        coarse = g.uniform(0, 255, size=(FRAMES, 3, 8, 8))
        frames = []
        for f in range(FRAMES):
            img = Image.fromarray(coarse[f].transpose(1, 2, 0).astype(np.uint8)).resize((SIZE, SIZE), Image.BILINEAR)
            img.save(os.path.join(dataset, name, f"{f:03d}.png"))
            frames.append(torch.from_numpy(np.array(img)).permute(2, 0, 1).float() / 127.5 - 1)
        with open(os.path.join(dataset, name + ".txt"), "w") as f:
            f.write(f"a test clip {name}")
        clips[name] = torch.stack(frames, 1).unsqueeze(0)
    return clips


class WanI2vRefereeTest(unittest.TestCase):

    def build(self, variant, conditioning, seed, text_len=16):
        tmp = referee.temp_dir()
        self.addCleanup(tmp.cleanup)
        pipeline, dataset, cache = (os.path.join(tmp.name, d) for d in ("pipeline", "dataset", "cache"))
        referee.baton("init-weights", "--pipeline", variant, "--out", pipeline, "--seed", seed)
        vae = random_vae(pipeline, seed)
        clips = write_clips(dataset, seed)
        run("encoder_worker", "--dataset", dataset, "--cache", cache, "--model", pipeline, "--resolution", SIZE,
            "--max_frames", FRAMES, "--max_sequence_length", text_len, "--threads", 1, "--conditioning", conditioning)
        return tmp.name, vae, clips

    def expected_condition(self, vae, pixels, expand, last):
        pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=None,
                                       expand_timesteps=expand)
        z = vae.config.z_dim
        with torch.no_grad():
            out = pipe.prepare_latents(pixels[:, :, 0], 1, z, SIZE, SIZE, FRAMES, torch.float32, torch.device("cpu"),
                                       torch.Generator().manual_seed(0),
                                       last_image=pixels[:, :, -1] if last else None)
        return out[1][0]

    def check_conditioning(self, variant, conditioning, kind, expand=False, last=False):
        root, vae, clips = self.build(variant, conditioning, seed=3)
        with open(os.path.join(root, "cache", "index.json")) as f:
            index = json.load(f)
        self.assertEqual(index["conditioning"], kind)
        for name, pixels in clips.items():
            record = load_file(os.path.join(root, "cache", "records", name + ".safetensors"))
            expected = self.expected_condition(vae, pixels, expand, last)
            got = record["condition"]
            self.assertEqual(tuple(got.shape), tuple(expected.shape), name)
            err = referee.max_rel_error(got, expected)
            print(f"{variant} {conditioning} {name}: condition {tuple(got.shape)} rel err {err:.2e}")
            self.assertLess(err, TOLERANCE, name)

    def test_first_frame_conditioning_matches_prepare_latents(self):
        self.check_conditioning("wan-i2v-tiny", "auto", "wan_first_frame")

    def test_first_last_frame_conditioning_matches_prepare_latents(self):
        self.check_conditioning("wan-i2v-tiny", "first-last-frame", "wan_first_last_frame", last=True)

    def test_ti2v_clean_first_frame_matches_prepare_latents(self):
        self.check_conditioning("wan-ti2v-tiny", "first-frame", "wan_clean_first_frame", expand=True)

    def test_wan21_clip_image_embeddings_match_transformers(self):
        root, _, clips = self.build("wan-i2v-2.1-tiny", "auto", seed=4, text_len=512)
        folder = os.path.join(root, "pipeline")
        encoder = CLIPVisionModel.from_pretrained(os.path.join(folder, "image_encoder")).eval()
        processor = CLIPImageProcessor.from_pretrained(os.path.join(folder, "image_processor"))
        for name in clips:
            record = load_file(os.path.join(root, "cache", "records", name + ".safetensors"))
            first = Image.open(os.path.join(root, "dataset", name, "000.png")).convert("RGB")
            with torch.no_grad():  # WanImageToVideoPipeline.encode_image
                pixel_values = processor(images=first, return_tensors="pt").pixel_values
                expected = encoder(pixel_values=pixel_values, output_hidden_states=True).hidden_states[-2][0]
            err = referee.max_rel_error(record["image_embeds"], expected)
            print(f"wan 2.1 i2v {name}: image_embeds {tuple(expected.shape)} rel err {err:.2e}")
            self.assertLess(err, TOLERANCE, name)

    def test_wan21_i2v_training_step_matches_diffusers_peft(self):
        self.check_step("wan-i2v-2.1-tiny", "auto", expand=False, text_len=512)

    def test_i2v_training_step_matches_diffusers_peft(self):
        self.check_step("wan-i2v-tiny", "auto", expand=False)

    def test_ti2v_training_step_matches_diffusers_peft(self):
        self.check_step("wan-ti2v-tiny", "first-frame", expand=True)

    def reference_model(self, root):
        """diffusers' transformer (saved over the folder's) with a random peft LoRA, and that LoRA's file."""
        pipeline = os.path.join(root, "pipeline")
        with open(os.path.join(pipeline, "transformer", "config.json")) as f:
            config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        torch.manual_seed(7)
        model = WanTransformer3DModel(**config).eval()
        model.save_pretrained(os.path.join(pipeline, "transformer"))
        # Both factors random (B = 0 would leave every lora_A gradient zero), saved as diffusers does.
        model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=TARGETS, init_lora_weights=False))
        lora = {n.replace(".default", ""): p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
        WanPipeline.save_lora_weights(os.path.join(root, "init_lora"), transformer_lora_layers=lora)
        return model, os.path.join(root, "init_lora", "pytorch_lora_weights.safetensors")

    def baton_step(self, root, init):
        job = os.path.join(root, "job.yaml")
        with open(job, "w") as f:
            f.write(f"model: {os.path.join(root, 'pipeline')}\ndataset: {os.path.join(root, 'cache')}\n"
                    f"lora: {{rank: 4, alpha: 4, targets: '{','.join(TARGETS)}'}}\ninit_lora: {init}\n"
                    "timesteps: {sampling: none, shift: 5}\nsteps: 1\nbatch_size: 2\nmicro_batches: 1\nseed: 11\n")
        out = os.path.join(root, "grads.safetensors")
        referee.baton("step-grads", "--job", job, "--output", out)
        return load_file(out)

    def check_step(self, variant, conditioning, expand, text_len=16):
        root, _, _ = self.build(variant, conditioning, seed=5, text_len=text_len)
        model, init = self.reference_model(root)
        got = self.baton_step(root, init)
        with open(os.path.join(root, "cache", "index.json")) as f:
            records = json.load(f)["records"]
        cache = [load_file(os.path.join(root, "cache", r["file"])) for r in records]
        samples = got["mb0/samples"].tolist()
        x0, condition, text = (torch.stack([cache[i][k] for i in samples])
                               for k in ("latents", "condition", "prompt_embeds"))
        timestep, target = got["mb0/in/timestep"], got["mb0/target"]
        sigma = (timestep if timestep.dim() == 1 else timestep[:, -1]) / 1000
        noisy = (1 - sigma.view(-1, 1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1, 1) * (target + x0)
        if expand:  # WanImageToVideoPipeline.__call__ with expand_timesteps: frame 0 clean, its tokens at t = 0
            mask = torch.ones(1, 1, *x0.shape[2:])
            mask[:, :, 0] = 0
            hidden = (1 - mask) * condition + mask * noisy
            expected_t = torch.stack([(mask[0][0][:, ::2, ::2] * 1000 * s).flatten() for s in sigma])
            self.assertLess(referee.max_rel_error(timestep, expected_t), 1e-6)
        else:  # cat(noise 16, mask 4, image 16)
            hidden = torch.cat([noisy, condition], 1)
        self.assertLess(referee.max_rel_error(got["mb0/in/hidden_states"], hidden), 1e-6)

        image = torch.stack([cache[i]["image_embeds"] for i in samples]) if "image_embeds" in cache[0] else None
        pred = model(hidden_states=hidden, timestep=timestep, encoder_hidden_states=text,
                     encoder_hidden_states_image=image).sample
        # DiffSynth-Studio's FlowMatchSFTLoss drops the given first frame from prediction and target.
        keep = slice(1, None) if expand else slice(None)
        loss = torch.nn.functional.mse_loss(pred.float()[:, :, keep], target[:, :, keep])
        loss.backward()
        loss_err = abs(got["mb0/loss"].item() - loss.item()) / abs(loss.item())
        print(f"{variant} step loss: baton {got['mb0/loss'].item():.8f} diffusers {loss.item():.8f} rel {loss_err:.2e}")
        self.assertLess(loss_err, TOLERANCE)
        grads = {n.replace(".default", ""): p.grad for n, p in model.named_parameters() if "lora_" in n}
        self.assertEqual(len(grads), len([k for k in got if k.startswith("grad/")]))
        worst = 0.0
        for name, expected in grads.items():
            key = "grad/" + name.removeprefix("transformer.")
            self.assertIn(key, got)
            worst = max(worst, referee.max_rel_error(got[key], expected))
        print(f"{variant}: {len(grads)} LoRA gradients, worst rel err {worst:.2e}")
        self.assertLess(worst, TOLERANCE)


if __name__ == "__main__":
    unittest.main()

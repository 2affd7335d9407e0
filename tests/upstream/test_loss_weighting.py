"""Referee: `loss: {weighting: sigma_sqrt | cosmap}` against diffusers' training loss.

diffusers' flow-matching trainers (train_dreambooth_lora_flux2.py and the SD3 ones) weight each sample's squared error
by compute_loss_weighting_for_sd3(weighting_scheme, sigmas) and take
mean((weighting * (model_pred - target) ** 2).reshape(b, -1), 1).mean(). `baton step-grads` runs train-local's step on
a tiny random fp32 model: its weights must be compute_loss_weighting_for_sd3 of the step's own sigmas (the timestep
input), and its loss and LoRA gradients those of that formula with diffusers' Flux2Transformer2DModel + peft fed the
same inputs, within 1e-5.
"""

import os
import unittest

import torch
from diffusers import Flux2Pipeline
from diffusers.training_utils import compute_loss_weighting_for_sd3
from peft import LoraConfig
from safetensors.torch import load_file

from flux2_tiny import make_model, write_config
from referee import baton, max_rel_error, temp_dir
from test_lora_precision import BLOCK_LINEARS  # Baton's all-linear targets as peft's regex

TOLERANCE = 1e-5
CONFIG = dict(
    patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
    joint_attention_dim=24, timestep_guidance_channels=256, axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True,
)


class LossWeightingTest(unittest.TestCase):
    def test_sigma_sqrt_and_cosmap_weight_the_loss_as_diffusers(self):
        with temp_dir() as tmp:
            model = make_model(43, **CONFIG)
            folder = os.path.join(tmp, "transformer")
            model.save_pretrained(folder)
            config = os.path.join(tmp, "config.json")
            write_config(model, config)
            cache = os.path.join(tmp, "cache")
            baton("synthetic-cache", "--config", config, "--out", cache, "--samples", 4, "--grids", "2x3",
                  "--text-len", 5)
            torch.manual_seed(3)  # both LoRA factors random, so every gradient is non-zero
            model.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=BLOCK_LINEARS, init_lora_weights=False))
            lora = {n.replace(".default", ""): p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
            Flux2Pipeline.save_lora_weights(os.path.join(tmp, "init"), transformer_lora_layers=lora)
            for scheme in ("sigma_sqrt", "cosmap"):
                job = os.path.join(tmp, f"{scheme}.yaml")
                with open(job, "w") as f:
                    f.write(f"model: {folder}\ndataset: {cache}\nlora: {{rank: 2, alpha: 2, targets: all-linear}}\n"
                            f"init_lora: {tmp}/init/pytorch_lora_weights.safetensors\nsteps: 1\nbatch_size: 4\n"
                            f"micro_batches: 1\nseed: 7\nloss: {{weighting: {scheme}}}\n")
                out = os.path.join(tmp, f"{scheme}.safetensors")
                baton("step-grads", "--job", job, "--output", out)
                got = load_file(out)
                inputs = {k.removeprefix("mb0/in/"): v for k, v in got.items() if k.startswith("mb0/in/")}
                weighting = compute_loss_weighting_for_sd3(scheme, sigmas=inputs["timestep"].float())
                self.assertLess(max_rel_error(got["mb0/loss_weighting"], weighting), 1e-6, scheme)
                for p in model.parameters():
                    p.grad = None
                pred = model(**inputs, return_dict=False)[0]
                target = got["mb0/target"]
                w = weighting.view(-1, *([1] * (target.dim() - 1)))
                loss = torch.mean((w * (pred.float() - target.float()) ** 2).reshape(target.shape[0], -1), 1).mean()
                loss.backward()
                loss_err = abs(got["mb0/loss"].item() - loss.item()) / abs(loss.item())
                worst = 0.0
                for n, p in model.named_parameters():
                    if "lora_" in n:
                        key = "grad/" + n.replace(".default", "")
                        worst = max(worst, max_rel_error(got[key], p.grad))
                print(f"{scheme}: weights {weighting.tolist()}; loss rel err {loss_err:.1e}, gradients {worst:.1e}")
                self.assertLess(loss_err, TOLERANCE, scheme)
                self.assertLess(worst, TOLERANCE, scheme)


if __name__ == "__main__":
    unittest.main()

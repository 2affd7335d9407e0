"""Referee: one FLUX.2 training step on a bf16 base, Baton's adapter math against diffusers + peft at the same precision.

`baton step-grads` (train-local's forward and backward) on a bf16 job, with `lora_dtype: bf16` (the default: the
adapters' projections in bf16, as PEFT's adapters run once `add_adapter` has cast them to the base dtype) and with
`lora_dtype: fp32` (Baton's fp32 math; PEFT with its adapters upcast to fp32), against diffusers'
Flux2Transformer2DModel in bf16 carrying the same random peft LoRA, fed the step's own inputs: the loss and every LoRA
gradient.

Tolerance: bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 2e-3 per op); through 2 double + 2 single blocks
and their backward the two implementations (different op order and fusion: Baton's attention and norms are its own, on
the same bf16 base) drift apart by a few dozen of those: measured 4.5e-2 (bf16) and 5.1e-2 (fp32) of the largest
gradient, printed; 1e-1 allowed. The same harness in fp32 agrees to 2e-6, and a wrong adapter scale was off by 1.7.
Each precision is also checked to be nearer its own referee than the other precision's (measured 4.5e-2 vs 5.0e-2 and
5.1e-2 vs 5.9e-2): what the setting promises. On a CPU without AVX-512 (torch's CPU capability below AVX512) the bf16
half of that check is printed, not asserted: there both sides' bf16 GEMMs run libtorch's generic bf16 kernel (oneDNN
has none for the CPU; Baton's CPU Linear then uses at::matmul too) and the adapters' precision no longer shows through
the base's bf16 noise: measured on an AVX2 EPYC 4.47e-2 against peft at bf16 vs 4.45e-2 at fp32, and Baton's own
bf16 − fp32 difference at cosine 0.02 with peft's. The fp32 half and every tolerance stay asserted everywhere.
"""

import os
import unittest

import torch
from diffusers import Flux2Pipeline
from peft import LoraConfig
from safetensors.torch import load_file

from flux2_tiny import make_model, write_config
from referee import baton, max_rel_error, temp_dir

TOLERANCE = 1e-1
# Whether this CPU has the bf16 GEMM kernels (AVX-512) the bf16 half of the "nearer" check was measured with.
BF16_KERNELS = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
# Baton's all-linear: every Linear inside the blocks (not the embedders, the shared modulation or the head).
BLOCK_LINEARS = (r"(transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)"
                 r"|ff\.linear_in|ff\.linear_out|ff_context\.linear_in|ff_context\.linear_out)"
                 r"|single_transformer_blocks\.\d+\.attn\.(to_qkv_mlp_proj|to_out))")
CONFIG = dict(
    patch_size=1, in_channels=8, num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
    joint_attention_dim=24, timestep_guidance_channels=256, axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True,
)


class LoraPrecisionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp_handle = temp_dir()
        tmp = cls.tmp = cls.tmp_handle.name
        model = make_model(41, **CONFIG)
        cls.folder = os.path.join(tmp, "transformer")
        model.save_pretrained(cls.folder)
        config = os.path.join(tmp, "config.json")
        write_config(model, config)
        cls.cache = os.path.join(tmp, "cache")
        baton("synthetic-cache", "--config", config, "--out", cls.cache, "--samples", 4, "--grids", "3x4", "--text-len", 6)
        # Both factors random (B = 0 would leave every lora_A gradient zero), saved as diffusers does.
        torch.manual_seed(9)
        model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=BLOCK_LINEARS, init_lora_weights=False))
        lora = {n.replace(".default", ""): p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
        Flux2Pipeline.save_lora_weights(os.path.join(tmp, "init_lora"), transformer_lora_layers=lora)
        cls.init = os.path.join(tmp, "init_lora", "pytorch_lora_weights.safetensors")
        cls.model = model
        cls.lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}  # fp32, as drawn

    @classmethod
    def tearDownClass(cls):
        cls.tmp_handle.cleanup()

    def baton_step(self, lora_dtype):
        job = os.path.join(self.tmp, f"job_{lora_dtype}.yaml")
        with open(job, "w") as f:
            f.write(f"model: {self.folder}\ndataset: {self.cache}\nlora: {{rank: 4, alpha: 4, targets: all-linear}}\n"
                    f"init_lora: {self.init}\ndtype: bf16\nlora_dtype: {lora_dtype}\nsteps: 1\nbatch_size: 2\n"
                    "micro_batches: 1\nseed: 11\n")
        out = os.path.join(self.tmp, f"grads_{lora_dtype}.safetensors")
        baton("step-grads", "--job", job, "--output", out)
        return load_file(out)

    def peft_step(self, got, adapters):
        """diffusers + peft on the bf16 base with the adapters in `adapters`' dtype: the loss and LoRA gradients."""
        model = self.model.to(torch.bfloat16)
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.data = self.lora[n].to(adapters)
            p.requires_grad_("lora_" in n)
            p.grad = None
        inputs = {k.removeprefix("mb0/in/"): v for k, v in got.items() if k.startswith("mb0/in/")}
        for k in ("hidden_states", "encoder_hidden_states", "timestep", "guidance"):
            if k in inputs:
                inputs[k] = inputs[k].to(torch.bfloat16)
        pred = model(**inputs, return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(pred.float(), got["mb0/target"].float())
        loss.backward()
        grads = {n.replace(".default", ""): p.grad.float() for n, p in model.named_parameters() if "lora_" in n}
        return loss.item(), grads

    def worst(self, got, grads):
        self.assertEqual(len(grads), len([k for k in got if k.startswith("grad/")]))
        worst = 0.0
        for name, expected in grads.items():
            key = "grad/" + name.removeprefix("transformer.")
            self.assertIn(key, got)
            worst = max(worst, max_rel_error(got[key], expected))
        return worst

    def test_each_precision_matches_peft_at_that_precision(self):
        refs = {"bf16": self.peft_step_for(torch.bfloat16), "fp32": self.peft_step_for(torch.float32)}
        for lora_dtype in ("bf16", "fp32"):
            got = self.baton_step(lora_dtype)
            for name in (k for k in got if k.startswith("grad/")):
                self.assertEqual(got[name].dtype, torch.float32, f"{name}: the gradients are the fp32 adapters'")
            loss, grads = refs[lora_dtype]
            other = refs["fp32" if lora_dtype == "bf16" else "bf16"][1]
            loss_err = abs(got["mb0/loss"].item() - loss) / abs(loss)
            own, cross = self.worst(got, grads), self.worst(got, other)
            print(f"lora_dtype {lora_dtype}: loss rel err {loss_err:.2e}; gradients: worst rel err {own:.2e} against "
                  f"peft at the same precision, {cross:.2e} against the other")
            self.assertLess(loss_err, TOLERANCE, lora_dtype)
            self.assertLess(own, TOLERANCE, lora_dtype)
            if lora_dtype == "bf16" and not BF16_KERNELS:
                print("  (not asserted here: nearer peft at bf16 than at fp32; see the note above)")
                continue
            self.assertLess(own, cross, f"lora_dtype {lora_dtype} is nearer peft at the other precision")

    def peft_step_for(self, adapters):
        got = self.baton_step("bf16")  # only its inputs and target: the step's micro-batch
        return self.peft_step(got, adapters)


if __name__ == "__main__":
    unittest.main()

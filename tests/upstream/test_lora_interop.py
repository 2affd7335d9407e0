"""Referee: LoRA files between Baton and diffusers/peft, both directions, on tiny random FLUX.2 transformers.

Baton → diffusers: a LoRA trained by `baton train-local` (save_bfl on) loads with Flux2Pipeline.load_lora_weights
(the output folder itself and the BFL/ComfyUI file through diffusers' FLUX.2 non-diffusers converter) and with
transformer.load_lora_adapter; diffusers' forward then equals `baton forward --lora`, also at a non-1 scale.
peft/diffusers → Baton: adapters made by peft (saved by Flux2Pipeline.save_lora_weights and by
transformer.save_lora_adapter) give the same forward in `baton forward --lora`, and a job starts from one
(`init_lora`). The klein-like model (no guidance embedder) runs the second half.

Tolerance: 1e-4 of the output's max |value| (fp32 on both sides; observed ~1e-6). Each test also checks that the
LoRA moves the output by far more than the tolerance, so a LoRA that was silently dropped cannot pass.
"""

import copy
import os
import subprocess
import unittest

import torch
from diffusers import FlowMatchEulerDiscreteScheduler, Flux2Pipeline
from diffusers.loaders.lora_base import _best_guess_weight_name
from peft import LoraConfig, get_peft_model_state_dict
from safetensors import safe_open
from safetensors.torch import load_file

from flux2_tiny import baton_forward, diffusers_forward, make_inputs, make_model, write_config
from referee import BIN_DIR, baton, max_rel_error, temp_dir

TOLERANCE = 1e-4
MIN_EFFECT = 1e-2  # the LoRA must change the output by at least this (relative), 100× the tolerance

GUIDANCE = dict(
    patch_size=1, in_channels=8, num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
    joint_attention_dim=24, timestep_guidance_channels=256, axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True,
)
KLEIN = dict(
    patch_size=1, in_channels=4, num_layers=1, num_single_layers=2, attention_head_dim=8, num_attention_heads=3,
    joint_attention_dim=12, timestep_guidance_channels=64, axes_dims_rope=[2, 2, 2, 2], guidance_embeds=False,
)

# The same module set in peft's regex and in Baton's target list (attention, the single blocks' output and two
# feed-forward Linears).
PEFT_TARGETS = (
    r".*(attn\.(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj|to_add_out|to_out\.0|to_qkv_mlp_proj)"
    r"|single_transformer_blocks\.\d+\.attn\.to_out|ff\.linear_in|ff_context\.linear_out)$"
)
BATON_TARGETS = "[to_q, to_k, to_v, add_q_proj, add_k_proj, add_v_proj, to_add_out, to_out.0, to_qkv_mlp_proj, " \
                "attn.to_out, ff.linear_in, ff_context.linear_out]"


def tiny_pipeline(transformer) -> Flux2Pipeline:
    """A Flux2Pipeline around `transformer` only: load_lora_weights needs nothing else."""
    return Flux2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=None, text_encoder=None, tokenizer=None,
                         transformer=transformer)


def write_job(path, model, cache, rank, alpha, targets, **extra):
    lines = [f"model: {model}", f"dataset: {cache}", f"lora: {{rank: {rank}, alpha: {alpha}, targets: {targets}}}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class BatonLoraInDiffusersTest(unittest.TestCase):
    """A LoRA trained by Baton, loaded by diffusers."""

    @classmethod
    def setUpClass(cls):
        cls.tmp_handle = temp_dir()
        cls.tmp = cls.tmp_handle.name
        cls.model = make_model(31, **GUIDANCE)
        cls.folder = os.path.join(cls.tmp, "transformer")
        cls.model.save_pretrained(cls.folder)
        config = os.path.join(cls.tmp, "config.json")
        write_config(cls.model, config)
        cache = os.path.join(cls.tmp, "cache")
        baton("synthetic-cache", "--config", config, "--out", cache, "--samples", 4, "--grids", "2x3", "--text-len", 5)
        job = os.path.join(cls.tmp, "job.yaml")
        # alpha ≠ rank so the scale path is exercised; lr large enough that B moves well away from zero.
        write_job(job, cls.folder, cache, 4, 12, "all-linear", steps=3, batch_size=2, seed=7, save_bfl="true",
                  optimizer="{lr: 0.05}")
        cls.out = os.path.join(cls.tmp, "out")
        baton("train-local", "--job", job, "--output", cls.out)
        cls.inputs = make_inputs(cls.model, 5, 2, 3, 4, 6)
        cls.base = diffusers_forward(cls.model, cls.inputs)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_handle.cleanup()

    def compare(self, what, expected, lora_path, *extra):
        got = baton_forward(self.tmp, self.folder, self.inputs, "--lora", lora_path, *extra)
        err, effect = max_rel_error(got, expected), max_rel_error(self.base, expected)
        print(f"{what}: rel error {err:.2e} (LoRA effect {effect:.2e})")
        self.assertGreater(effect, MIN_EFFECT, f"{what}: the LoRA barely changes the output")
        self.assertLess(err, TOLERANCE, what)

    def test_output_folder_picks_the_diffusers_file(self):
        top = sorted(f for f in os.listdir(self.out) if f.endswith(".safetensors"))
        self.assertEqual(top, ["lora.safetensors"])
        self.assertEqual(_best_guess_weight_name(self.out), "lora.safetensors")
        self.assertTrue(os.path.isfile(os.path.join(self.out, "bfl", "lora_bfl.safetensors")))
        pipe = tiny_pipeline(copy.deepcopy(self.model))
        pipe.load_lora_weights(self.out, adapter_name="baton")
        self.compare("load_lora_weights(output folder)", diffusers_forward(pipe.transformer, self.inputs),
                     os.path.join(self.out, "lora.safetensors"))

    def test_load_lora_adapter_and_scales(self):
        path = os.path.join(self.out, "lora.safetensors")
        transformer = copy.deepcopy(self.model)
        transformer.load_lora_adapter(path, prefix="transformer", adapter_name="baton")
        self.compare("load_lora_adapter", diffusers_forward(transformer, self.inputs), path)
        # FLUX.2's forward honours joint_attention_kwargs["scale"] (apply_lora_scale).
        expected = diffusers_forward(transformer, self.inputs, joint_attention_kwargs={"scale": 0.5})
        self.compare("joint_attention_kwargs scale 0.5", expected, path, "--lora-scale", 0.5)
        transformer.set_adapters(["baton"], weights=[1.7])
        self.compare("set_adapters weight 1.7", diffusers_forward(transformer, self.inputs), path, "--lora-scale", 1.7)

    def test_bfl_file_loads_through_the_flux2_converter(self):
        bfl = os.path.join(self.out, "bfl", "lora_bfl.safetensors")
        with safe_open(bfl, "pt") as f:
            keys = list(f.keys())
        self.assertTrue(all(k.startswith("diffusion_model.") for k in keys))
        self.assertFalse(any(k.endswith(".alpha") for k in keys))
        # The layout Baton wrote before (".alpha" tensors) is what the converter refuses.
        old_layout = dict(load_file(bfl))
        for key in [k for k in old_layout if k.endswith(".lora_A.weight")]:
            old_layout[key.replace(".lora_A.weight", ".alpha")] = torch.tensor(3.0 * old_layout[key].shape[0])
        with self.assertRaisesRegex(ValueError, "should be empty"):
            Flux2Pipeline.lora_state_dict(old_layout)
        pipe = tiny_pipeline(copy.deepcopy(self.model))
        pipe.load_lora_weights(bfl, adapter_name="baton_bfl")
        expected = diffusers_forward(pipe.transformer, self.inputs)
        self.compare("BFL file via load_lora_weights", expected, bfl)
        # The BFL and diffusers files are the same adapter.
        self.compare("BFL file in diffusers vs Baton's diffusers file", expected,
                     os.path.join(self.out, "lora.safetensors"))


class PeftLoraInBatonTest(unittest.TestCase):
    """Adapters made by peft/diffusers on the klein-like model, loaded by Baton."""

    @classmethod
    def setUpClass(cls):
        cls.tmp_handle = temp_dir()
        cls.tmp = cls.tmp_handle.name
        base = make_model(47, **KLEIN)
        cls.folder = os.path.join(cls.tmp, "transformer")
        base.save_pretrained(cls.folder)
        cls.config = os.path.join(cls.tmp, "config.json")
        write_config(base, cls.config)
        cls.inputs = make_inputs(base, 9, 2, 3, 3, 5)
        cls.base_out = diffusers_forward(base, cls.inputs)
        cls.model = copy.deepcopy(base)
        # alpha 8 over rank 4 (scale 2), and one module with its own alpha (alpha_pattern).
        lora_config = LoraConfig(r=4, lora_alpha=8, target_modules=PEFT_TARGETS,
                                 alpha_pattern={"single_transformer_blocks.1.attn.to_out": 2})
        cls.model.add_adapter(lora_config, adapter_name="default")
        torch.manual_seed(3)
        with torch.no_grad():
            for name, p in cls.model.named_parameters():
                if "lora_" in name:
                    p.copy_(0.3 * torch.randn_like(p))
        cls.expected = diffusers_forward(cls.model, cls.inputs)
        cls.pipeline_dir = os.path.join(cls.tmp, "pipeline_lora")
        Flux2Pipeline.save_lora_weights(cls.pipeline_dir, transformer_lora_layers=get_peft_model_state_dict(cls.model),
                                        transformer_lora_adapter_metadata=lora_config.to_dict())
        cls.pipeline_file = os.path.join(cls.pipeline_dir, "pytorch_lora_weights.safetensors")
        cls.adapter_dir = os.path.join(cls.tmp, "adapter_lora")
        cls.model.save_lora_adapter(cls.adapter_dir)
        cls.adapter_file = os.path.join(cls.adapter_dir, "pytorch_lora_weights.safetensors")

    @classmethod
    def tearDownClass(cls):
        cls.tmp_handle.cleanup()

    def compare(self, what, lora_path, expected=None):
        expected = self.expected if expected is None else expected
        got = baton_forward(self.tmp, self.folder, self.inputs, "--lora", lora_path)
        err, effect = max_rel_error(got, expected), max_rel_error(self.base_out, expected)
        print(f"{what}: rel error {err:.2e} (LoRA effect {effect:.2e})")
        self.assertGreater(effect, MIN_EFFECT)
        self.assertLess(err, TOLERANCE, what)

    def test_pipeline_saved_lora(self):
        with safe_open(self.pipeline_file, "pt") as f:
            self.assertTrue(all(k.startswith("transformer.") for k in f.keys()))
        self.compare("Flux2Pipeline.save_lora_weights file", self.pipeline_file)

    def test_save_lora_adapter_file(self):
        with safe_open(self.adapter_file, "pt") as f:
            self.assertFalse(any(k.startswith("transformer.") for k in f.keys()))
        self.compare("transformer.save_lora_adapter file", self.adapter_file)

    def run_job(self, name, rank, targets, check=True, **extra):
        cache = os.path.join(self.tmp, "cache")
        if not os.path.isdir(cache):
            baton("synthetic-cache", "--config", self.config, "--out", cache, "--samples", 2, "--grids", "2x2",
                  "--text-len", 3)
        job = os.path.join(self.tmp, f"{name}.yaml")
        write_job(job, self.folder, cache, rank, 4, targets, init_lora=self.pipeline_file, batch_size=1, seed=1,
                  **extra)
        out = os.path.join(self.tmp, name)
        return baton("train-local", "--job", job, "--output", out, check=check), out

    def check_started_from_file(self, out):
        saved = load_file(os.path.join(out, "lora.safetensors"))
        source = load_file(self.pipeline_file)
        self.assertEqual(sorted(saved), sorted(source))
        # The job's scale is alpha 4 / rank 4 = 1; the file's is 2 (or 0.5 under alpha_pattern): B carries the ratio.
        for key, t in source.items():
            ratio = 1.0
            if ".lora_B." in key:
                ratio = 0.5 if "single_transformer_blocks.1.attn.to_out." in key else 2.0
            self.assertLess((saved[key] - t * ratio).abs().max().item(), 1e-8, key)

    def test_job_starts_from_init_lora(self):
        # lr 1e-9: Adam's first step moves each weight by at most lr, so after one step the LoRA is the file's.
        _, out = self.run_job("init", 4, BATON_TARGETS, steps=1, optimizer="{lr: 1.0e-9}")
        self.check_started_from_file(out)
        self.compare("1-step job from init_lora", os.path.join(out, "lora.safetensors"))

    def test_coordinator_starts_from_init_lora(self):
        # The same job over two stage workers: the coordinator's master LoRA starts from the file.
        cache = os.path.join(self.tmp, "cache")
        if not os.path.isdir(cache):
            baton("synthetic-cache", "--config", self.config, "--out", cache, "--samples", 2, "--grids", "2x2",
                  "--text-len", 3)
        job = os.path.join(self.tmp, "pipeline.yaml")
        write_job(job, self.folder, cache, 4, 4, BATON_TARGETS, init_lora=self.pipeline_file, batch_size=2,
                  micro_batches=2, seed=1, steps=1, optimizer="{lr: 1.0e-9}")
        out = os.path.join(self.tmp, "pipeline_out")
        cmd = [os.path.join(BIN_DIR, "coordinator"), "--stages", "2", "--job", job, "--output", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
        self.check_started_from_file(out)
        self.compare("2-stage job from init_lora", os.path.join(out, "lora.safetensors"))

    def test_init_lora_mismatch_is_named(self):
        proc, _ = self.run_job("rank8", 8, BATON_TARGETS, check=False, steps=1)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("has rank 4 but the job's lora.rank is 8", proc.stderr)
        proc, _ = self.run_job("attention", 4, "attention", check=False, steps=1)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("adapters on modules the job's lora.targets do not select: transformer_blocks.0.ff.linear_in",
                      proc.stderr)


if __name__ == "__main__":
    unittest.main()

"""Referee: Baton's flow schedulers (core/sample/unipc_scheduler.h) against diffusers, step by step.

Wan pipeline folders ship UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
flow_shift=3 | 5 | 16, solver_order=2, solver_type="bh2", predict_x0, lower_order_final, final σ 0). Each case saves
diffusers' own config with save_config, draws a random sample and a random model output per step, runs the loop
WanPipeline runs (`latents = scheduler.step(noise_pred, t, latents).prev_sample` over scheduler.timesteps), and has
`baton scheduler-replay` run the same model outputs. Every intermediate sample, the timesteps and the sigmas are
compared. Baton links the libtorch of this venv and repeats diffusers' op sequence on 0-d fp32 coefficient tensors
(same ops, same dtype promotion, same devices), so every sample must be bit-identical; a relative error under 1e-6
is checked first only so that a failure says how far off it is. FlowMatchEulerDiscreteScheduler(shift) is held to
the same.
"""

import json
import os
import unittest

import torch
from safetensors.torch import load_file, save_file

from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

from referee import baton, max_rel_error, temp_dir

SHAPE = (1, 16, 3, 6, 5)  # [B, C, F, H, W]: a tiny Wan latent
WAN = dict(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True, solver_order=2,
           solver_type="bh2", predict_x0=True, lower_order_final=True, final_sigmas_type="zero")
TOLERANCE = 1e-6


def diffusers_replay(scheduler, steps, sample, model_outputs):
    """WanPipeline's denoising loop with the model replaced by the given outputs."""
    scheduler.set_timesteps(steps)
    samples = [sample]
    latents = sample
    for i, t in enumerate(scheduler.timesteps):
        latents = scheduler.step(model_outputs[i], t, latents, return_dict=False)[0]
        samples.append(latents)
    return torch.stack([s.to(latents.dtype) for s in samples]), scheduler.timesteps, scheduler.sigmas


class UniPCReplayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = temp_dir()
        cls.count = 0

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def folder(self, scheduler, pipeline_layout=False):
        """Saves `scheduler` as diffusers does; returns the folder to pass to --scheduler."""
        self.__class__.count += 1
        root = os.path.join(self.tmp.name, f"case{self.count}")
        scheduler.save_config(os.path.join(root, "scheduler") if pipeline_layout else root)
        return root

    def replay(self, scheduler, steps, seed, model_dtype=torch.float32, extra=(), pipeline_layout=False,
               reference=None):
        """Runs both; returns (baton's outputs, diffusers' samples, timesteps, sigmas)."""
        g = torch.Generator().manual_seed(seed)
        sample = torch.randn(SHAPE, generator=g)
        model_outputs = torch.randn((steps, *SHAPE), generator=g).to(model_dtype)
        folder = self.folder(scheduler, pipeline_layout)
        inputs = os.path.join(folder, "in.safetensors")
        output = os.path.join(folder, "out.safetensors")
        save_file({"sample": sample, "model_outputs": model_outputs}, inputs)
        baton("scheduler-replay", "--scheduler", folder, "--steps", steps, "--inputs", inputs, "--output", output,
              *extra)
        expected = diffusers_replay(reference or scheduler, steps, sample, model_outputs)
        return load_file(output), expected

    def check(self, got, expected, label):
        samples, timesteps, sigmas = expected
        self.assertEqual(got["timesteps"].dtype, timesteps.dtype, label)
        self.assertTrue(torch.equal(got["timesteps"], timesteps), f"{label}: {got['timesteps']} vs {timesteps}")
        self.assertTrue(torch.equal(got["sigmas"], sigmas), f"{label}: {got['sigmas']} vs {sigmas}")
        self.assertEqual(got["samples"].shape, samples.shape, label)
        self.assertEqual(got["samples"].dtype, samples.dtype, label)
        self.assertTrue(torch.isfinite(samples).all(), label)
        for i in range(samples.shape[0]):
            err = max_rel_error(got["samples"][i], samples[i])
            self.assertLess(err, TOLERANCE, f"{label}: sample after step {i} off by {err:.3g}")
            self.assertTrue(torch.equal(got["samples"][i], samples[i]),
                            f"{label}: sample after step {i} is not bit-identical (relative error {err:.3g})")

    def test_wan_configs_match_step_by_step(self):
        for shift in (3.0, 5.0, 16.0):
            for steps in (1, 2, 5, 20, 50):
                with self.subTest(flow_shift=shift, steps=steps):
                    got, expected = self.replay(UniPCMultistepScheduler(flow_shift=shift, **WAN), steps,
                                                seed=int(shift * 100 + steps))
                    self.check(got, expected, f"flow_shift {shift}, {steps} steps")

    def test_bf16_model_output_with_fp32_latents(self):
        # WanPipeline's dtypes: fp32 latents, the transformer's bf16 noise_pred; diffusers does not upcast it.
        got, expected = self.replay(UniPCMultistepScheduler(flow_shift=5.0, **WAN), 8, seed=7,
                                    model_dtype=torch.bfloat16)
        self.assertEqual(got["samples"].dtype, torch.float32)
        self.check(got, expected, "bf16 model outputs")

    def test_other_options(self):
        variants = {
            "order 3": dict(solver_order=3),
            "order 1": dict(solver_order=1),
            # bh1 and lower_order_final=False need a final σ > 0: with 0 diffusers' last step is inf/NaN, and Baton
            # refuses them (test_unsupported_options_are_refused_by_name).
            "bh1": dict(solver_type="bh1", final_sigmas_type="sigma_min"),
            "bh1 order 3": dict(solver_type="bh1", solver_order=3, final_sigmas_type="sigma_min"),
            "no lower_order_final, sigma_min": dict(lower_order_final=False, final_sigmas_type="sigma_min"),
            "sigma_min": dict(final_sigmas_type="sigma_min"),
            "disable_corrector": dict(disable_corrector=[0, 3]),
            "shift_terminal": dict(shift_terminal=0.05),
        }
        for name, options in variants.items():
            for steps in (1, 2, 7) if "shift_terminal" not in options else (2, 7):  # 1 step: σ = 0/0
                with self.subTest(variant=name, steps=steps):
                    config = dict(WAN, flow_shift=3.0)
                    config.update(options)
                    got, expected = self.replay(UniPCMultistepScheduler(**config), steps, seed=steps)
                    self.check(got, expected, f"{name}, {steps} steps")

    def test_pipeline_folder_layout(self):
        got, expected = self.replay(UniPCMultistepScheduler(flow_shift=3.0, **WAN), 4, seed=1, pipeline_layout=True)
        self.check(got, expected, "pipeline folder")

    def test_flow_match_euler(self):
        for shift in (3.0, 5.0):
            for steps in (1, 2, 5, 20):
                with self.subTest(shift=shift, steps=steps):
                    got, expected = self.replay(FlowMatchEulerDiscreteScheduler(shift=shift), steps, seed=steps)
                    self.check(got, expected, f"Euler shift {shift}, {steps} steps")
        # bf16 model outputs: diffusers' Euler upcasts the sample, then returns the model output's dtype.
        got, expected = self.replay(FlowMatchEulerDiscreteScheduler(shift=5.0), 6, seed=3, model_dtype=torch.bfloat16)
        self.assertEqual(got["samples"].dtype, torch.bfloat16)
        self.check(got, expected, "Euler, bf16 model outputs")

    def test_euler_alternative_of_a_wan_folder(self):
        # --euler on a UniPC folder is FlowMatchEulerDiscreteScheduler(shift=flow_shift).
        got, expected = self.replay(UniPCMultistepScheduler(flow_shift=5.0, **WAN), 10, seed=2, extra=("--euler",),
                                    reference=FlowMatchEulerDiscreteScheduler(shift=5.0, num_train_timesteps=1000))
        self.check(got, expected, "--euler")

    def test_unsupported_options_are_refused_by_name(self):
        g = torch.Generator().manual_seed(0)
        for key, value in [("thresholding", True), ("prediction_type", "epsilon"), ("use_karras_sigmas", True),
                           ("predict_x0", False), ("solver_type", "bh3"), ("use_flow_sigmas", False),
                           ("solver_type", "bh1"), ("lower_order_final", False)]:
            with self.subTest(key=key):
                folder = self.folder(UniPCMultistepScheduler(flow_shift=3.0, **WAN))
                path = os.path.join(folder, "scheduler_config.json")
                with open(path) as f:
                    config = json.load(f)
                config[key] = value
                with open(path, "w") as f:
                    json.dump(config, f)
                inputs = os.path.join(folder, "in.safetensors")
                save_file({"sample": torch.randn(SHAPE, generator=g), "model_outputs": torch.randn((2, *SHAPE))},
                          inputs)
                proc = baton("scheduler-replay", "--scheduler", folder, "--steps", 2, "--inputs", inputs,
                             "--output", os.path.join(folder, "out.safetensors"), check=False)
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn(f"field '{key}' = {json.dumps(value)}", proc.stderr + proc.stdout)


if __name__ == "__main__":
    unittest.main()

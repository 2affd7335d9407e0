"""Referee: Baton's training-timestep sampler against diffusers' FLUX.2 LoRA trainer.

The trainer (examples/dreambooth/train_dreambooth_lora_flux2.py) draws u with
`diffusers.training_utils.compute_density_for_timestep_sampling`, takes indices = (u * 1000).long() into
FlowMatchEulerDiscreteScheduler's training table and uses sigma = scheduler.sigmas[indices]; FLUX.2's scheduler
has use_dynamic_shifting, so the table is unshifted. `baton sample-timesteps` draws from a CPU generator seeded
like a torch.Generator, and Baton links the same libtorch as this venv, so the draws can be held to diffusers'
bit for bit. The shifts are held to `compute_empirical_mu` + the scheduler's own time_shift.
"""

import math
import os
import unittest

import torch
from safetensors.torch import load_file

from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux.pipeline_flux import calculate_shift
from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu
from diffusers.training_utils import compute_density_for_timestep_sampling

from referee import baton, temp_dir

COUNT = 20000
# FLUX.2-dev's scheduler_config.json (also what `baton init-weights --pipeline tiny` writes).
FLUX2_SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
                       max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)


class SampleTimestepsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = temp_dir()
        cls.scheduler = FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def sample(self, timesteps_yaml, seed=0, tokens=4096, count=COUNT):
        name = f"{abs(hash((timesteps_yaml, seed, tokens, count)))}"
        job = os.path.join(self.tmp.name, name + ".yaml")
        with open(job, "w") as f:
            f.write("model: unused\ndataset: unused\n" + (f"timesteps: {timesteps_yaml}\n" if timesteps_yaml else ""))
        out = os.path.join(self.tmp.name, name + ".safetensors")
        baton("sample-timesteps", "--job", job, "--output", out, "--count", count, "--seed", seed,
              "--image-tokens", tokens)
        return load_file(out)

    def diffusers_sigmas(self, scheme, seed, count=COUNT, logit_mean=0.0, logit_std=1.0, mode_scale=1.29):
        g = torch.Generator().manual_seed(seed)
        u = compute_density_for_timestep_sampling(scheme, count, logit_mean=logit_mean, logit_std=logit_std,
                                                  mode_scale=mode_scale, generator=g)
        # As the trainer indexes; u == 1.0 would raise IndexError there (Baton clamps to the last entry).
        indices = (u * self.scheduler.config.num_train_timesteps).long().clamp(max=999)
        return u, self.scheduler.sigmas[indices]

    def test_defaults_draw_exactly_as_the_trainer(self):
        # No timesteps: section = the trainer's argparse defaults (weighting_scheme none, no shift).
        got = self.sample("", seed=3)
        u, sigma = self.diffusers_sigmas("none", 3)
        self.assertTrue(torch.equal(got["u"], u))
        self.assertTrue(torch.equal(got["sigma"], sigma))
        self.assertTrue(torch.equal(got["timestep"], sigma))
        self.assertEqual(got["shift"].item(), 1.0)

    def test_each_scheme_draws_exactly_as_compute_density(self):
        cases = [
            ("{sampling: uniform}", "none", {}),
            ("{sampling: logit_normal}", "logit_normal", {}),
            ("{sampling: logit_normal, logit_mean: 0.7, logit_std: 1.3}", "logit_normal",
             dict(logit_mean=0.7, logit_std=1.3)),
            ("{sampling: logit_normal, logit_mean: -1.0}", "logit_normal", dict(logit_mean=-1.0)),
            ("{sampling: mode}", "mode", {}),
            ("{sampling: mode, mode_scale: -0.5}", "mode", dict(mode_scale=-0.5)),
        ]
        for yaml, scheme, kwargs in cases:
            with self.subTest(yaml=yaml):
                got = self.sample(yaml, seed=11)
                u, sigma = self.diffusers_sigmas(scheme, 11, **kwargs)
                # Same generator stream and same float32 operations: equal, not close.
                self.assertTrue(torch.equal(got["u"], u), f"max |du| {(got['u'] - u).abs().max().item():.3g}")
                self.assertTrue(torch.equal(got["sigma"], sigma))
                self.assertTrue(torch.equal(got["timestep"], sigma))

    def test_distributions_agree_with_independent_draws(self):
        # Different seeds on the two sides: a check of the distribution that does not rest on sharing the RNG.
        # Two-sample Kolmogorov-Smirnov distance of 20000 vs 20000 draws: its 0.1% critical value is
        # 1.95 * sqrt(2 / 20000) = 0.0195 (conservative for these discrete sigmas).
        for yaml, scheme, kwargs in [("{sampling: none}", "none", {}),
                                     ("{sampling: logit_normal, logit_mean: 0.5}", "logit_normal",
                                      dict(logit_mean=0.5)),
                                     ("{sampling: mode, mode_scale: 1.29}", "mode", {})]:
            with self.subTest(yaml=yaml):
                ours = self.sample(yaml, seed=101)["sigma"].double().sort().values
                _, theirs = self.diffusers_sigmas(scheme, 202, **kwargs)
                theirs = theirs.double().sort().values
                grid = torch.linspace(0, 1, 1001, dtype=torch.float64)
                cdf = lambda x: torch.searchsorted(x, grid, right=True).double() / len(x)
                ks = (cdf(ours) - cdf(theirs)).abs().max().item()
                self.assertLess(ks, 0.0195, f"KS distance {ks:.4f}")
                # The sign of logit_mean: positive means less noise in diffusers, so the median sigma is below 1/2.
                if "logit_mean: 0.5" in yaml:
                    self.assertLess(ours.median().item(), 0.45)

    def test_flux2_empirical_shift_is_compute_empirical_mu_and_time_shift(self):
        for tokens in (256, 1024, 4096, 4300, 4301, 6144):
            for steps in (50, 28):
                with self.subTest(tokens=tokens, steps=steps):
                    got = self.sample(f"{{shift: flux2_empirical, shift_steps: {steps}}}", seed=5, tokens=tokens,
                                      count=2000)
                    _, sigma = self.diffusers_sigmas("none", 5, count=2000)
                    mu = compute_empirical_mu(image_seq_len=tokens, num_steps=steps)
                    self.assertAlmostEqual(got["shift"].item(), math.exp(mu), delta=1e-12 * math.exp(mu))
                    expected = self.scheduler.time_shift(mu, 1.0, sigma)
                    # float32 evaluations of s*t/(1+(s-1)t) and e^mu/(e^mu+1/t-1): a few ulps of values <= 1.
                    err = (got["timestep"].double() - expected.double()).abs().max().item()
                    self.assertLessEqual(err, 1e-6)

    def test_flux1_linear_and_fixed_shifts(self):
        for tokens in (256, 1024, 4096):
            with self.subTest(tokens=tokens):
                got = self.sample("{shift: flux1_linear}", seed=6, tokens=tokens, count=2000)
                mu = calculate_shift(tokens)  # FLUX.1 defaults: 256 -> 0.5, 4096 -> 1.15
                self.assertAlmostEqual(got["shift"].item(), math.exp(mu), delta=1e-12)
                _, sigma = self.diffusers_sigmas("none", 6, count=2000)
                err = (got["timestep"].double() - self.scheduler.time_shift(mu, 1.0, sigma).double()).abs().max()
                self.assertLessEqual(err.item(), 1e-6)
        # A fixed shift is the table of a scheduler without dynamic shifting (SD3-style shift=3).
        fixed = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
        got = self.sample("{shift: 3.0}", seed=8, count=2000)
        u, _ = self.diffusers_sigmas("none", 8, count=2000)
        expected = fixed.sigmas[(u * 1000).long().clamp(max=999)]
        self.assertLessEqual((got["timestep"].double() - expected.double()).abs().max().item(), 1e-6)

    def test_old_auto_shift_is_refused_with_its_new_names(self):
        job = os.path.join(self.tmp.name, "auto.yaml")
        with open(job, "w") as f:
            f.write("model: m\ndataset: d\ntimesteps: {shift: auto}\n")
        proc = baton("sample-timesteps", "--job", job, "--output", os.path.join(self.tmp.name, "x.safetensors"),
                     check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("flux1_linear", proc.stderr)


if __name__ == "__main__":
    unittest.main()

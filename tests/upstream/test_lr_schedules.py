"""Referee: a job's learning-rate schedule (`optimizer: {schedule, warmup_steps, cycles, power}`) against diffusers'
`get_scheduler` for the same name and arguments, every step of a run (for cosine with `cycles`, which get_scheduler
does not pass on, its get_cosine_schedule_with_warmup(num_cycles=...)).

diffusers' trainers call `lr_scheduler.step()` after each optimizer step, so optimizer step k (0-based) runs at
base_lr * lr_lambda(k): a warm-up's first step at 0. `baton lr-schedule --job J` prints the rate the trainers (the
coordinator, train-local and the stage-local optimizer it feeds) give each step; they must equal the rates an SGD
optimizer reports under the diffusers scheduler, to 1e-12 relative.
"""

import os
import unittest

import torch
from diffusers.optimization import get_cosine_schedule_with_warmup, get_scheduler

from referee import assert_job_refused, baton, temp_dir

CASES = [
    # (schedule, warmup_steps, steps, extra keys, get_scheduler's extra arguments)
    ("constant", 0, 7, {}, {}),
    ("constant", 5, 12, {}, None),  # Baton's constant with a warm-up is diffusers' constant_with_warmup
    ("constant_with_warmup", 4, 9, {}, {}),
    ("linear", 0, 10, {}, {}),
    ("linear", 3, 17, {}, {}),
    ("cosine", 0, 20, {}, {}),
    ("cosine", 6, 31, {"cycles": 1.5}, {"num_cycles": 1.5}),
    ("cosine_with_restarts", 2, 40, {}, {}),
    ("cosine_with_restarts", 5, 33, {"cycles": 3}, {"num_cycles": 3}),
    ("polynomial", 0, 15, {}, {}),
    ("polynomial", 4, 25, {"power": 2.0}, {"power": 2.0}),
]
LR = 3e-4


def diffusers_rates(name, warmup, steps, kwargs):
    params = [torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.SGD(params, lr=LR)
    if name == "cosine" and "num_cycles" in kwargs:
        scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, steps, **kwargs)
    else:
        scheduler = get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=steps, **kwargs)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


class LearningRateScheduleTest(unittest.TestCase):
    def test_every_step_of_every_schedule(self):
        with temp_dir() as tmp:
            for name, warmup, steps, keys, kwargs in CASES:
                extra = "".join(f", {k}: {v}" for k, v in keys.items())
                job = os.path.join(tmp, "job.yaml")
                with open(job, "w") as f:
                    f.write(f"model: m\ndataset: d\nsteps: {steps}\n"
                            f"optimizer: {{lr: {LR}, schedule: {name}, warmup_steps: {warmup}{extra}}}\n")
                ours = [float(x) for x in baton("lr-schedule", "--job", job).stdout.split()]
                theirs = diffusers_rates(name if kwargs is not None else "constant_with_warmup", warmup, steps,
                                         kwargs or {})
                self.assertEqual(len(ours), steps, name)
                worst = max(abs(a - b) for a, b in zip(ours, theirs)) / LR
                print(f"{name} warmup {warmup} over {steps} steps {keys}: max rel diff {worst:.1e}")
                self.assertLess(worst, 1e-12, f"{name}: {ours} vs {theirs}")

    def test_bad_keys_are_refused_with_file_and_line(self):
        with temp_dir() as tmp:
            for body, want in [("{schedule: exponential}", "'schedule' must be one of constant"),
                               ("{schedule: linear, cycles: 2}", "'cycles' applies to cosine and cosine_with_restarts"),
                               ("{schedule: cosine, power: 2}", "'power' applies to polynomial, not cosine"),
                               ("{schedule: cosine, cycles: 0}", "'cycles' must be in (0, 1000]")]:
                assert_job_refused(self, tmp, f"optimizer: {body}", want)


if __name__ == "__main__":
    unittest.main()

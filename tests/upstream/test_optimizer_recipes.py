"""Referee: the job's optimizer (`optimizer: {type}`, `lora: {plus_ratio}`, `ema:`) against what users run it from.

AdamW is torch.optim.AdamW, Adafactor transformers' Adafactor (its defaults: relative step, parameter scale, no first
moment; and as LoRA recipes set it: a rate and a schedule), Prodigy prodigyopt's (its step size estimated over every
parameter: the sums taken in Baton's order, by name). LoRA+ as musubi-tuner (`loraplus_lr_ratio`) and the LoRA+
paper's code build it: two parameter groups, the up projections (lora_B) at ratio × the rate, one scheduler over
both. The EMA as diffusers' EMAModel (training_utils.py) keeps it: made from the parameters before the first step,
EMAModel.step(parameters) after each optimizer step. Around them what every diffusers trainer does: clip_grad_norm_
over all parameters, the step, then lr_scheduler.step().

8-bit AdamW is bitsandbytes' AdamW8bit as it runs on this CPU (its blockwise kernel: both moments as a byte per
element in its dynamic code with a scale per block of 256, fp32 moments below min_8bit_size elements): without
clipping the parameters, the codes and the scales equal bitsandbytes' bit for bit; its state takes at most 2.1 bytes
per parameter.

`baton optimizer-replay` runs the job's optimizer (the one the coordinator, train-local and the stage-local optimizer
step: core/train/optimizer.h) over the same gradients; after every step of the run the parameters and the EMA must
equal torch's, transformers' and diffusers' within 1e-6 relative (measured: a few ulp; torch clips in fp32, Baton in
double).
"""

import os
import unittest

import bitsandbytes as bnb
import torch
from diffusers.optimization import get_scheduler
from diffusers.training_utils import EMAModel
from safetensors.torch import load_file, save_file
from prodigyopt import Prodigy
from transformers.optimization import Adafactor

from referee import assert_job_refused, baton, max_rel_error, temp_dir

TOLERANCE = 1e-6
MODULES = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.ff.linear_in",
           "single_transformer_blocks.0.attn.to_qkv_mlp_proj"]
SHAPES = {"lora_A": (4, 24), "lora_B": (40, 4)}
DEFAULTS = dict(type="adamw", lr=0.001, betas=(0.9, 0.999), weight_decay=0.0, clip=1.0, schedule="constant",
                warmup=0, adafactor={}, prodigy={})
CASES = [
    # (job keys, steps, LoRA+ ratio, EMAModel arguments or None, the optimizer's settings besides DEFAULTS)
    ("lora: {plus_ratio: 16}\nema: {decay: 0.9}\n"
     "optimizer: {lr: 0.002, weight_decay: 0.01, schedule: cosine, warmup_steps: 2}\n", 12, 16.0, dict(decay=0.9),
     dict(lr=0.002, weight_decay=0.01, schedule="cosine", warmup=2)),
    ("ema: {decay: 0.95, min_decay: 0.5, update_after_step: 3, use_ema_warmup: true, inv_gamma: 2, power: 0.75}\n"
     "optimizer: {lr: 0.001, betas: [0.8, 0.99], schedule: linear}\n", 10, 1.0,
     dict(decay=0.95, min_decay=0.5, update_after_step=3, use_ema_warmup=True, inv_gamma=2.0, power=0.75),
     dict(betas=(0.8, 0.99), schedule="linear")),
    ("lora: {plus_ratio: 4}\noptimizer: {lr: 0.003, clip: 0.5}\n", 6, 4.0, None, dict(lr=0.003, clip=0.5)),
    # Adafactor as transformers builds it by default: relative step, parameter scale, no first moment.
    ("optimizer: {type: adafactor}\nema: {decay: 0.8}\n", 8, 1.0, dict(decay=0.8), dict(type="adafactor")),
    # ... and as LoRA recipes set it (musubi-tuner, ai-toolkit): a rate, a schedule, a first moment, weight decay.
    ("lora: {plus_ratio: 4}\noptimizer: {type: adafactor, lr: 0.001, relative_step: false, scale_parameter: false, "
     "beta1: 0.9, weight_decay: 0.01, eps: [1.0e-30, 1.0e-3], clip_threshold: 1.0, decay_rate: -0.8, "
     "schedule: cosine, warmup_steps: 1}\n", 7, 4.0, None,
     dict(type="adafactor", weight_decay=0.01, schedule="cosine", warmup=1,
          adafactor=dict(relative_step=False, scale_parameter=False, beta1=0.9))),
    # Adafactor's parameter scale with a rate of ours, and LoRA+ (the fresh up projection scales at eps2).
    ("lora: {plus_ratio: 2}\noptimizer: {type: adafactor, lr: 0.01, relative_step: false}\n", 5, 2.0, None,
     dict(type="adafactor", lr=0.01, adafactor=dict(relative_step=False))),
    # Prodigy as recipes set it (lr 1, its default) with an EMA, and with every argument of its own and a warm-up
    # whose first step runs at rate 0 (prodigyopt then steps nothing, not even its count).
    ("optimizer: {type: prodigy, d0: 1.0e-4}\nema: {decay: 0.9}\n", 9, 1.0, dict(decay=0.9),
     dict(type="prodigy", lr=1.0, prodigy=dict(d0=1e-4))),
    ("optimizer: {type: prodigy, lr: 0.5, betas: [0.9, 0.99], beta3: 0.95, eps: 1.0e-7, weight_decay: 0.01, "
     "d0: 1.0e-3, d_coef: 0.8, growth_rate: 1.5, use_bias_correction: true, safeguard_warmup: true, "
     "decouple: false, schedule: cosine, warmup_steps: 2}\n", 10, 1.0, None,
     dict(type="prodigy", lr=0.5, betas=(0.9, 0.99), weight_decay=0.01, schedule="cosine", warmup=2,
          prodigy=dict(beta3=0.95, eps=1e-7, d0=1e-3, d_coef=0.8, growth_rate=1.5, use_bias_correction=True,
                       safeguard_warmup=True, decouple=False))),
]


def make_optimizer(groups, opt):
    if opt["type"] == "prodigy":  # one rate (prodigyopt refuses groups of others): one group, in name order
        return Prodigy([p for g in groups for p in g["params"]], lr=opt["lr"], betas=opt["betas"],
                       weight_decay=opt["weight_decay"], **opt["prodigy"])
    if opt["type"] == "adafactor":
        args = dict(opt["adafactor"])
        if args.get("relative_step", True):  # Adafactor's own rate: no lr, no groups of other rates
            return Adafactor([p for g in groups for p in g["params"]], lr=None, weight_decay=opt["weight_decay"],
                             **args)
        return Adafactor(groups, lr=opt["lr"], weight_decay=opt["weight_decay"], **args)
    return torch.optim.AdamW(groups, lr=opt["lr"], betas=opt["betas"], weight_decay=opt["weight_decay"], eps=1e-8,
                             fused=True)


def make_inputs(steps, seed, shapes=None):
    g = torch.Generator().manual_seed(seed)
    params = {}
    for m in MODULES:
        for kind, shape in (shapes or SHAPES).items():
            params[f"transformer.{m}.{kind}.weight"] = torch.randn(shape, generator=g)
    params[f"transformer.{MODULES[0]}.lora_B.weight"].zero_()  # a fresh LoRA's: Adafactor's scale at its floor
    grads = {}
    for k in range(steps):
        scale = 0.5 if k % 3 == 0 else 0.01  # some steps clip, some do not
        for name, p in params.items():
            grads[f"step{k}/{name}"] = torch.randn(p.shape, generator=g) * scale
    return params, grads


def replay(tmp, keys, steps, params, grads):
    """`baton optimizer-replay` of a job with `keys` over `steps` steps: its params ("param/<name>") and state."""
    save_file(params, os.path.join(tmp, "params.safetensors"))
    save_file(grads, os.path.join(tmp, "grads.safetensors"))
    job = os.path.join(tmp, "job.yaml")
    with open(job, "w") as f:
        f.write(f"model: m\ndataset: d\nsteps: {steps}\n{keys}")
    out = os.path.join(tmp, "out.safetensors")
    baton("optimizer-replay", "--job", job, "--params", os.path.join(tmp, "params.safetensors"), "--grads",
          os.path.join(tmp, "grads.safetensors"), "--output", out)
    return load_file(out)


def reference(params, grads, steps, opt, ratio, ema_args):
    ps = {n: torch.nn.Parameter(params[n].clone()) for n in sorted(params)}  # Baton's order: by name
    up = [p for n, p in ps.items() if n.endswith("lora_B.weight")]
    down = [p for n, p in ps.items() if not n.endswith("lora_B.weight")]
    optimizer = make_optimizer([{"params": down, "lr": opt["lr"]}, {"params": up, "lr": opt["lr"] * ratio}], opt)
    relative = opt["type"] == "adafactor" and opt["adafactor"].get("relative_step", True)
    scheduler = None if relative else get_scheduler(opt["schedule"], optimizer, num_warmup_steps=opt["warmup"],
                                                    num_training_steps=steps)
    ema = EMAModel(list(ps.values()), **ema_args) if ema_args else None
    for k in range(steps):
        for n, p in ps.items():
            p.grad = grads[f"step{k}/{n}"].clone()
        if opt["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(ps.values()), opt["clip"])
        optimizer.step()
        if scheduler:
            scheduler.step()
        if ema:
            ema.step(list(ps.values()))
    shadow = dict(zip(ps.keys(), ema.shadow_params)) if ema else {}
    return {n: p.detach() for n, p in ps.items()}, shadow


class OptimizerRecipesTest(unittest.TestCase):
    def test_each_optimizer_with_lora_plus_and_ema_steps_as_its_reference(self):
        with temp_dir() as tmp:
            for i, (keys, steps, ratio, ema_args, settings) in enumerate(CASES):
                params, grads = make_inputs(steps, seed=10 + i)
                got = replay(tmp, keys, steps, params, grads)
                opt = {**DEFAULTS, **settings}
                want, shadow = reference(params, grads, steps, opt, ratio, ema_args)
                worst = max(max_rel_error(got[f"param/{n}"], w) for n, w in want.items())
                moved = max(max_rel_error(got[f"param/{n}"], params[n]) for n in want if params[n].abs().max() > 0)
                worst_ema = max((max_rel_error(got[f"state/{n}.ema"], s) for n, s in shadow.items()), default=0.0)
                # The updates themselves (not the parameters they moved), relative to the largest.
                step_err = max(max_rel_error(got[f"param/{n}"] - params[n], w - params[n]) for n, w in want.items())
                print(f"case {i} ({opt['type']}, {steps} steps, LoRA+ {ratio}, EMA {ema_args}): params rel err "
                      f"{worst:.1e} (moved {moved:.1e}; the updates {step_err:.1e}), EMA rel err {worst_ema:.1e}")
                self.assertGreater(moved, 1e-4, "the parameters must move for the comparison to mean anything")
                self.assertLess(worst, TOLERANCE, f"case {i}")
                self.assertLess(step_err, 1e-4, f"case {i}")
                self.assertLess(worst_ema, TOLERANCE, f"case {i}")
                self.assertEqual(any(k.endswith(".ema") for k in got), ema_args is not None, f"case {i}")
                if ratio != 1.0:  # the up projections moved other than a plain LoRA's would (LoRA+ took effect)
                    plain, _ = reference(params, grads, steps, opt, 1.0, None)
                    b = next(n for n in want if n.endswith("lora_B.weight") and params[n].abs().max() > 0)
                    self.assertGreater(max_rel_error(got[f"param/{b}"], plain[b]), 100 * TOLERANCE, f"case {i}")

    def test_bad_keys_are_refused_with_file_and_line(self):
        with temp_dir() as tmp:
            for body, want in [
                ("ema: {decay: 1.5}", "'decay' must be in (0, 1)"),
                ("ema: {min_decay: 0.2}", "'decay' is required"),
                ("ema: {decay: 0.9, power: 2}", "'power' applies with use_ema_warmup: true"),
                ("ema: {decay: 0.9, min_decay: 0.95}", "'min_decay' must be in [0, decay]"),
                ("ema: {decay: 0.9, warmup: 3}", "unknown key 'warmup' in ema"),
                ("ema: {decay: 0.9, evals: average}", "'evals' is 'average': one of trained, ema, both"),
                ("lora: {rank: 4, plus_ratio: 0.5}", "'plus_ratio' must be in [1, 1000]"),
                ("lora: {rank: 4, type: lokr, plus_ratio: 16}", "'plus_ratio' does not apply to type: lokr"),
                ("lora: {rank: 4, type: locon}", "'type' is 'locon' (want lora, dora, loha or lokr)"),
                ("optimizer: {type: lion}", "'type' must be one of adamw, adamw8bit, adafactor, prodigy"),
                ("optimizer: {min_8bit_size: 64}", "'min_8bit_size' applies to adamw8bit, not adamw"),
                ("optimizer: {type: adamw8bit, min_8bit_size: -1}", "'min_8bit_size' must be ≥ 0"),
                ("lora: {rank: 4, plus_ratio: 2}\noptimizer: {type: prodigy}", "'plus_ratio' does not apply to prodigy"),
                ("optimizer: {decay_rate: -0.5}", "'decay_rate' applies to adafactor, not adamw"),
                ("optimizer: {type: adafactor, lr: 0.001}", "'lr' does not apply with relative_step: true"),
                ("optimizer: {type: adafactor, eps: 1.0e-8}", "'eps' has the wrong type"),
                ("optimizer: {type: adafactor, relative_step: false, warmup_init: true}",
                 "'warmup_init' needs relative_step: true"),
                ("optimizer: {type: prodigy, d0: 0}", "'d0' must be positive"),
                ("optimizer: {type: prodigy, relative_step: false}", "'relative_step' applies to adafactor, not prodigy"),
                ("optimizer: {beta3: 0.9}", "'beta3' applies to prodigy, not adamw"),
                ("optimizer: {type: adafactor, betas: [0.9, 0.99]}", "'betas' applies to adamw and adamw8bit and "
                 "prodigy, not adafactor"),
            ]:
                assert_job_refused(self, tmp, body, want)


class AdamW8bitTest(unittest.TestCase):
    # Matrices of several blocks with a part-block at the end, and one under min_8bit_size (fp32 moments).
    SHAPES = {"lora_A": (16, 600), "lora_B": (70, 16)}

    def run_case(self, tmp, keys, steps, seed, lr, ratio, clip, weight_decay):
        params, grads = make_inputs(steps, seed, self.SHAPES)
        got = replay(tmp, keys, steps, params, grads)
        ps = {n: torch.nn.Parameter(params[n].clone()) for n in sorted(params)}
        up = [p for n, p in ps.items() if n.endswith("lora_B.weight")]
        down = [p for n, p in ps.items() if not n.endswith("lora_B.weight")]
        optimizer = bnb.optim.AdamW8bit([{"params": down, "lr": lr}, {"params": up, "lr": lr * ratio}], lr=lr,
                                        betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay, min_8bit_size=4096)
        for k in range(steps):
            for n, p in ps.items():
                p.grad = grads[f"step{k}/{n}"].clone()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(list(ps.values()), clip)
            optimizer.step()
        return got, ps, optimizer

    def test_adamw8bit_steps_quantizes_and_keeps_as_bitsandbytes(self):
        with temp_dir() as tmp:
            got, ps, optimizer = self.run_case(tmp, "optimizer: {type: adamw8bit, lr: 0.001, weight_decay: 0.01, "
                                               "clip: 0}\n", 6, seed=40, lr=0.001, ratio=1.0, clip=0, weight_decay=0.01)
            state_bytes = quantized = 0
            for n, p in ps.items():
                self.assertTrue(torch.equal(got[f"param/{n}"], p.detach()), n)
                st = optimizer.state[p]
                if st["state1"].dtype == torch.uint8:
                    quantized += p.numel()
                    pairs = [("exp_avg_q8", "state1"), ("exp_avg_absmax", "absmax1"), ("exp_avg_sq_q8", "state2"),
                             ("exp_avg_sq_absmax", "absmax2")]
                    for ours, theirs in pairs:
                        self.assertTrue(torch.equal(got[f"state/{n}.{ours}"], st[theirs]), f"{n}.{ours}")
                        state_bytes += got[f"state/{n}.{ours}"].numel() * got[f"state/{n}.{ours}"].element_size()
                else:
                    self.assertTrue(torch.equal(got[f"state/{n}.exp_avg"], st["state1"]), n)
                    self.assertTrue(torch.equal(got[f"state/{n}.exp_avg_sq"], st["state2"]), n)
            self.assertGreater(quantized, 0)
            print(f"adamw8bit: {len(ps)} tensors bitwise bitsandbytes' after 6 steps; its 8-bit state "
                  f"{state_bytes / quantized:.4f} bytes per parameter")
            self.assertLessEqual(state_bytes / quantized, 2.1)

    def test_adamw8bit_with_lora_plus_and_clipping_is_bitsandbytes_within_its_code(self):
        # Clipped in double by Baton and in fp32 by torch: a gradient an ulp apart can take the next code, so the
        # comparison is of the parameters, within a small share of their updates.
        with temp_dir() as tmp:
            got, ps, _ = self.run_case(tmp, "lora: {plus_ratio: 4}\noptimizer: {type: adamw8bit, lr: 0.002, "
                                       "clip: 0.5}\n", 5, seed=41, lr=0.002, ratio=4.0, clip=0.5, weight_decay=0.0)
            params, _ = make_inputs(5, 41, self.SHAPES)
            for n, p in ps.items():
                err = max_rel_error(got[f"param/{n}"] - params[n], p.detach() - params[n])
                self.assertLess(err, 1e-3, n)


if __name__ == "__main__":
    unittest.main()

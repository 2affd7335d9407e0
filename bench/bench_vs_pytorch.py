"""Baton's LoRA training step against PyTorch (diffusers' Flux2Transformer2DModel + peft) on the same torch.

One command runs both sides on the same problem and prints both times and their ratio; the LAST line is a JSON
object. Baton links the libtorch inside the venv's torch wheel, so both sides run the same kernels: what differs
is the model code around them (C++ modules and autograd from C++ vs Python modules, peft wrappers and
torch.optim).

    .venv/bin/python bench/bench_vs_pytorch.py --bin build/bin/bench_vs_pytorch

What it does, per thread count (default 1 and 2):
  1. writes a tiny FLUX.2 transformer with random weights (diffusers save_pretrained), random initial LoRA
     adapters (PEFT names; A and B both non-zero, so the adapters change the loss from the first step) and
     random inputs to a temp dir;
  2. starts build/bin/bench_vs_pytorch on them (it prints JSON lines) and builds the PyTorch side from the same
     files;
  3. checks both compute the same thing: the first two steps' losses (step 2 follows one AdamW update) and the
     first step's gradient norm must agree within --check_tol relative;
  4. times warm-up steps, then --rounds rounds of --steps steps per side, alternating which side goes first,
     and reports the median seconds per step of each side.

The step on both sides: frozen fp32 weights, one micro-batch of 1, forward of the whole transformer (the
timestep/guidance embedding and modulations without a graph in Baton, with frozen weights in diffusers),
flow-matching loss mean((pred - target)^2) in fp32, backward, global grad-norm clip, AdamW on the LoRA
parameters. Data loading and noising are not timed on either side (fixed inputs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import save_file

# Baton's "attention" preset (core/lora/lora.cc ResolveLoraTargets) and its rule: inside a block, a Linear
# whose name ends with ".<target>". Note "attn.to_out" is the single blocks' Linear; double blocks have to_out.0.
ATTENTION_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                     "to_qkv_mlp_proj", "attn.to_out"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "bench_vs_pytorch"))
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head_dim", type=int, default=64)
    p.add_argument("--double", type=int, default=2)
    p.add_argument("--single", type=int, default=4)
    p.add_argument("--in_channels", type=int, default=128)
    p.add_argument("--joint", type=int, default=256)
    p.add_argument("--grid", type=int, default=16, help="image tokens = grid x grid")
    p.add_argument("--text", type=int, default=64, help="text tokens")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per side before the rounds")
    p.add_argument("--steps", type=int, default=8, help="timed steps per side per round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--check_tol", type=float, default=1e-4)
    p.add_argument("--profile", action="store_true", help="also print torch.profiler's op table for the PyTorch step")
    p.add_argument("--baton_args", default="",
                   help="extra flags for the Baton binary, e.g. '--cpu_linear aten' (eager PyTorch's GEMM backend)")
    return p.parse_args()


def lora_target_names(model):
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if not name.startswith(("transformer_blocks.", "single_transformer_blocks.")):
            continue
        if any(name.endswith("." + t) for t in ATTENTION_TARGETS):
            names.append(name)
    return names


def write_problem(args, out_dir):
    """Writes transformer/, lora_init.safetensors and inputs.safetensors; returns the LoRA module names."""
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    axes = args.head_dim // 4
    model = Flux2Transformer2DModel(
        patch_size=1, in_channels=args.in_channels, num_layers=args.double, num_single_layers=args.single,
        attention_head_dim=args.head_dim, num_attention_heads=args.heads, joint_attention_dim=args.joint,
        timestep_guidance_channels=256, mlp_ratio=3.0, axes_dims_rope=(axes, axes, axes, args.head_dim - 3 * axes),
        rope_theta=2000, guidance_embeds=True)
    model.save_pretrained(os.path.join(out_dir, "transformer"), safe_serialization=True)

    targets = lora_target_names(model)
    lora = {}
    modules = dict(model.named_modules())
    for name in targets:
        lin = modules[name]
        # Kaiming-uniform-like A (as PEFT initialises it) and a small non-zero B, so that step 1 already
        # exercises the adapter path in forward and backward.
        bound = 1.0 / lin.in_features ** 0.5
        lora[f"{name}.lora_A.weight"] = (torch.rand(args.rank, lin.in_features) * 2 - 1) * bound
        lora[f"{name}.lora_B.weight"] = torch.randn(lin.out_features, args.rank) * 0.02
    save_file(lora, os.path.join(out_dir, "lora_init.safetensors"))

    si, st = args.grid * args.grid, args.text
    rows = torch.arange(args.grid).repeat_interleave(args.grid)
    cols = torch.arange(args.grid).repeat(args.grid)
    zeros = torch.zeros(si, dtype=torch.long)
    inputs = {
        "hidden_states": torch.randn(1, si, args.in_channels),
        "encoder_hidden_states": torch.randn(1, st, args.joint),
        "timestep": torch.tensor([0.6]),
        "guidance": torch.tensor([3.5]),
        "img_ids": torch.stack([zeros, rows, cols, zeros], 1),
        "txt_ids": torch.stack([torch.zeros(st, dtype=torch.long)] * 3 + [torch.arange(st)], 1),
        "target": torch.randn(1, si, args.in_channels),
    }
    save_file(inputs, os.path.join(out_dir, "inputs.safetensors"))
    return targets


class PyTorchSide:
    """diffusers Flux2Transformer2DModel + peft LoRA + torch.optim.AdamW, built from the written files."""

    def __init__(self, args, out_dir, targets):
        from diffusers import Flux2Transformer2DModel
        from peft import LoraConfig, get_peft_model_state_dict, set_peft_model_state_dict
        from safetensors.torch import load_file

        self.model = Flux2Transformer2DModel.from_pretrained(os.path.join(out_dir, "transformer"),
                                                             torch_dtype=torch.float32)
        self.model.requires_grad_(False)
        self.model.add_adapter(LoraConfig(r=args.rank, lora_alpha=args.rank, lora_dropout=0.0,
                                          target_modules=targets, init_lora_weights=True))
        init = load_file(os.path.join(out_dir, "lora_init.safetensors"))
        result = set_peft_model_state_dict(self.model, init)
        if result.unexpected_keys:
            raise SystemExit(f"PyTorch side: unexpected LoRA keys {result.unexpected_keys[:4]}")
        loaded = get_peft_model_state_dict(self.model)
        if set(loaded) != set(init):
            raise SystemExit(f"PyTorch side: LoRA keys differ from the file: {sorted(set(loaded) ^ set(init))[:4]}")
        for key, value in init.items():
            if not torch.equal(loaded[key], value):
                raise SystemExit(f"PyTorch side: {key} was not loaded")
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        self.inputs = load_file(os.path.join(out_dir, "inputs.safetensors"))

    def step(self):
        t0 = time.perf_counter()
        x = self.inputs
        pred = self.model(hidden_states=x["hidden_states"], encoder_hidden_states=x["encoder_hidden_states"],
                          timestep=x["timestep"], img_ids=x["img_ids"], txt_ids=x["txt_ids"],
                          guidance=x["guidance"], return_dict=False)[0]
        loss = (pred.float() - x["target"].float()).pow(2).mean()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        return seconds, loss.item(), grad_norm.item()

    def steps(self, n):
        out = {"seconds": [], "loss": [], "grad_norm": []}
        for _ in range(n):
            s, l, g = self.step()
            out["seconds"].append(s)
            out["loss"].append(l)
            out["grad_norm"].append(g)
        return out


class BatonSide:
    """build/bin/bench_vs_pytorch, driven over stdin/stdout (one JSON line per command)."""

    def __init__(self, args, out_dir, threads):
        cmd = [args.bin, "--model", os.path.join(out_dir, "transformer"),
               "--inputs", os.path.join(out_dir, "inputs.safetensors"),
               "--lora", os.path.join(out_dir, "lora_init.safetensors"),
               "--threads", str(threads), "--rank", str(args.rank), "--alpha", str(args.rank),
               "--targets", "attention", "--lr", repr(args.lr), "--clip", "1.0"] + args.baton_args.split()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench_vs_pytorch exited {self.proc.wait()} (its stderr is above)")
        return json.loads(line)

    def steps(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.close()
        if self.proc.wait(timeout=60) != 0:
            raise SystemExit(f"bench_vs_pytorch exited {self.proc.returncode}")


def cpu_seconds_busy():
    """Seconds of CPU time the whole machine has spent busy (all cores; /proc/stat, excluding idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def proc_stat_fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on


def process_cpu_seconds(pid):
    fields = proc_stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def minor_faults(pid):
    """Minor page faults of a process so far (/proc/PID/stat minflt): memory freshly mapped and touched."""
    return int(proc_stat_fields(pid)[7])


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def settle():
    # Idle OpenMP workers of the side that just ran spin for a moment before sleeping; let them.
    time.sleep(0.3)


def bench_threads(args, out_dir, targets, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    pt = PyTorchSide(args, out_dir, targets)
    bt = BatonSide(args, out_dir, threads)
    n_lora = len(pt.params)
    if bt.ready["lora_tensors"] != n_lora:
        raise SystemExit(f"LoRA tensors: Baton {bt.ready['lora_tensors']}, PyTorch {n_lora}")

    b = bt.steps(2)
    settle()
    p = pt.steps(2)
    check = {
        "loss_step1": {"baton": b["loss"][0], "pytorch": p["loss"][0], "rel": rel(b["loss"][0], p["loss"][0])},
        "loss_step2": {"baton": b["loss"][1], "pytorch": p["loss"][1], "rel": rel(b["loss"][1], p["loss"][1])},
        "grad_norm_step1": {"baton": b["grad_norm"][0], "pytorch": p["grad_norm"][0],
                            "rel": rel(b["grad_norm"][0], p["grad_norm"][0])},
    }
    # The loss change over one AdamW update (~4e-4 of the loss here) isolates the gradients and the optimizer;
    # fp32 rounding of two ~1.35 losses alone is ~1e-7 absolute, so 1e-2 relative leaves room for reassociation.
    db, dp = b["loss"][1] - b["loss"][0], p["loss"][1] - p["loss"][0]
    update_rel = rel(db, dp)
    worst = max(c["rel"] for c in check.values())
    print(f"threads={threads}: same math? loss step 1 Baton {b['loss'][0]:.8f} PyTorch {p['loss'][0]:.8f} "
          f"(rel {check['loss_step1']['rel']:.1e}); step 2 (after one AdamW update) {b['loss'][1]:.8f} vs "
          f"{p['loss'][1]:.8f} (rel {check['loss_step2']['rel']:.1e}); grad norm step 1 {b['grad_norm'][0]:.6f} vs "
          f"{p['grad_norm'][0]:.6f} (rel {check['grad_norm_step1']['rel']:.1e}); loss change over the update {db:.4e} vs "
          f"{dp:.4e} (rel {update_rel:.1e}); {n_lora} LoRA tensors each side", flush=True)
    if worst > args.check_tol or update_rel > 1e-2:
        raise SystemExit(f"the two sides disagree (worst relative difference {worst:.2e} > {args.check_tol}, or "
                         f"loss change {update_rel:.2e} > 1e-2): timing them would compare different math")

    bt.steps(args.warmup)
    settle()
    pt.steps(args.warmup)
    times = {"baton": [], "pytorch": []}
    # Other processes' CPU use during the timed rounds: the machine's busy time minus both sides'.
    wall0, busy0 = time.perf_counter(), cpu_seconds_busy()
    own0 = process_cpu_seconds(os.getpid()) + process_cpu_seconds(bt.proc.pid)
    round_ratios = []
    faults = {"baton": 0, "pytorch": 0}
    cpu = {"baton": 0.0, "pytorch": 0.0}  # CPU seconds each side's process used in its timed steps
    for r in range(args.rounds):
        order = ["baton", "pytorch"] if r % 2 == 0 else ["pytorch", "baton"]
        med = {}
        for side in order:
            settle()
            pid = bt.proc.pid if side == "baton" else os.getpid()
            f0, c0 = minor_faults(pid), process_cpu_seconds(pid)
            out = bt.steps(args.steps) if side == "baton" else pt.steps(args.steps)
            faults[side] += minor_faults(pid) - f0
            cpu[side] += process_cpu_seconds(pid) - c0
            times[side] += out["seconds"]
            med[side] = statistics.median(out["seconds"])
        round_ratios.append(med["pytorch"] / med["baton"])
        print(f"threads={threads} round {r + 1}/{args.rounds} ({order[0]} first): Baton {med['baton']:.4f} s/step, "
              f"PyTorch {med['pytorch']:.4f} s/step, PyTorch/Baton {round_ratios[-1]:.3f}", flush=True)
    own = process_cpu_seconds(os.getpid()) + process_cpu_seconds(bt.proc.pid) - own0
    others = max(0.0, cpu_seconds_busy() - busy0 - own) / (time.perf_counter() - wall0)
    bt.close()
    if args.profile:
        profile_pytorch(pt)
    baton_s = statistics.median(times["baton"])
    pytorch_s = statistics.median(times["pytorch"])
    return {"threads": threads, "baton_s_per_step": round(baton_s, 5), "pytorch_s_per_step": round(pytorch_s, 5),
            "speedup": round(pytorch_s / baton_s, 4),
            "speedup_round_median": round(statistics.median(round_ratios), 4),
            "speedup_round_range": [round(min(round_ratios), 4), round(max(round_ratios), 4)],
            # CPU time per step is less disturbed by other processes than wall time (1 thread: the same
            # thing on a quiet machine); a secondary figure for busy machines, not the headline.
            "cpu_speedup": round(cpu["pytorch"] / max(cpu["baton"], 1e-9), 4),
            "baton_faults_per_step": round(faults["baton"] / len(times["baton"])),
            "pytorch_faults_per_step": round(faults["pytorch"] / len(times["pytorch"])),
            "others_cpu_cores": round(others, 3), "check_max_rel": float(f"{worst:.3e}"), "check_update_rel": float(f"{update_rel:.3e}")}


def profile_pytorch(pt):
    from torch.profiler import ProfilerActivity, profile
    pt.steps(1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pt.steps(3)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)


def main():
    args = parse_args()
    if not os.path.exists(args.bin):
        raise SystemExit(f"{args.bin} not found: build it with `cmake --build build --target bench_vs_pytorch`")
    thread_counts = [int(t) for t in args.threads.split(",")]
    d = args.heads * args.head_dim
    print(f"FLUX.2-shaped model: D={d} ({args.heads} heads x {args.head_dim}), {args.double} double + {args.single} "
          f"single blocks, in_channels {args.in_channels}, joint_attention_dim {args.joint}; "
          f"{args.grid * args.grid} image + {args.text} text tokens; LoRA rank {args.rank} on the attention preset; "
          f"fp32, batch 1; AdamW lr {args.lr}, clip 1.0; torch {torch.__version__}", flush=True)
    print(f"{args.warmup} warm-up + {args.rounds} rounds x {args.steps} timed steps per side, sides alternating; "
          "s/step = median over all timed steps; speedup = PyTorch s/step / Baton s/step (> 1: Baton is faster)",
          flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="baton-bench-vs-pytorch-") as out_dir:
        targets = write_problem(args, out_dir)
        for threads in thread_counts:
            res = bench_threads(args, out_dir, targets, threads)
            print(f"threads={threads}: Baton {res['baton_s_per_step']:.4f} s/step, PyTorch "
                  f"{res['pytorch_s_per_step']:.4f} s/step, speedup {res['speedup']:.3f}x "
                  f"(rounds {res['speedup_round_range'][0]:.3f}..{res['speedup_round_range'][1]:.3f}); other processes used "
                  f"{res['others_cpu_cores']:.2f} cores meanwhile; CPU-time ratio {res['cpu_speedup']:.3f}x; minor page faults per step Baton "
                  f"{res['baton_faults_per_step']}, PyTorch {res['pytorch_faults_per_step']}", flush=True)
            if res["others_cpu_cores"] > 0.05:
                print(f"WARNING: other processes were using the CPU during the {threads}-thread rounds: "
                      "these times are not a clean measurement", flush=True)
            results.append(res)
    print(json.dumps({"bench": "vs_pytorch", "torch": torch.__version__, "results": results,
                      "config": {"dim": d, "heads": args.heads, "double_blocks": args.double,
                                 "single_blocks": args.single, "in_channels": args.in_channels,
                                 "joint_attention_dim": args.joint, "image_tokens": args.grid * args.grid,
                                 "text_tokens": args.text, "lora_rank": args.rank, "lora_targets": "attention",
                                 "dtype": "fp32", "batch": 1, "warmup": args.warmup, "rounds": args.rounds,
                                 "steps_per_round": args.steps, "baton_args": args.baton_args}}))


if __name__ == "__main__":
    sys.exit(main())

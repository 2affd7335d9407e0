"""Parts 3 and 4 of scripts/gpu_check.sh: Baton's LoRA training step at real sizes on one device, its peak device
memory next to `baton plan`, a full-width slice of FLUX.2-dev extrapolated to the whole model, and the same step
in PyTorch (diffusers Flux2Transformer2DModel + peft), eager and torch.compile, on the same device.

    python3 bench/bench_gpu.py --bin_dir BUILD/bin --device cuda --out parts.json [--small] [--dtype bf16]

Measurements (random weights written here; inputs fixed; LoRA rank 16 on the attention preset; batch 1):
  klein      a FLUX.2 klein-4B-shaped model (configs/models/flux2-klein-4b.json, guidance embedder added so both sides
             take the same inputs) at 1024x1024: 4096 image + 512 text tokens.
             baton_1p: one stage in one process (bench_vs_pytorch --device, RunLocalStep: what train-local runs);
             coordinator_1s / coordinator_2s: `coordinator --stages 1|2` with every stage on the same device
             (job key devices), step seconds from train_log.jsonl, each stage process's peak device memory sampled
             with nvidia-smi; plan_1s / plan_2s: `baton plan` for the same config.
             pytorch_eager / pytorch_compile: diffusers + peft, bf16 base, fp32 LoRA (peft's default), fused AdamW.
  dev_slice  FLUX.2-dev at real width (D = 6144, joint 15360): 1 double + 2 single and 2 double + 4 single blocks,
             baton_1p each; their difference is the cost of 1 double + 2 single blocks, scaled by block parameters
             to the whole 8 + 48 blocks; bytes likewise. plan_dev_int8: `baton plan` of the whole model on two 24 GB
             cards with int8 weights.
--small runs the same code at tiny sizes (the CPU rehearsal). Every sub-part has its own timeout; the JSON is
rewritten after each, so a part that fails or times out leaves the others' figures and its own error.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_pytorch import lora_target_names  # noqa: E402  (same LoRA targets as the CPU benchmark)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = {"parts": {}, "errors": {}}


def save(path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULTS, f, indent=1)
    os.replace(tmp, path)


def part(name, out_path, fn, *a):
    t0 = time.time()
    print(f"[bench_gpu] {name} ...", flush=True)
    try:
        RESULTS["parts"][name] = fn(*a)
        RESULTS["parts"][name]["wall_s"] = round(time.time() - t0, 1)
        print(f"[bench_gpu] {name}: {json.dumps(RESULTS['parts'][name])[:400]}", flush=True)
    except Exception as e:  # one failing part leaves the others
        RESULTS["errors"][name] = f"{type(e).__name__}: {e}"[-2000:]
        traceback.print_exc()
        print(f"[bench_gpu] {name} FAILED after {time.time() - t0:.0f} s: {RESULTS['errors'][name][-300:]}", flush=True)
    save(out_path)


def shape(args, kind):
    if kind == "klein":
        c = json.load(open(os.path.join(REPO, "configs/models/flux2-klein-4b.json")))
        s = dict(heads=c["num_attention_heads"], head_dim=c["attention_head_dim"], double=c["num_layers"],
                 single=c["num_single_layers"], joint=c["joint_attention_dim"], grid=64, text=512)
        if args.small:
            s.update(heads=2, head_dim=32, double=1, single=2, joint=64, grid=8, text=8)
    else:  # dev slice
        c = json.load(open(os.path.join(REPO, "configs/models/flux2-dev.json")))
        s = dict(heads=c["num_attention_heads"], head_dim=c["attention_head_dim"], double=2, single=4,
                 joint=c["joint_attention_dim"], grid=64, text=512, full_double=c["num_layers"],
                 full_single=c["num_single_layers"])
        if args.small:
            s.update(heads=3, head_dim=32, joint=96, grid=8, text=8)
    return s


def build_model(s, device):
    from diffusers import Flux2Transformer2DModel
    axes = s["head_dim"] // 4
    torch.manual_seed(0)
    with torch.device(device):
        model = Flux2Transformer2DModel(
            patch_size=1, in_channels=128, num_layers=s["double"], num_single_layers=s["single"],
            attention_head_dim=s["head_dim"], num_attention_heads=s["heads"], joint_attention_dim=s["joint"],
            timestep_guidance_channels=256, mlp_ratio=3.0,
            axes_dims_rope=(axes, axes, axes, s["head_dim"] - 3 * axes), rope_theta=2000, guidance_embeds=True)
    return model


def write_problem(s, args, work, rank=16):
    """transformer/ (dtype), lora_init.safetensors and inputs.safetensors, like bench_vs_pytorch.py."""
    from safetensors.torch import save_file
    model = build_model(s, args.device).to(args.torch_dtype)
    model.save_pretrained(os.path.join(work, "transformer"), safe_serialization=True)
    targets = lora_target_names(model)
    modules = dict(model.named_modules())
    g = torch.Generator().manual_seed(1)
    lora = {}
    for name in targets:
        lin = modules[name]
        bound = 1.0 / lin.in_features ** 0.5
        lora[f"{name}.lora_A.weight"] = (torch.rand(rank, lin.in_features, generator=g) * 2 - 1) * bound
        lora[f"{name}.lora_B.weight"] = torch.randn(lin.out_features, rank, generator=g) * 0.02
    save_file(lora, os.path.join(work, "lora_init.safetensors"))
    si, st = s["grid"] * s["grid"], s["text"]
    rows = torch.arange(s["grid"]).repeat_interleave(s["grid"])
    cols = torch.arange(s["grid"]).repeat(s["grid"])
    zeros = torch.zeros(si, dtype=torch.long)
    inputs = {
        "hidden_states": torch.randn(1, si, 128, generator=g),
        "encoder_hidden_states": torch.randn(1, st, s["joint"], generator=g),
        "timestep": torch.tensor([0.6]), "guidance": torch.tensor([3.5]),
        "img_ids": torch.stack([zeros, rows, cols, zeros], 1),
        "txt_ids": torch.stack([torch.zeros(st, dtype=torch.long)] * 3 + [torch.arange(st)], 1),
        "target": torch.randn(1, si, 128, generator=g),
    }
    save_file(inputs, os.path.join(work, "inputs.safetensors"))
    block_params = sum(p.numel() for n, p in model.named_parameters()
                       if n.startswith(("transformer_blocks.", "single_transformer_blocks.")))
    params = sum(p.numel() for p in model.parameters())
    del model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return targets, {"params": params, "block_params": block_params}


def run_baton_1p(args, work, timeout):
    """bench_vs_pytorch on the device: 2 checked steps, warm-up, timed steps; peak device memory."""
    cmd = [os.path.join(args.bin_dir, "bench_vs_pytorch"), "--model", os.path.join(work, "transformer"),
           "--inputs", os.path.join(work, "inputs.safetensors"), "--lora", os.path.join(work, "lora_init.safetensors"),
           "--threads", str(args.threads), "--rank", "16", "--alpha", "16", "--targets", "attention",
           "--lr", "1e-3", "--clip", "1.0", "--device", args.device_name, "--dtype", args.dtype]
    if args.trace_dir:
        cmd += ["--trace_out", os.path.join(args.trace_dir, f"baton_1p_{os.path.basename(work)}_trace.json")]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        def ask(n):
            if n is not None:
                proc.stdin.write(f"{n}\n")
                proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"bench_vs_pytorch exited {proc.wait()} (stderr above)")
            return json.loads(line)
        ready = ask(None)
        first = ask(2)
        ask(args.warmup)
        timed = ask(args.steps)
        proc.stdin.close()
        proc.wait(timeout=120 if args.trace_dir else 60)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    return {"s_per_step": round(statistics.median(timed["seconds"]), 5), "losses": first["loss"],
            "grad_norm_step1": first["grad_norm"][0],
            "peak_device_allocated_bytes": timed.get("device_peak_allocated_bytes", 0),
            "peak_device_reserved_bytes": timed.get("device_peak_reserved_bytes", 0),
            "lora_tensors": ready.get("lora_tensors")}


class GpuMemorySampler:
    """Each process's largest device memory (MiB, nvidia-smi --query-compute-apps) while it runs; CUDA only."""

    def __init__(self, enabled):
        self.peak, self.enabled, self.stop = {}, enabled and shutil.which("nvidia-smi") is not None, False
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop:
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                for line in out.splitlines():
                    pid, mib = [x.strip() for x in line.split(",")[:2]]
                    self.peak[int(pid)] = max(self.peak.get(int(pid), 0), int(mib))
            except Exception:
                pass
            time.sleep(0.25)

    def __enter__(self):
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        if self.enabled:
            self.thread.join(timeout=15)


def run_coordinator(args, work, stages, timeout, deterministic=True):
    s_cache = os.path.join(work, "cache")
    if not os.path.exists(s_cache):
        grid = args.shape["grid"]
        subprocess.run([os.path.join(args.bin_dir, "baton"), "synthetic-cache", "--config",
                        os.path.join(work, "transformer", "config.json"), "--out", s_cache, "--samples", "2",
                        "--grids", f"{grid}x{grid}", "--text-len", str(args.shape["text"]), "--seed", "1"],
                       check=True, timeout=timeout)
    steps = 2 + args.warmup + args.steps
    dev = args.device_name
    job = os.path.join(work, f"job{stages}.yaml")
    with open(job, "w") as f:
        f.write(f"model: {work}/transformer\ndataset: {s_cache}\nlora: {{rank: 16, alpha: 16, targets: attention}}\n"
                f"optimizer: {{lr: 1.0e-3, clip: 1.0}}\nsteps: {steps}\nbatch_size: 1\nmicro_batches: 1\n"
                f"schedule: 1f1b\nrecompute: false\nseed: 1\ncheckpoint_every: {steps + 1}\ndtype: {args.dtype}\n"
                f"threads: {args.threads}\ndevices: [{', '.join([dev] * stages)}]\n"
                f"deterministic: {str(deterministic).lower()}\n")
    out = os.path.join(work, f"pp{stages}")
    with GpuMemorySampler(args.device.startswith("cuda")) as mem:
        r = subprocess.run([os.path.join(args.bin_dir, "coordinator"), "--stages", str(stages), "--job", job,
                            "--output", out], capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(r.stdout[-3000:])
    sys.stderr.write(r.stderr[-3000:])
    log_path = os.path.join(out, "train_log.jsonl")
    log = [json.loads(line) for line in open(log_path) if line.strip()] if os.path.exists(log_path) else []
    if args.trace_dir and os.path.exists(log_path):
        shutil.copy(log_path, os.path.join(args.trace_dir, f"train_log_{stages}s{'' if deterministic else '_nondet'}.jsonl"))
    log = [x for x in log if "event" not in x and "step_seconds" in x]
    # A crash after the last step (at exit) still leaves the measurements: keep them and say so.
    if r.returncode != 0 and not (r.returncode < 0 and len(log) == steps):
        raise RuntimeError(f"coordinator --stages {stages} exited {r.returncode}: {r.stderr[-600:]}")
    timed = [x["step_seconds"] for x in log[2 + args.warmup:]] or [x["step_seconds"] for x in log]
    own = os.getpid()
    return {"s_per_step": round(statistics.median(timed), 5), "steps": len(log),
            "losses": [x["loss"] for x in log[:2]],
            "stage_busy_seconds_last": log[-1].get("stage_busy_seconds"),
            "peak_device_mib_per_process": sorted([v for k, v in mem.peak.items() if k != own], reverse=True),
            "exit_code": r.returncode}


def run_plan(args, config, stages, budget, quantize="none", recompute="false", timeout=120):
    cmd = [os.path.join(args.bin_dir, "baton"), "plan", "--model-config", config, "--stages", str(stages),
           "--memory-per-stage", budget, "--dtype", args.dtype, "--quantize", quantize, "--recompute", recompute,
           "--device", "cuda" if args.device.startswith("cuda") else "cpu", "--micro-batches", "1", "--rank", "16",
           "--tokens", str(args.shape["grid"] ** 2 + args.shape["text"]), "--text-tokens", str(args.shape["text"])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"baton plan exited {r.returncode}: {r.stderr[-600:]}")
    # Rows "  <stage>  <blocks>  <frozen params>  <LoRA params>  <memory est.>  <budget> ...": the estimate per stage.
    estimates = []
    for line in r.stdout.splitlines():
        cols = [c for c in re.split(r"\s{2,}", line.strip()) if c]
        if len(cols) > 5 and cols[0].isdigit():
            estimates.append(cols[4])
    return {"cmd": " ".join(cmd[1:]), "rc": r.returncode, "stage_memory_estimates": estimates,
            "output": r.stdout[-2500:]}


class PyTorchSide:
    def __init__(self, args, work, targets, compiled):
        from diffusers import Flux2Transformer2DModel
        from peft import LoraConfig, set_peft_model_state_dict
        from safetensors.torch import load_file
        dev = args.device_name
        self.dev = dev
        self.model = Flux2Transformer2DModel.from_pretrained(os.path.join(work, "transformer"),
                                                             torch_dtype=args.torch_dtype).to(dev)
        self.model.requires_grad_(False)
        self.model.add_adapter(LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, target_modules=targets,
                                          init_lora_weights=True))
        set_peft_model_state_dict(self.model, load_file(os.path.join(work, "lora_init.safetensors")))
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        fused = dev.startswith("cuda")
        self.opt = torch.optim.AdamW(self.params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=fused)
        self.x = {k: v.to(dev) for k, v in load_file(os.path.join(work, "inputs.safetensors")).items()}
        self.forward = torch.compile(self.model) if compiled else self.model

    def step(self):
        t0 = time.perf_counter()
        x = self.x
        pred = self.forward(hidden_states=x["hidden_states"].to(self.model.dtype),
                            encoder_hidden_states=x["encoder_hidden_states"].to(self.model.dtype),
                            timestep=x["timestep"], img_ids=x["img_ids"], txt_ids=x["txt_ids"], guidance=x["guidance"],
                            return_dict=False)[0]
        loss = (pred.float() - x["target"].float()).pow(2).mean()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        loss_v, g = loss.item(), grad_norm.item()  # synchronizes
        return time.perf_counter() - t0, loss_v, g


def run_pytorch(args, work, targets, compiled):
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    side = PyTorchSide(args, work, targets, compiled)
    first = [side.step() for _ in range(2)]
    warm = time.time() - t0
    for _ in range(args.warmup):
        side.step()
    timed = [side.step()[0] for _ in range(args.steps)]
    if args.trace_dir and not compiled:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if args.device.startswith("cuda"):
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            side.step()
            side.step()
        prof.export_chrome_trace(os.path.join(args.trace_dir, "pytorch_eager_trace.json"))
    r = {"s_per_step": round(statistics.median(timed), 5), "losses": [f[1] for f in first],
         "grad_norm_step1": first[0][2], "setup_and_first_steps_s": round(warm, 1)}
    if args.device.startswith("cuda"):
        r["peak_device_allocated_bytes"] = torch.cuda.max_memory_allocated()
        r["peak_device_reserved_bytes"] = torch.cuda.max_memory_reserved()
    del side
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin_dir", required=True)
    p.add_argument("--device", default="cuda", help="cuda | cpu")
    p.add_argument("--dtype", default="", help="bf16 | fp32 (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--small", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="klein,pytorch,compile,dev_slice")
    p.add_argument("--trace_dir", default="", help="also save profiler traces (Baton 1 process, PyTorch eager), the "
                   "coordinator runs' train logs, and run a 2-stage coordinator with deterministic: false")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--part_timeout", type=int, default=240, help="seconds for each sub-part")
    args = p.parse_args()
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
    args.device_name = "cuda:0" if args.device == "cuda" else args.device
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    args.torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    only = set(args.only.split(","))
    T = args.part_timeout
    RESULTS.update({"device": args.device_name, "dtype": args.dtype, "small": args.small, "torch": torch.__version__,
                    "warmup": args.warmup, "timed_steps": args.steps, "lora": "rank 16, attention preset",
                    "batch": 1})
    if args.device.startswith("cuda") and torch.cuda.is_available():
        RESULTS["gpu"] = torch.cuda.get_device_name(0)
    work_root = tempfile.mkdtemp(prefix="baton-gpu-")
    # Most wanted first: the overall timeout may cut the tail (torch.compile's compile alone can take minutes).
    try:
        holder = {}
        if only & {"klein", "pytorch"}:
            args.shape = shape(args, "klein")
            RESULTS["klein_shape"] = args.shape
            work = os.path.join(work_root, "klein")
            os.makedirs(work)

            def write():
                holder["targets"], sizes = write_problem(args.shape, args, work)
                return sizes
            part("klein_write", args.out, write)
            cfg = os.path.join(work, "transformer", "config.json")
            if "targets" in holder and "klein" in only:
                part("klein_plan_1s", args.out, run_plan, args, cfg, 1, "80GB")
                part("klein_plan_2s", args.out, run_plan, args, cfg, 2, "40GB")
                part("klein_baton_1p", args.out, run_baton_1p, args, work, T)
                part("klein_coordinator_2s", args.out, run_coordinator, args, work, 2, T)
                if args.trace_dir:
                    part("klein_coordinator_2s_nondet", args.out, run_coordinator, args, work, 2, T, False)
            if "targets" in holder and "pytorch" in only:
                part("klein_pytorch_eager", args.out, run_pytorch, args, work, holder["targets"], False)
        if "dev_slice" in only:
            base = shape(args, "dev")
            args.shape = base
            part("dev_plan_int8_2x24GB", args.out, run_plan, args, os.path.join(REPO, "configs/models/flux2-dev.json"),
                 2, "24GB", "int8", "auto")
            sizes = {}
            for d, s in ((1, 2), (2, 4)):
                sh = dict(base, double=d, single=s)
                args.shape = sh
                dwork = os.path.join(work_root, f"dev{d}x{s}")
                os.makedirs(dwork)

                def write(sh=sh, dwork=dwork, key=f"{d}x{s}"):
                    sizes[key] = write_problem(sh, args, dwork)[1]
                    return dict(sizes[key])
                part(f"dev_write_{d}x{s}", args.out, write)
                part(f"dev_baton_1p_{d}x{s}", args.out, run_baton_1p, args, dwork, T)
                shutil.rmtree(dwork, ignore_errors=True)
            part("dev_extrapolation", args.out, extrapolate, base, sizes)
        if "targets" in holder:
            args.shape = shape(args, "klein")
            work = os.path.join(work_root, "klein")
            if "compile" in only:
                part("klein_pytorch_compile", args.out, run_pytorch, args, work, holder["targets"], True)
            if "klein" in only:
                part("klein_coordinator_1s", args.out, run_coordinator, args, work, 1, T)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
        save(args.out)
    return 0


def extrapolate(base, sizes):
    """Seconds and peak bytes per block parameter from the two slices (their difference is 1 double + 2 single
    blocks), scaled to FLUX.2-dev's 8 double + 48 single blocks; the rest (embedders, head, fixed costs) is what
    the 1 + 2 slice leaves over."""
    from diffusers import Flux2Transformer2DModel
    a, b = RESULTS["parts"]["dev_baton_1p_1x2"], RESULTS["parts"]["dev_baton_1p_2x4"]
    dp = sizes["2x4"]["block_params"] - sizes["1x2"]["block_params"]
    per_param_s = (b["s_per_step"] - a["s_per_step"]) / dp
    per_param_bytes = (b["peak_device_allocated_bytes"] - a["peak_device_allocated_bytes"]) / dp
    axes = base["head_dim"] // 4
    with torch.device("meta"):  # exact per-kind parameter counts, no memory
        m = Flux2Transformer2DModel(patch_size=1, in_channels=128, num_layers=1, num_single_layers=1,
                                    attention_head_dim=base["head_dim"], num_attention_heads=base["heads"],
                                    joint_attention_dim=base["joint"], timestep_guidance_channels=256, mlp_ratio=3.0,
                                    axes_dims_rope=(axes, axes, axes, base["head_dim"] - 3 * axes), rope_theta=2000,
                                    guidance_embeds=True)
    double = sum(p.numel() for n, p in m.named_parameters() if n.startswith("transformer_blocks."))
    single = sum(p.numel() for n, p in m.named_parameters() if n.startswith("single_transformer_blocks."))
    full_block_params = base["full_double"] * double + base["full_single"] * single
    rest_s = a["s_per_step"] - per_param_s * sizes["1x2"]["block_params"]
    rest_b = a["peak_device_allocated_bytes"] - per_param_bytes * sizes["1x2"]["block_params"]
    full_s = rest_s + per_param_s * full_block_params
    full_b = rest_b + per_param_bytes * full_block_params
    return {"D": base["heads"] * base["head_dim"], "double_block_params": double, "single_block_params": single,
            "full_block_params": full_block_params,
            "seconds_per_double_block": per_param_s * double, "seconds_per_single_block": per_param_s * single,
            "bytes_per_double_block": per_param_bytes * double, "bytes_per_single_block": per_param_bytes * single,
            "full_model_s_per_step": full_s, "full_model_peak_bytes": full_b,
            "full_model_peak_bytes_per_stage_of_2": full_b / 2,
            "note": "assumes step time and peak bytes grow linearly in block parameters between the 1+2 and 2+4 "
                    "block slices; bf16 weights: int8 stores the block linears in half the bytes and adds a "
                    "dequantization per layer that this slice does not time; two stages of one micro-batch run one "
                    "after the other, so the two-card step is about the one-device step plus the transfers; "
                    "dev_plan_int8_2x24GB is the planner's fit on two 24 GB cards"}


if __name__ == "__main__":
    sys.exit(main())

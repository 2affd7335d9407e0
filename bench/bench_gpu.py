"""Parts 3 and 4 of scripts/gpu_check.sh: Baton's LoRA training step at real sizes on one device, its peak device
memory next to `baton plan`, a full-width slice of FLUX.2-dev extrapolated to the whole model, and the same step
in PyTorch (diffusers Flux2Transformer2DModel + peft), eager and with regional torch.compile, on the same device.

    python3 bench/bench_gpu.py --bin_dir BUILD/bin --device cuda --out parts.json [--small] [--dtype bf16]

Measurements (random weights written here; inputs fixed; LoRA rank 16 on the attention preset; batch 1):
  klein      a FLUX.2 klein-4B-shaped model (configs/models/flux2-klein-4b.json, guidance embedder added so both sides
             take the same inputs) at 1024x1024: 4096 image + 512 text tokens.
             baton_1p_<lora>: one stage in one process (bench_vs_pytorch --device --lora_dtype: train-local's step).
             pytorch_eager_<lora>: diffusers + peft, the same adapter precision: bf16 = the adapters as peft's
             inject_adapter_in_model leaves them (cast to the base dtype), fused AdamW on them; fp32 = the adapters
             upcast to fp32 (diffusers' training scripts' cast_training_params), peft casting the input to them.
             coordinator_<S>s[_local]: `coordinator --stages S` with every stage on the same device (job key devices),
             step seconds from train_log.jsonl; the optimizer in the coordinator (replica_exchange: coordinator, the
             LoRA round trip every step) or, _local, on each stage's device (replica_exchange: allreduce at one
             replica: the stage-local optimizer). replicas_2x1_allreduce: two replicas of one stage on the same
             device, their gradients summed by the allreduce exchange (2 micro-batches a step, one per replica).
             plan_1s / plan_2s: `baton plan` for the same config.
             agreement_<lora>: Baton's loss and LoRA gradients at the initial adapters (bench_vs_pytorch --grads_out)
             against diffusers + peft's at the same precision, within AGREEMENT_TOLERANCE (else the part fails).
             baton_1p rows also run one step under c10's sync debug mode (--sync_sites_out): every host-device
             synchronization besides the read-back, with its backtrace.
             pytorch_compile_<lora>: diffusers + peft with regional compilation (each transformer block's forward
             compiled: diffusers' compile_repeated_blocks, what diffusers recommends for training), last, under
             its own timeout (--compile_timeout).
  dev_slice  FLUX.2-dev at real width (D = 6144, joint 15360): 1 double + 2 single and 2 double + 4 single blocks,
             baton_1p each; their difference is the cost of 1 double + 2 single blocks, scaled by block parameters
             to the whole 8 + 48 blocks; bytes likewise. plan_dev_int8: `baton plan` of the whole model on two 24 GB
             cards with int8 weights. offload_<n>_of_6: the 2 + 4 slice through `coordinator --stages 1` (the
             stage-local optimizer) with `offload: {blocks: n}`, n = 0, a quarter and half of its blocks, every
             block recomputed (`recompute: true`, which swap needs).
Like for like, every row: the same adapter precision on both sides (the row's lora_dtype), the same determinism
(--deterministic, default false: libtorch's defaults, which bench_vs_pytorch keeps; the coordinator rows write
`deterministic:` accordingly; PyTorch sets torch.use_deterministic_algorithms and cuDNN to match), the same CPU
threads (--threads: bench_vs_pytorch --threads, the job's `threads:`, torch.set_num_threads), and peak memory from
one source: each row runs in its own processes and every process's peak is sampled the same way (CUDA: nvidia-smi's
used memory per process, the CUDA context and the caching allocator's reserve; CPU: the peak resident set, VmHWM).
Where a process reports its caching allocator's peak allocated bytes, that is recorded beside it.
Rows the build does not support yet (lora_dtype bf16, replica_exchange: allreduce at one replica) fail with the
build's own message, and the rest runs; an fp32-adapter row on a build without lora_dtype runs without the key
(fp32 adapter math was the only one) and says so.
--small runs the same code at tiny sizes (the CPU rehearsal). Every sub-part has its own timeout; the JSON is
rewritten after each, so a part that fails or times out leaves the others' figures and its own error.
"""

import argparse
import functools
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
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def save(path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULTS, f, indent=1)
    os.replace(tmp, path)


DEADLINE = [None]  # time.time() by which every part must be done (--time_budget), or None


def time_left():
    return None if DEADLINE[0] is None else DEADLINE[0] - time.time()


def timeout_for(t):
    """A part's timeout: its own, or what the time budget leaves (10 s kept for the JSON and the report)."""
    left = time_left()
    return t if left is None else max(1, min(t, int(left - 10)))


def part(name, out_path, fn, *a):
    t0 = time.time()
    left = time_left()
    if left is not None and left < 30:
        RESULTS.setdefault("skipped", {})[name] = f"no time left ({left:.0f} s of --time_budget)"
        print(f"[bench_gpu] {name} skipped: {RESULTS['skipped'][name]}", flush=True)
        save(out_path)
        return
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
    with open(os.path.join(work, "targets.json"), "w") as f:
        json.dump(targets, f)
    return targets, {"params": params, "block_params": block_params}


# ---- like for like: what every row states ---------------------------------------------------------------------
def determinism(args, who):
    if who == "baton_1p":
        how = ("libtorch's defaults (bench_vs_pytorch sets nothing): non-deterministic algorithms allowed, cuDNN "
               "benchmark off")
        return {"deterministic": False, "how": how, "as_asked": not args.deterministic}
    if who == "coordinator":
        how = (f"job key deterministic: {str(args.deterministic).lower()} (CUDA: deterministic algorithms, cuDNN "
               "deterministic, no autotuning, CUBLAS_WORKSPACE_CONFIG=:4096:8)" if args.deterministic else
               "job key deterministic: false (non-deterministic algorithms allowed, cuDNN benchmark off)")
        return {"deterministic": args.deterministic, "how": how, "as_asked": True}
    how = (f"torch.use_deterministic_algorithms({args.deterministic}), cudnn.deterministic={args.deterministic}, "
           "cudnn.benchmark=False" + (", CUBLAS_WORKSPACE_CONFIG=:4096:8" if args.deterministic else ""))
    return {"deterministic": args.deterministic, "how": how, "as_asked": True}


def lora_note(side, lora_dtype, base_dtype):
    if side == "baton":
        return (f"{lora_dtype} adapter math over a {base_dtype} base; fp32 masters and AdamW moments"
                if lora_dtype != "fp32" else f"fp32 adapter math over a {base_dtype} base; fp32 masters and moments")
    if lora_dtype == base_dtype:
        return (f"peft adapters in {lora_dtype}, as inject_adapter_in_model leaves them (cast to the base dtype); "
                "AdamW on them")
    return f"peft adapters upcast to fp32 (cast_training_params) over a {base_dtype} base; AdamW on them"


# ---- one source of peak memory for every row -------------------------------------------------------------------
class PeakMemory:
    """Each process's peak memory while a row runs, measured the same way for every row. CUDA: nvidia-smi's used
    memory per compute process (sampled every 0.25 s; the caching allocator's reserve only grows, so the samples
    catch its peak), this process excluded. CPU: the peak resident set (VmHWM) of every descendant process."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.peak = {}  # pid -> MiB
        self.stop = False
        self.own = os.getpid()
        self.source = ("nvidia-smi used memory per process (CUDA context + caching allocator reserve)" if cuda
                       else "peak resident set (VmHWM) per process")
        self.enabled = (shutil.which("nvidia-smi") is not None) if cuda else os.path.isdir("/proc/self")
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def sample_cuda(self):
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            pid, mib = [x.strip() for x in line.split(",")[:2]]
            if int(pid) != self.own:
                self.peak[int(pid)] = max(self.peak.get(int(pid), 0), int(mib))

    def sample_cpu(self):
        parents, names = {}, {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        head, tail = f.read().rsplit(")", 1)
                    parents[int(d)] = int(tail.split()[1])
                    names[int(d)] = head.split("(", 1)[1]
                except (OSError, IndexError, ValueError):
                    pass
        # The row's own processes: this process's children (bench_vs_pytorch, the coordinator, a PyTorch row) and
        # the Baton workers below them, not the helpers a PyTorch row starts (Inductor's compile workers, the C++
        # compiler), which the CUDA measure does not see either.
        children = {}
        for p, pp in parents.items():
            children.setdefault(pp, []).append(p)
        mine, todo = set(), [(c, True) for c in children.get(self.own, [])]
        while todo:
            pid, direct = todo.pop()
            if direct or names.get(pid) in ("stage_worker", "encoder_worker"):
                mine.add(pid)
            todo += [(c, False) for c in children.get(pid, [])]
        for pid in mine:
            try:
                with open(f"/proc/{pid}/status") as f:
                    m = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)
                if m:
                    self.peak[pid] = max(self.peak.get(pid, 0), int(m.group(1)) // 1024)
            except OSError:
                pass

    def loop(self):
        while not self.stop:
            try:
                self.sample_cuda() if self.cuda else self.sample_cpu()
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

    def result(self):
        return {"peak_memory_mib_per_process": sorted(self.peak.values(), reverse=True),
                "peak_memory_source": self.source if self.enabled else "none (no nvidia-smi)"}


def common(args, lora_dtype, who):
    return {"lora_dtype": lora_dtype, "base_dtype": args.dtype, "cpu_threads": args.threads,
            "determinism": determinism(args, who)}


# ---- Baton in one process --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def help_text(path):
    """`path --help`, asked once per binary (each run loads libtorch)."""
    try:
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
        return r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        return ""


def binary_has_flag(path, flag):
    return f"-{flag}" in help_text(path)


def grads_path(work, side, lora_dtype):
    return os.path.join(work, f"grads_{side}_{lora_dtype}.safetensors")


# Baton against diffusers + peft on one micro-batch, the same weights, adapters and precision. With a bf16 base the
# two sides round differently at every op (bf16 keeps 8 bits: 3.9e-3 relative per rounding) and sum in other
# orders, over a forward and a backward through every block: the loss within 1e-2 and the gradients within 5e-2
# of peft's (‖Δ‖/‖g‖ over every adapter), no tensor beyond 0.25. An fp32 base (the CPU rehearsal): 1e-4, 1e-3, 1e-2.
# A wrong scale, a missed adapter or a transposed factor is off by O(1).
AGREEMENT_TOLERANCE = {"bf16": {"loss": 1e-2, "grads": 5e-2, "worst_tensor": 0.25},
                       "fp32": {"loss": 1e-4, "grads": 1e-3, "worst_tensor": 1e-2}}


def agreement(args, work, lora_dtype):
    """Baton's loss and LoRA gradients at the initial adapters against diffusers + peft's: relative errors, and an
    error (this part FAILED in the report) beyond AGREEMENT_TOLERANCE for the base dtype."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    sides = {s: grads_path(work, s, lora_dtype) for s in ("baton", "pytorch")}
    missing = [p for p in sides.values() if not os.path.exists(p)]
    if missing:
        raise RuntimeError(f"no gradients from {', '.join(missing)} (its row failed, or this build lacks --grads_out)")
    g = {s: load_file(p) for s, p in sides.items()}
    loss = {}
    for s, p in sides.items():
        with safe_open(p, "pt") as f:
            loss[s] = float(f.metadata()["loss"])
    if set(g["baton"]) != set(g["pytorch"]):
        only = sorted(set(g["baton"]) ^ set(g["pytorch"]))[:4]
        raise RuntimeError(f"the two sides' adapters differ: {only}")
    diff2 = ref2 = 0.0
    per = {}
    for n, ref in g["pytorch"].items():
        d = (g["baton"][n].double() - ref.double()).norm().item()
        r = ref.double().norm().item()
        diff2, ref2 = diff2 + d * d, ref2 + r * r
        per[n] = d / max(r, 1e-30)
    worst = max(per, key=per.get)
    tol = AGREEMENT_TOLERANCE["bf16" if args.dtype == "bf16" else "fp32"]
    res = {"lora_dtype": lora_dtype, "base_dtype": args.dtype, "tensors": len(per),
           "loss_baton": loss["baton"], "loss_pytorch": loss["pytorch"],
           "loss_rel_err": abs(loss["baton"] - loss["pytorch"]) / max(abs(loss["pytorch"]), 1e-30),
           "grads_rel_err": (diff2 ** 0.5) / max(ref2 ** 0.5, 1e-30), "worst_tensor": worst,
           "worst_tensor_rel_err": per[worst], "tolerance": tol}
    beyond = [k for k, t in (("loss_rel_err", "loss"), ("grads_rel_err", "grads"), ("worst_tensor_rel_err",
                                                                                     "worst_tensor"))
              if not res[k] <= tol[t]]
    if beyond:
        raise RuntimeError("Baton and diffusers + peft disagree beyond the tolerance: "
                           + ", ".join(f"{k} {res[k]:.3g}" for k in beyond) + f" ({json.dumps(res)})")
    return res


def run_baton_1p(args, work, timeout, lora_dtype):
    """bench_vs_pytorch on the device: 2 checked steps, warm-up, timed steps; peak device memory."""
    exe = os.path.join(args.bin_dir, "bench_vs_pytorch")
    cmd = [exe, "--model", os.path.join(work, "transformer"), "--inputs", os.path.join(work, "inputs.safetensors"),
           "--lora", os.path.join(work, "lora_init.safetensors"), "--threads", str(args.threads), "--rank", "16",
           "--alpha", "16", "--targets", "attention", "--lr", "1e-3", "--clip", "1.0", "--device", args.device_name,
           "--dtype", args.dtype]
    note = None
    if binary_has_flag(exe, "lora_dtype"):
        cmd += ["--lora_dtype", lora_dtype]
    elif lora_dtype == "fp32":
        note = "this build's bench_vs_pytorch has no --lora_dtype: fp32 adapter math, its only one"
    else:
        raise RuntimeError(f"this build's bench_vs_pytorch has no --lora_dtype: no {lora_dtype} adapter math yet")
    if args.trace_dir:
        cmd += ["--trace_out", os.path.join(args.trace_dir, f"baton_1p_{os.path.basename(work)}_{lora_dtype}_trace.json")]
    if binary_has_flag(exe, "grads_out"):
        cmd += ["--grads_out", grads_path(work, "baton", lora_dtype)]
    sync_sites = os.path.join(work, f"sync_sites_{lora_dtype}.json")
    if binary_has_flag(exe, "sync_sites_out"):
        cmd += ["--sync_sites_out", sync_sites]
    with PeakMemory(args.cuda) as mem:
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
    syncs = json.load(open(sync_sites)) if os.path.exists(sync_sites) else None
    r = {"s_per_step": round(statistics.median(timed["seconds"]), 5), "losses": first["loss"],
         "grad_norm_step1": first["grad_norm"][0],
         "allocator_peak_allocated_bytes": timed.get("device_peak_allocated_bytes", 0),
         "allocator_peak_reserved_bytes": timed.get("device_peak_reserved_bytes", 0),
         "lora_tensors": ready.get("lora_tensors"), "optimizer": "AdamW in the process (train-local's step)",
         "adapters": lora_note("baton", lora_dtype, args.dtype), **mem.result(), **common(args, lora_dtype, "baton_1p")}
    if syncs is not None:  # one more step under c10's sync debug mode: what it waits for besides its read-back
        r["syncs_outside_readback"] = syncs["syncs_outside_readback"]
        r["sync_sites"] = [s[:1500] for s in syncs["sites"][:8]]
    if note:
        r["note"] = note
    return r


# ---- Baton through the coordinator -----------------------------------------------------------------------------
def run_coordinator(args, work, stages, timeout, lora_dtype, exchange="coordinator", replicas=1, deterministic=None,
                    offload=None):
    s_cache = os.path.join(work, "cache")
    if not os.path.exists(s_cache):
        grid = args.shape["grid"]
        subprocess.run([os.path.join(args.bin_dir, "baton"), "synthetic-cache", "--config",
                        os.path.join(work, "transformer", "config.json"), "--out", s_cache, "--samples", "2",
                        "--grids", f"{grid}x{grid}", "--text-len", str(args.shape["text"]), "--seed", "1"],
                       check=True, timeout=timeout)
    det = args.deterministic if deterministic is None else deterministic
    # One row's stage workers also trace two steps after the timed ones (Kineto; not timed themselves).
    traced = bool(args.trace_dir) and stages == 2 and exchange == "allreduce" and replicas == 1 and offload is None \
        and det == args.deterministic
    timed_end = 2 + args.warmup + args.steps
    steps = timed_end + (2 if traced else 0)
    dev = args.device_name
    name = f"{stages}s{'_local' if exchange == 'allreduce' and replicas == 1 else ''}_r{replicas}_{lora_dtype}" + \
        ("" if det == args.deterministic else ("_det" if det else "_nondet")) + \
        (f"_offload{offload}" if offload is not None else "")

    def job_text(with_lora_dtype):
        return (f"model: {work}/transformer\ndataset: {s_cache}\nlora: {{rank: 16, alpha: 16, targets: attention}}\n"
                f"optimizer: {{lr: 1.0e-3, clip: 1.0}}\nsteps: {steps}\nbatch_size: {replicas}\n"
                f"micro_batches: {replicas}\nschedule: 1f1b\nseed: 1\n"
                # block swap streams the blocks the backward recomputes: the offload series (none swapped included,
                # like for like) recomputes every block
                f"recompute: {'false' if offload is None else 'true'}\n"
                f"checkpoint_every: {steps + 1}\ndtype: {args.dtype}\n"
                + (f"lora_dtype: {lora_dtype}\n" if with_lora_dtype else "")
                + f"threads: {args.threads}\ndevices: [{', '.join([dev] * (stages * replicas))}]\n"
                f"deterministic: {str(det).lower()}\nreplica_exchange: {exchange}\n"
                + (f"replicas: {replicas}\n" if replicas > 1 else "")
                + (f"offload: {{blocks: {offload}}}\n" if offload else ""))

    def attempt(with_lora_dtype):
        job = os.path.join(work, f"job_{name}.yaml")
        with open(job, "w") as f:
            f.write(job_text(with_lora_dtype))
        out = os.path.join(work, f"run_{name}")
        shutil.rmtree(out, ignore_errors=True)
        env = dict(os.environ)
        if traced:
            env.update(BATON_KINETO_TRACE=os.path.join(args.trace_dir, f"coordinator_{name}"),
                       BATON_KINETO_TRACE_STEPS=f"{timed_end},2")
        with PeakMemory(args.cuda) as mem:
            r = subprocess.run([os.path.join(args.bin_dir, "coordinator"), "--stages", str(stages), "--job", job,
                                "--output", out], capture_output=True, text=True, timeout=timeout, env=env)
        return r, out, mem

    note = None
    r, out, mem = attempt(True)
    if r.returncode != 0 and "unknown key 'lora_dtype'" in r.stderr:
        if lora_dtype != "fp32":
            raise RuntimeError(f"this build's coordinator has no job key lora_dtype: no {lora_dtype} adapter math "
                               f"yet ({r.stderr.strip()[-300:]})")
        note = "this build's coordinator has no job key lora_dtype: fp32 adapter math, its only one"
        r, out, mem = attempt(False)
    sys.stdout.write(r.stdout[-3000:])
    sys.stderr.write(r.stderr[-3000:])
    log_path = os.path.join(out, "train_log.jsonl")
    log = [json.loads(line) for line in open(log_path) if line.strip()] if os.path.exists(log_path) else []
    if args.trace_dir and os.path.exists(log_path):
        shutil.copy(log_path, os.path.join(args.trace_dir, f"train_log_{name}.jsonl"))
    log = [x for x in log if "event" not in x and "step_seconds" in x]
    # A crash after the last step (at exit) still leaves the measurements: keep them and say so.
    if r.returncode != 0 and not (r.returncode < 0 and len(log) == steps):
        raise RuntimeError(f"coordinator --stages {stages} ({exchange}, {replicas} replica(s)) exited "
                           f"{r.returncode}: {r.stderr.strip()[-600:]}")
    timed = [x["step_seconds"] for x in log[2 + args.warmup:timed_end]] or [x["step_seconds"] for x in log]
    optimizer = ("AdamW in the coordinator (replica_exchange: coordinator: gradients up, adapters down each step)"
                 if exchange == "coordinator" else
                 "AdamW on each stage's device (replica_exchange: allreduce"
                 + (", one replica: the stage-local optimizer)" if replicas == 1 else f", {replicas} replicas)"))
    res = {"s_per_step": round(statistics.median(timed), 5), "steps": len(log), "stages": stages,
           "replicas": replicas, "samples_per_step": replicas, "losses": [x["loss"] for x in log[:2]],
           "stage_busy_seconds_last": log[-1].get("stage_busy_seconds"),
           # CUDA events on each stage's compute stream (the host's stage_busy_seconds time launches there)
           "stage_device_busy_seconds_last": log[-1].get("stage_device_busy_seconds"),
           "stage_memory_bytes_last": log[-1].get("stage_memory_bytes"),
           "stage_memory_reserved_bytes_last": log[-1].get("stage_memory_reserved_bytes"),
           "offload_blocks": offload or 0, "recompute": offload is not None,
           "coordinator_seconds_last": log[-1].get("coordinator_seconds"),
           "replica_allreduce_seconds_last": log[-1].get("replica_allreduce_seconds"),
           "exit_code": r.returncode, "optimizer": optimizer, "adapters": lora_note("baton", lora_dtype, args.dtype),
           **mem.result(), **common(args, lora_dtype, "coordinator")}
    res["determinism"] = {"deterministic": det, "as_asked": det == args.deterministic,
                          "how": f"job key deterministic: {str(det).lower()}"}
    if note:
        res["note"] = note
    return res


def run_plan(args, config, stages, budget, quantize="none", recompute="false", timeout=120):
    cmd = [os.path.join(args.bin_dir, "baton"), "plan", "--model-config", config, "--stages", str(stages),
           "--memory-per-stage", budget, "--dtype", args.dtype, "--quantize", quantize, "--recompute", recompute,
           "--device", "cuda" if args.cuda else "cpu", "--micro-batches", "1", "--rank", "16",
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


# ---- PyTorch (diffusers + peft), each row in its own process ---------------------------------------------------
def pytorch_child(spec):
    """Runs in a child process (bench_gpu.py --pytorch_child SPEC): one PyTorch row, its result as the last line."""
    from diffusers import Flux2Transformer2DModel
    from peft import LoraConfig, set_peft_model_state_dict
    from safetensors.torch import load_file, save_file
    dev, work, cuda = spec["device"], spec["work"], spec["device"].startswith("cuda")
    torch.set_num_threads(spec["threads"])
    torch.use_deterministic_algorithms(spec["deterministic"])
    torch.backends.cudnn.deterministic = spec["deterministic"]
    torch.backends.cudnn.benchmark = False
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    base = DTYPES[spec["dtype"]]
    model = Flux2Transformer2DModel.from_pretrained(os.path.join(work, "transformer"), torch_dtype=base).to(dev)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, target_modules=spec["targets"],
                                 init_lora_weights=True))
    set_peft_model_state_dict(model, load_file(os.path.join(work, "lora_init.safetensors")))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if spec["lora_dtype"] == "fp32":
        for p in params:  # diffusers' training scripts: cast_training_params(model, dtype=torch.float32)
            p.data = p.data.to(torch.float32)
    adapter_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=cuda)
    x = {k: v.to(dev) for k, v in load_file(os.path.join(work, "inputs.safetensors")).items()}
    compiled = ""
    if spec["compile"]:
        if hasattr(model, "compile_repeated_blocks") and getattr(model, "_repeated_blocks", None):
            model.compile_repeated_blocks()
            compiled = f"regional: diffusers' compile_repeated_blocks ({', '.join(model._repeated_blocks)})"
        else:
            n = 0
            for blocks in (model.transformer_blocks, model.single_transformer_blocks):
                for b in blocks:
                    b.compile()
                    n += 1
            compiled = f"regional: block.compile() on each of {n} transformer blocks"

    def step(grads_out=None):
        t = time.perf_counter()
        pred = model(hidden_states=x["hidden_states"].to(base), encoder_hidden_states=x["encoder_hidden_states"].to(base),
                     timestep=x["timestep"], img_ids=x["img_ids"], txt_ids=x["txt_ids"], guidance=x["guidance"],
                     return_dict=False)[0]
        loss = (pred.float() - x["target"].float()).pow(2).mean()
        loss.backward()
        if grads_out:  # the agreement row's: the gradients at the initial adapters, under Baton's (PEFT) names
            save_file({n.replace(".default", ""): p.grad.detach().float().cpu().contiguous()
                       for n, p in model.named_parameters() if p.requires_grad},
                      grads_out, metadata={"loss": repr(loss.item())})
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v, g = loss.item(), grad_norm.item()  # synchronizes
        return time.perf_counter() - t, loss_v, g

    first = [step(spec.get("grads_out")), step()]
    warm = time.time() - t0
    for _ in range(spec["warmup"]):
        step()
    timed = [step()[0] for _ in range(spec["steps"])]
    if spec.get("trace_dir") and not spec["compile"]:
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=acts) as prof:
            step()
            step()
        prof.export_chrome_trace(os.path.join(spec["trace_dir"], f"pytorch_eager_{spec['lora_dtype']}_trace.json"))
    r = {"s_per_step": round(statistics.median(timed), 5), "losses": [f[1] for f in first],
         "grad_norm_step1": first[0][2], "setup_and_first_steps_s": round(warm, 1), "adapter_param_dtypes": adapter_dtypes,
         "torch_threads": torch.get_num_threads()}
    if compiled:
        r["compiled"] = compiled
    if cuda:
        r["allocator_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        r["allocator_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    print("RESULT " + json.dumps(r), flush=True)


def run_pytorch(args, work, targets, lora_dtype, compiled, timeout):
    spec = {"device": args.device_name, "work": work, "targets": targets, "dtype": args.dtype,
            "lora_dtype": lora_dtype, "compile": compiled, "threads": args.threads,
            "deterministic": args.deterministic, "warmup": args.warmup, "steps": args.steps,
            "trace_dir": args.trace_dir, "grads_out": None if compiled else grads_path(work, "pytorch", lora_dtype)}
    env = dict(os.environ)
    if args.deterministic:
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    with PeakMemory(args.cuda) as mem:
        try:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--pytorch_child", json.dumps(spec)],
                               capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as e:
            tail = (e.stderr or b"")[-800:]
            raise RuntimeError(f"timed out after {timeout} s{' (compiling)' if compiled else ''}: "
                               f"{tail.decode(errors='replace') if isinstance(tail, bytes) else tail}")
    sys.stdout.write(r.stdout[-2000:])
    result = next((json.loads(line[7:]) for line in reversed(r.stdout.splitlines()) if line.startswith("RESULT ")),
                  None)
    if r.returncode != 0 or result is None:
        # The error's own line (e.g. Inductor's "CUDA error: an illegal memory access") and the end of the stderr.
        err = r.stderr.strip().splitlines()
        key = [x for x in err if re.search(r"Error|error:", x)][-3:]
        raise RuntimeError(f"exited {r.returncode}: {' | '.join(key)[-900:]} || {' '.join(err[-4:])[-600:]}")
    sys.stderr.write(r.stderr[-1500:])
    result.update({"optimizer": f"torch.optim.AdamW({'fused' if args.cuda else 'foreach'}) in the process",
                   "adapters": lora_note("pytorch", lora_dtype, args.dtype), **mem.result(),
                   **common(args, lora_dtype, "pytorch")})
    return result


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--pytorch_child":
        pytorch_child(json.loads(sys.argv[2]))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin_dir", required=True)
    p.add_argument("--device", default="cuda", help="cuda | cpu")
    p.add_argument("--dtype", default="", help="bf16 | fp32 (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--lora_dtypes", default="", help="adapter precisions, each its own Baton and PyTorch rows, the "
                   "first also the coordinator, compile and dev-slice rows (default: the dtype, then fp32)")
    p.add_argument("--deterministic", default="false", choices=["false", "true"],
                   help="every row's determinism (bench_vs_pytorch knows only libtorch's defaults, i.e. false)")
    p.add_argument("--small", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="klein,pytorch,coordinator,local,replicas,dev_slice,offload,compile",
                   help="klein: Baton in one process and the plans; pytorch: eager; coordinator: the coordinator "
                   "exchange, 1 and 2 stages; local: the stage-local optimizer (allreduce at one replica), 1 and 2 "
                   "stages; replicas: 2 replicas, the allreduce exchange; dev_slice; offload: block swap on the dev "
                   "slice (with dev_slice); compile: regional torch.compile")
    p.add_argument("--trace_dir", default="", help="also save profiler traces (Baton 1 process, PyTorch eager), the "
                   "coordinator runs' train logs, and run a 2-stage coordinator with the other determinism")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1),
                   help="CPU threads of every row (default 4, or the cores there are)")
    p.add_argument("--part_timeout", type=int, default=240, help="seconds for each sub-part")
    p.add_argument("--compile_timeout", type=int, default=300, help="seconds for each torch.compile row")
    p.add_argument("--time_budget", type=int, default=0, help="seconds for the whole bench (0: none): each part's "
                   "timeout is cut to what is left, and a part with under 30 s left is skipped and named")
    args = p.parse_args()
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
    args.cuda = args.device.startswith("cuda")
    args.device_name = "cuda:0" if args.device == "cuda" else args.device
    args.dtype = args.dtype or ("bf16" if args.cuda else "fp32")
    args.torch_dtype = DTYPES[args.dtype]
    args.deterministic = args.deterministic == "true"
    if args.time_budget > 0:
        DEADLINE[0] = time.time() + args.time_budget
    loras = [x for x in (args.lora_dtypes or f"{args.dtype},fp32").split(",") if x]
    loras = list(dict.fromkeys(loras))  # fp32 base: one precision
    only = set(args.only.split(","))
    T = args.part_timeout
    RESULTS.update({"device": args.device_name, "dtype": args.dtype, "lora_dtypes": loras, "small": args.small,
                    "torch": torch.__version__, "warmup": args.warmup, "timed_steps": args.steps,
                    "lora": "rank 16, attention preset", "batch": 1, "cpu_threads": args.threads,
                    "deterministic": args.deterministic,
                    "memory_source": PeakMemory(args.cuda).source})
    if args.cuda and torch.cuda.is_available():
        RESULTS["gpu"] = torch.cuda.get_device_name(0)
    work_root = tempfile.mkdtemp(prefix="baton-gpu-")
    main_lora = loras[0]
    # Most wanted first: the overall timeout may cut the tail. torch.compile comes last.
    try:
        holder = {}
        args.shape = shape(args, "klein")
        RESULTS["klein_shape"] = args.shape
        work = os.path.join(work_root, "klein")
        os.makedirs(work)
        if only & {"klein", "pytorch", "coordinator", "local", "replicas", "compile"}:
            def write():
                holder["targets"], sizes = write_problem(args.shape, args, work)
                return sizes
            part("klein_write", args.out, write)
        cfg = os.path.join(work, "transformer", "config.json")
        tw = work if "targets" in holder else None
        if tw and "klein" in only:
            part("klein_plan_1s", args.out, run_plan, args, cfg, 1, "80GB")
            part("klein_plan_2s", args.out, run_plan, args, cfg, 2, "40GB")

        def pair(ld):  # Baton in one process and PyTorch eager at one adapter precision
            if "klein" in only:
                part(f"klein_baton_1p_{ld}", args.out, lambda: run_baton_1p(args, tw, timeout_for(T), ld))
            if "pytorch" in only:
                part(f"klein_pytorch_eager_{ld}", args.out,
                     lambda: run_pytorch(args, tw, holder["targets"], ld, False, timeout_for(T)))
            if {"klein", "pytorch"} <= only:
                part(f"klein_agreement_{ld}", args.out, agreement, args, tw, ld)
        if tw:
            pair(main_lora)
            for stages in (1, 2):
                if "local" in only:
                    part(f"klein_coordinator_{stages}s_local_{main_lora}", args.out,
                         lambda: run_coordinator(args, tw, stages, timeout_for(T), main_lora, "allreduce"))
                if "coordinator" in only:
                    part(f"klein_coordinator_{stages}s_{main_lora}", args.out,
                         lambda: run_coordinator(args, tw, stages, timeout_for(T), main_lora))
            if "replicas" in only:
                part(f"klein_replicas_2x1_allreduce_{main_lora}", args.out,
                     lambda: run_coordinator(args, tw, 1, timeout_for(T), main_lora, "allreduce", 2))
        if "dev_slice" in only:
            base = shape(args, "dev")
            args.shape = base
            part("dev_plan_int8_2x24GB", args.out, run_plan, args, os.path.join(REPO, "configs/models/flux2-dev.json"),
                 2, "24GB", "int8", "auto")
            sizes = {}
            for d, s in ((1, 2), (2, 4)):
                sh = dict(base, double=d, single=s)
                dwork = os.path.join(work_root, f"dev{d}x{s}")
                os.makedirs(dwork)

                def write(sh=sh, dwork=dwork, key=f"{d}x{s}"):
                    args.shape = sh
                    sizes[key] = write_problem(sh, args, dwork)[1]
                    return dict(sizes[key])
                part(f"dev_write_{d}x{s}", args.out, write)
                if f"{d}x{s}" in sizes:
                    part(f"dev_baton_1p_{d}x{s}", args.out, lambda: run_baton_1p(args, dwork, timeout_for(T), main_lora))
                if (d, s) == (2, 4) and "offload" in only and "2x4" in sizes:
                    # Block swap at FLUX.2-dev's block size: 0, a quarter and half of the slice's blocks in host
                    # memory, one stage, the stage-local optimizer, every block recomputed (what swap needs).
                    for n in (0, (d + s) // 4, (d + s) // 2):
                        part(f"dev_offload_{n}_of_{d + s}", args.out,
                             lambda n=n: run_coordinator(args, dwork, 1, timeout_for(T), main_lora, "allreduce",
                                                         offload=n))
                shutil.rmtree(dwork, ignore_errors=True)
            part("dev_extrapolation", args.out, extrapolate, base, sizes)
        # Then the other adapter precision and the other determinism (wanted less than block swap at dev's size).
        args.shape = RESULTS["klein_shape"]
        if tw:
            for ld in loras[1:]:
                pair(ld)
            if args.trace_dir and "coordinator" in only:
                part(f"klein_coordinator_2s_{main_lora}_{'nondet' if args.deterministic else 'det'}", args.out,
                     lambda: run_coordinator(args, tw, 2, timeout_for(T), main_lora, "coordinator", 1,
                                             not args.deterministic))
        # Last, in its own process under its own timeout: a compiler failure (the H100's "illegal memory access"
        # inside Inductor) is this row's error and takes nothing else with it.
        if tw and "compile" in only:
            part(f"klein_pytorch_compile_{main_lora}", args.out,
                 lambda: run_pytorch(args, tw, holder["targets"], main_lora, True, timeout_for(args.compile_timeout)))
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
        save(args.out)
    return 0


def extrapolate(base, sizes):
    """Seconds and peak bytes per block parameter from the two slices (their difference is 1 double + 2 single
    blocks), scaled to FLUX.2-dev's 8 double + 48 single blocks; the rest (embedders, head, fixed costs) is what
    the 1 + 2 slice leaves over. Bytes: the caching allocator's peak allocated (bench_vs_pytorch reports it; on
    CPU, the peak resident set instead)."""
    from diffusers import Flux2Transformer2DModel
    a, b = RESULTS["parts"]["dev_baton_1p_1x2"], RESULTS["parts"]["dev_baton_1p_2x4"]

    def peak(r):
        return r.get("allocator_peak_allocated_bytes") or (max(r.get("peak_memory_mib_per_process") or [0]) << 20)
    dp = sizes["2x4"]["block_params"] - sizes["1x2"]["block_params"]
    per_param_s = (b["s_per_step"] - a["s_per_step"]) / dp
    per_param_bytes = (peak(b) - peak(a)) / dp
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
    rest_b = peak(a) - per_param_bytes * sizes["1x2"]["block_params"]
    full_s = rest_s + per_param_s * full_block_params
    full_b = rest_b + per_param_bytes * full_block_params
    return {"D": base["heads"] * base["head_dim"], "double_block_params": double, "single_block_params": single,
            "full_block_params": full_block_params, "lora_dtype": a.get("lora_dtype"),
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

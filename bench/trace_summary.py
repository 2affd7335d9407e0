"""Kineto (Chrome) traces summarised where they were taken, so a GPU check that brings back one small JSON can say
where a slow step went: per trace, the GPU's busy and idle time per step, the top kernels, the copies by kind and
every call that makes the host wait for the device (synchronizing runtime calls and pageable copies).

    python3 bench/trace_summary.py TRACE_DIR [--steps 2] [--top 12] > summary.json

Each trace covers --steps steps (bench_vs_pytorch --trace_out and the PyTorch row trace two); a stage worker's
(<prefix>_stage<i>_step<n>_trace.json, core/device/kineto_trace.h) one. A CPU-only trace has no GPU events: its
summary gives the CPU operators instead."""

import argparse
import collections
import json
import os
import re
import sys

# CUDA runtime calls after which the host has waited for the device.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaStreamWaitEvent_host")


def union_ms(intervals):
    """Total length of the union of [start, end) intervals (µs in, ms out): the time the GPU did anything."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1000.0


def summarize(path, steps, top):
    with open(path) as f:
        events = [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    out = {"trace": os.path.basename(path), "steps": steps, "events": len(events)}
    if gpu:
        start = min(e["ts"] for e in gpu)
        end = max(e["ts"] + e["dur"] for e in gpu)
        busy = union_ms([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
        out["gpu_span_ms_per_step"] = round((end - start) / 1000.0 / steps, 3)
        out["gpu_busy_ms_per_step"] = round(busy / steps, 3)
        out["gpu_idle_ms_per_step"] = round(((end - start) / 1000.0 - busy) / steps, 3)
        kernels = collections.defaultdict(lambda: [0.0, 0])
        for e in gpu:
            if e["cat"] == "kernel":
                k = kernels[e["name"][:120]]
                k[0] += e["dur"] / 1000.0
                k[1] += 1
        out["top_kernels"] = [{"name": n, "ms_per_step": round(ms / steps, 3), "calls_per_step": c / steps}
                              for n, (ms, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]]
        copies = collections.defaultdict(lambda: [0.0, 0, 0])
        for e in gpu:
            if e["cat"] == "gpu_memcpy":
                c = copies[e["name"]]  # e.g. "Memcpy HtoD (Pageable -> Device)"
                c[0] += e["dur"] / 1000.0
                c[1] += 1
                c[2] += int(e.get("args", {}).get("bytes", 0) or 0)
        out["copies"] = [{"kind": n, "ms_per_step": round(ms / steps, 3), "per_step": c / steps,
                          "bytes_per_step": b // steps} for n, (ms, c, b) in sorted(copies.items())]
    else:
        ops = collections.defaultdict(lambda: [0.0, 0])
        for e in events:
            if e.get("cat") == "cpu_op":
                o = ops[e["name"]]
                o[0] += e["dur"] / 1000.0
                o[1] += 1
        out["note"] = "no GPU events (a CPU trace): operators by inclusive time, nested ones counted in their parents"
        out["top_cpu_ops"] = [{"name": n, "ms_per_step": round(ms / steps, 3), "calls_per_step": c / steps}
                              for n, (ms, c) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]]
    waits = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["name"].startswith(SYNC_CALLS):
            w = waits[e["name"]]
            w[0] += e["dur"] / 1000.0
            w[1] += 1
    out["host_waits"] = [{"call": n, "ms_per_step": round(ms / steps, 3), "per_step": c / steps}
                         for n, (ms, c) in sorted(waits.items(), key=lambda kv: -kv[1][0])]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace_dir")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    names = sorted(n for n in os.listdir(a.trace_dir) if n.endswith("_trace.json")) if os.path.isdir(a.trace_dir) else []
    summaries = []
    for n in names:
        try:
            steps = 1 if re.search(r"_step\d+_trace\.json$", n) else a.steps
            summaries.append(summarize(os.path.join(a.trace_dir, n), steps, a.top))
        except (OSError, ValueError, KeyError) as e:
            summaries.append({"trace": n, "error": f"{type(e).__name__}: {e}"})
    json.dump({"traces": summaries}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

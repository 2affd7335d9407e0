"""scripts/gpu_check.sh's report: gathers what each part left (parts.tsv, env.txt, bench.json, ctest.log,
transfer.log) into OUTDIR/gpu_report.json and OUTDIR/gpu_report.md, naming every part that failed, timed out or
was skipped. Exit status 0 when every part succeeded, 1 otherwise (the report is written either way)."""

import argparse
import datetime
import json
import os
import re


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_json_line(text, key):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and key in line:
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def ctest_results(text):
    tests = []
    for m in re.finditer(r"Test\s+#\d+:\s+(\S+)\s+\.+\s*(\*+)?\s*(Passed|Failed|Not Run|Skipped|Timeout|Exception|"
                         r"\S+)\s+([\d.]+)\s+sec", text):
        tests.append({"test": m.group(1), "result": m.group(3), "seconds": float(m.group(4))})
    # gtest's own skip message, so "Passed" tests that were skipped (no GPU) say so.
    for t in tests:
        name = t["test"].split(".", 1)[-1] if "." in t["test"] else t["test"]
        if re.search(re.escape(name) + r"[\s\S]{0,400}?\[  SKIPPED \]", text) and t["result"] == "Passed":
            t["result"] = "Skipped"
    summary = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
    skip = re.search(r"no CUDA device \(([^)]*)\)", text)
    return {"tests": tests, "summary": summary.group(0) if summary else None,
            "skip_message": skip.group(0) if skip else None}


def gib(b):
    return f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) and b > 0 else "—"


def sec(s):
    return f"{s:.4f}" if isinstance(s, (int, float)) else "—"


def agreement_lines(bp, errors):
    """Baton's loss and gradients at the initial adapters against diffusers + peft's (bench_gpu.py agreement)."""
    md = ["", "Baton against diffusers + peft at the initial adapters (same weights, micro-batch and precision; "
          "relative errors, tolerance in brackets):", ""]
    keys = sorted(k for k in list(bp) + list(errors) if k.startswith("klein_agreement_"))
    for key in keys:
        r = bp.get(key)
        if r is None:
            md.append(f"- {key}: FAILED: {errors.get(key, '')[:400]}")
            continue
        t = r["tolerance"]
        md.append(f"- {key} ({r['tensors']} adapter tensors, base {r['base_dtype']}): loss {r['loss_rel_err']:.2e} "
                  f"[{t['loss']}], gradients {r['grads_rel_err']:.2e} [{t['grads']}], worst tensor "
                  f"{r['worst_tensor_rel_err']:.2e} [{t['worst_tensor']}] ({r['worst_tensor']}): within")
    return md if keys else []


def stage_lines(bp):
    """The coordinator rows' stages: busy by the host's clock and by CUDA events, and their memory peaks."""
    md = ["", "Stages of the coordinator rows, last step (busy by the host's clock | by CUDA events on the compute "
          "stream; allocator peak allocated / reserved):", ""]
    n = 0
    for key, r in bp.items():
        if "stage_busy_seconds_last" not in r:
            continue
        host, dev = r.get("stage_busy_seconds_last") or [], r.get("stage_device_busy_seconds_last") or []
        alloc, res = r.get("stage_memory_bytes_last") or [], r.get("stage_memory_reserved_bytes_last") or []
        cells = []
        for i, h in enumerate(host):
            d = dev[i] if i < len(dev) else None
            cells.append(f"stage {i}: {sec(h)} | {sec(d) if d else '—'} s, "
                         f"{gib(alloc[i] if i < len(alloc) else 0)} / {gib(res[i] if i < len(res) else 0)}")
        md.append(f"- {key} ({sec(r.get('s_per_step'))} s/step): " + "; ".join(cells))
        n += 1
    return md if n else []


def overhead_lines(bp):
    """What a process holds on the device beyond its caching allocator's reserve (the CUDA context, cuBLAS and cuDNN
    workspaces, kernels): nvidia-smi's peak for the process less the allocator's peak reserved. The planner assumes
    1 GB (kCudaProcessBytes, core/pipeline/stage_memory.h)."""
    md = []
    for key, r in bp.items():
        smi = r.get("peak_memory_mib_per_process") or []
        reserved = r.get("allocator_peak_reserved_bytes") or 0
        if key.startswith(("klein_baton_1p", "dev_baton_1p")) and len(smi) == 1 and reserved > 0:
            md.append(f"- {key}: {gib(smi[0] * 2**20 - reserved)} (nvidia-smi {smi[0] / 1024:.2f} GiB, reserved "
                      f"{gib(reserved)})")
    return ["", "Device memory beyond the allocator per process (the planner assumes 1 GB, kCudaProcessBytes):",
            ""] + md if md else []


def sync_lines(bp):
    """What one step of Baton in one process waits for besides its read-back (c10's sync debug mode)."""
    md = []
    for key, r in bp.items():
        if "syncs_outside_readback" in r:
            md.append(f"- {key}: {r['syncs_outside_readback']} synchronizations outside the step's read-back")
            md += [f"  - `{s.splitlines()[0][:200] if s else ''}` ..." for s in r.get("sync_sites", [])[:4]]
    return ["", "Host-device synchronizations in one step (sync debug mode):", ""] + md if md else []


def offload_lines(bp, errors, skipped):
    """Block swap at FLUX.2-dev's block size: the step with 0, a quarter and half of the slice's blocks swapped."""
    keys = sorted((k for k in set(bp) | set(errors) | set(skipped) if k.startswith("dev_offload_")),
                  key=lambda k: int(k.split("_")[2]))
    if not keys:
        return []
    md = ["", "## Block swap (`offload: {blocks: n}`), FLUX.2-dev's block size, 1 stage", "",
          "| blocks swapped | s/step | ÷ none swapped | stage peak allocated |", "|---|---|---|---|"]
    base = bp.get(keys[0], {}).get("s_per_step")
    for k in keys:
        r = bp.get(k)
        if r is None:
            md.append(f"| {k} | {'FAILED' if k in errors else 'skipped'} | — | — |")
            continue
        ratio = f"{r['s_per_step'] / base:.3f}" if base and r.get("s_per_step") else "—"
        md.append(f"| {k.split('_')[2]} of {k.split('_')[4]} | {sec(r.get('s_per_step'))} | {ratio} | "
                  f"{gib((r.get('stage_memory_bytes_last') or [0])[0])} |")
    return md + ["", "Target (issue 48): half swapped at most 1.15x none swapped."]


def trace_lines(traces):
    """Kineto summaries (bench/trace_summary.py): per trace, the GPU's busy and idle time, top kernels, waits."""
    if not traces:
        return []
    md = ["", "## Where the step goes (Kineto traces, per step; raw traces in traces.tar)", ""]
    for t in traces:
        if "error" in t:
            md.append(f"- {t['trace']}: {t['error']}")
            continue
        if "gpu_busy_ms_per_step" in t:
            md.append(f"- **{t['trace']}**: GPU busy {t['gpu_busy_ms_per_step']} ms, idle {t['gpu_idle_ms_per_step']} "
                      f"ms of {t['gpu_span_ms_per_step']} ms")
            md += [f"  - {k['ms_per_step']} ms ({k['calls_per_step']:g}x) `{k['name'][:90]}`" for k in t["top_kernels"][:6]]
            md += [f"  - copy {c['kind']}: {c['per_step']:g}x, {c['ms_per_step']} ms" for c in t.get("copies", [])]
        else:
            md.append(f"- **{t['trace']}** (CPU): " + ", ".join(f"{o['name']} {o['ms_per_step']} ms"
                                                          for o in t.get("top_cpu_ops", [])[:5]))
        md += [f"  - host waits: {w['call']} {w['per_step']:g}x, {w['ms_per_step']} ms" for w in t.get("host_waits", [])]
    return md


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", default="0")
    p.add_argument("--wall", type=int, default=0)
    p.add_argument("--deadline", type=int, default=0)
    a = p.parse_args()

    parts = []
    for line in read(os.path.join(a.work, "parts.tsv")).splitlines():
        name, rc, seconds, timed_out = line.split("\t")
        ok = rc == "0"
        parts.append({"part": name, "ok": ok, "rc": rc, "seconds": int(seconds), "timed_out": timed_out == "1",
                      "log": {"setup": "build.log", "build": "build.log", "env": "build.log",
                              "ctest_cuda": "ctest.log", "transfer": "transfer.log", "bench": "bench.log",
                              "traces": "bench.log"}.get(name)})
    bench = {}
    try:
        bench = json.loads(read(os.path.join(a.work, "bench.json")) or "{}")
    except ValueError:
        pass
    transfer = last_json_line(read(os.path.join(a.out, "transfer.log")), '"bench":"transfer"')
    ctest = ctest_results(read(os.path.join(a.out, "ctest.log")))
    env = read(os.path.join(a.work, "env.txt"))
    try:
        traces = json.loads(read(os.path.join(a.work, "trace_summary.json")) or "{}").get("traces", [])
    except ValueError:
        traces = []
    failed = [x["part"] for x in parts if not x["ok"]] + [f"bench.{k}" for k in bench.get("errors", {})] + \
        [f"bench.{k} (skipped)" for k in bench.get("skipped", {})]
    report = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M:%S"), "device": a.device,
              "mode": "cpu rehearsal (--small)" if a.small == "1" else f"{a.device} real sizes",
              "wall_seconds": a.wall, "deadline_seconds": a.deadline, "parts": parts, "failed": failed, "env": env,
              "ctest_cuda": ctest, "transfer": transfer, "bench": bench, "traces": traces}
    with open(os.path.join(a.out, "gpu_report.json"), "w") as f:
        json.dump(report, f, indent=1)

    bp = bench.get("parts", {})
    md = [f"# Baton GPU check: {report['mode']}", "",
          f"{report['date_utc']} UTC; wall {a.wall} s (deadline {a.deadline} s); device {bench.get('gpu', a.device)}; "
          f"torch {bench.get('torch', '?')}; dtype {bench.get('dtype', '?')}; "
          f"{bench.get('warmup', '?')} warm-up + {bench.get('timed_steps', '?')} timed steps, median.", "",
          "**Failed or skipped:** " + (", ".join(failed) if failed else "none"), "",
          "## Parts", "", "| part | result | seconds | log |", "|---|---|---|---|"]
    for x in parts:
        res = "ok" if x["ok"] else ("TIMED OUT" if x["timed_out"] else ("skipped" if x["rc"] == "skipped"
                                                                         else f"FAILED (rc {x['rc']})"))
        md.append(f"| {x['part']} | {res} | {x['seconds']} | {x['log'] or ''} |")
    md += ["", "## Machine and binaries", "", "```", env.strip(), "```", "",
           "## CUDA tests (`ctest -L cuda`)", "", f"{ctest['summary'] or 'no ctest summary'}"
           + (f"; {ctest['skip_message']}" if ctest["skip_message"] else ""), "",
           "| test | result | seconds |", "|---|---|---|"]
    md += [f"| {t['test']} | {t['result']} | {t['seconds']} |" for t in ctest["tests"]]

    shape = bench.get("klein_shape", {})
    md += ["", "## Training step (LoRA rank 16 on the attention preset, batch 1)", "",
           f"klein-4B-shaped: D = {shape.get('heads', 0) * shape.get('head_dim', 0)}, {shape.get('double', '?')} double + "
           f"{shape.get('single', '?')} single blocks, {shape.get('grid', 0) ** 2} image + {shape.get('text', '?')} "
           f"text tokens; base {bench.get('dtype', '?')}; {bench.get('cpu_threads', '?')} CPU threads in every row; "
           f"peak memory, every row: {bench.get('memory_source', '?')}. Like for like: each row's PyTorch eager "
           "ratio is against eager at the same adapter precision.", "",
           "| run | adapters | optimizer | s/step | samples/step | peak memory per process | allocator peak "
           "allocated / reserved | `baton plan` estimate per stage | deterministic | PyTorch eager s/step ÷ this |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    errors, skipped = bench.get("errors", {}), bench.get("skipped", {})
    loras = bench.get("lora_dtypes") or [bench.get("dtype", "fp32")]
    main_lora = loras[0]
    rows = []
    for ld in loras:
        rows += [(f"Baton, 1 stage, 1 process (train-local's step)", f"klein_baton_1p_{ld}", ld),
                 ("PyTorch eager (diffusers + peft)", f"klein_pytorch_eager_{ld}", ld)]
    rows += [("Baton coordinator, 1 stage, stage-local optimizer (allreduce, 1 replica)",
              f"klein_coordinator_1s_local_{main_lora}", main_lora),
             ("Baton coordinator, 1 stage, optimizer in the coordinator", f"klein_coordinator_1s_{main_lora}", main_lora),
             ("Baton coordinator, 2 stages on one device, stage-local optimizer",
              f"klein_coordinator_2s_local_{main_lora}", main_lora),
             ("Baton coordinator, 2 stages on one device, optimizer in the coordinator",
              f"klein_coordinator_2s_{main_lora}", main_lora),
             ("Baton, 2 replicas x 1 stage on one device, allreduce exchange",
              f"klein_replicas_2x1_allreduce_{main_lora}", main_lora)]
    rows += [(f"Baton coordinator, 2 stages, deterministic: {'false' if k.endswith('nondet') else 'true'}", k, main_lora)
             for k in bp if re.match(r"klein_coordinator_2s_\w+_(det|nondet)$", k)]
    rows += [("PyTorch torch.compile, regional (each block)", f"klein_pytorch_compile_{main_lora}", main_lora)]
    plans = {1: "klein_plan_1s", 2: "klein_plan_2s"}
    for label, key, ld in rows:
        r = bp.get(key)
        if r is None:
            state = ("FAILED (Errors below)" if key in errors else "skipped: " + skipped[key] if key in skipped
                     else "not run")
            md.append(f"| {label} | {ld} | — | {state} | — | — | — | — | — | — |")
            continue
        mem = ", ".join(f"{m / 1024:.2f} GiB" for m in r.get("peak_memory_mib_per_process") or []) or "—"
        eager = bp.get(f"klein_pytorch_eager_{ld}", {}).get("s_per_step")
        per_sample = r["s_per_step"] / r.get("samples_per_step", 1) if r.get("s_per_step") else None
        ratio = f"{eager / per_sample:.2f}" if eager and per_sample else "—"
        if r.get("samples_per_step", 1) > 1 and ratio != "—":
            ratio += " (per sample)"
        est = ""
        if "stages" in r and r.get("replicas", 1) == 1:
            est = ", ".join(bp.get(plans.get(r["stages"]), {}).get("stage_memory_estimates", []))
        det = r.get("determinism", {})
        det_text = str(det.get("deterministic", "?")).lower() + ("" if det.get("as_asked", True) else " (not as asked)")
        if r.get("exit_code"):
            label += f" (exited {r['exit_code']} after its last step)"
        if r.get("compiled"):
            label += f" ({r['compiled']})"
        if r.get("note"):
            label += f" ({r['note']})"
        optimizer = (r.get("optimizer") or "—").split(" (")[0]
        md.append(f"| {label} | {r.get('adapters', ld)} | {optimizer} | {sec(r.get('s_per_step'))} | "
                  f"{r.get('samples_per_step', 1)} | {mem} | {gib(r.get('allocator_peak_allocated_bytes'))} / "
                  f"{gib(r.get('allocator_peak_reserved_bytes'))} | "
                  f"{est or '—'} | {det_text} | {ratio} |")
    md += ["", "Losses of steps 1 and 2 (Baton in one process, PyTorch eager and torch.compile take one fixed "
           "micro-batch and should agree, bf16 rows to bf16's precision; the coordinator rows train on a synthetic "
           "cache with their own noise draws):", ""]
    md += [f"- {key}: {', '.join(f'{x:.5f}' for x in r.get('losses', []))}" for key, r in bp.items()
           if key.startswith("klein_") and r.get("losses")]
    md += agreement_lines(bp, errors) + stage_lines(bp) + sync_lines(bp) + overhead_lines(bp)
    md += ["", "Determinism per row:", ""]
    md += [f"- {key}: {r['determinism'].get('how')}" for key, r in bp.items()
           if key.startswith("klein_") and r.get("determinism")]
    for key in ("klein_plan_1s", "klein_plan_2s", "dev_plan_int8_2x24GB"):
        r = bp.get(key)
        if r:
            table = r["output"].split("\n(compute =")[0].strip()  # the table and its verdict, not the legend
            md += ["", f"`baton {r['cmd']}`:", "", "```", table[-1800:], "```"]

    ex = bp.get("dev_extrapolation")
    width = ex["D"] if ex else 6144
    md += ["", f"## FLUX.2-dev slice (D = {width}{'' if width == 6144 else ', --small'}), Baton 1 process", "",
           "| slice | s/step | peak allocated |",
           "|---|---|---|"]
    for key, label in (("dev_baton_1p_1x2", "1 double + 2 single"), ("dev_baton_1p_2x4", "2 double + 4 single")):
        r = bp.get(key, {})
        md.append(f"| {label} | {sec(r.get('s_per_step'))} | {gib(r.get('allocator_peak_allocated_bytes'))} |")
    if ex:
        md += ["", f"Per double block {ex['seconds_per_double_block']:.4f} s and {gib(ex['bytes_per_double_block'])}; "
               f"per single block {ex['seconds_per_single_block']:.4f} s and {gib(ex['bytes_per_single_block'])}. "
               f"Whole model (8 + 48 blocks): {ex['full_model_s_per_step']:.3f} s/step and "
               f"{gib(ex['full_model_peak_bytes'])} on one device, {gib(ex['full_model_peak_bytes_per_stage_of_2'])} "
               f"per stage of two. {ex['note']}."]

    md += offload_lines(bp, errors, skipped) + trace_lines(traces)
    md += ["", "## Stage-to-stage transfer (loopback gRPC)", ""]
    if transfer:
        md += [f"device path: {transfer.get('device')} -> pinned host -> gRPC -> pinned host -> {transfer.get('device')}",
               "", "| MiB | gRPC GB/s | raw TCP GB/s | device path GB/s |", "|---|---|---|---|"]
        md += [f"| {r['mib']} | {r['grpc_gbytes_per_s']:.3f} | {r['tcp_gbytes_per_s']:.3f} | "
               f"{r.get('device_gbytes_per_s', 0):.3f} |" for r in transfer.get("per_size", [])]
    else:
        md.append("no result (see transfer.log)")
    if bench.get("errors"):
        md += ["", "## Errors", ""] + [f"- **{k}**: `{v[-700:]}`" for k, v in bench["errors"].items()]
    if bench.get("skipped"):
        md += ["", "## Skipped", ""] + [f"- **{k}**: {v}" for k, v in bench["skipped"].items()]
    with open(os.path.join(a.out, "gpu_report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md[:14]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

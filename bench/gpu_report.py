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
                              "ctest_cuda": "ctest.log", "transfer": "transfer.log", "bench": "bench.log"}.get(name)})
    bench = {}
    try:
        bench = json.loads(read(os.path.join(a.work, "bench.json")) or "{}")
    except ValueError:
        pass
    transfer = last_json_line(read(os.path.join(a.out, "transfer.log")), '"bench":"transfer"')
    ctest = ctest_results(read(os.path.join(a.out, "ctest.log")))
    env = read(os.path.join(a.work, "env.txt"))
    failed = [x["part"] for x in parts if not x["ok"]] + [f"bench.{k}" for k in bench.get("errors", {})] + \
        [f"bench.{k} (skipped)" for k in bench.get("skipped", {})]
    report = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M:%S"), "device": a.device,
              "mode": "cpu rehearsal (--small)" if a.small == "1" else f"{a.device} real sizes",
              "wall_seconds": a.wall, "deadline_seconds": a.deadline, "parts": parts, "failed": failed, "env": env,
              "ctest_cuda": ctest, "transfer": transfer, "bench": bench}
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
           "allocated | `baton plan` estimate per stage | deterministic | PyTorch eager s/step ÷ this |",
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
                  f"{r.get('samples_per_step', 1)} | {mem} | {gib(r.get('allocator_peak_allocated_bytes'))} | "
                  f"{est or '—'} | {det_text} | {ratio} |")
    md += ["", "Losses of steps 1 and 2 (Baton in one process, PyTorch eager and torch.compile take one fixed "
           "micro-batch and should agree, bf16 rows to bf16's precision; the coordinator rows train on a synthetic "
           "cache with their own noise draws):", ""]
    md += [f"- {key}: {', '.join(f'{x:.5f}' for x in r.get('losses', []))}" for key, r in bp.items()
           if key.startswith("klein_") and r.get("losses")]
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

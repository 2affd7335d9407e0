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
    failed = [x["part"] for x in parts if not x["ok"]] + [f"bench.{k}" for k in bench.get("errors", {})]
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
           "text tokens.", "",
           "| run | s/step | peak device memory | `baton plan` estimate per stage | PyTorch eager s/step ÷ this |",
           "|---|---|---|---|---|"]
    eager = bp.get("klein_pytorch_eager", {}).get("s_per_step")
    rows = [("Baton, 1 stage, 1 process (train-local's step)", "klein_baton_1p"),
            ("Baton coordinator, 1 stage", "klein_coordinator_1s"),
            ("Baton coordinator, 2 stages on one device", "klein_coordinator_2s"),
            ("PyTorch eager (diffusers + peft)", "klein_pytorch_eager"),
            ("PyTorch torch.compile", "klein_pytorch_compile")]
    for label, key in rows:
        r = bp.get(key)
        if r is None:
            md.append(f"| {label} | {'FAILED' if key in bench.get('errors', {}) else 'not run'} | — | — | — |")
            continue
        if "peak_device_mib_per_process" in r:
            mem = ", ".join(f"{m / 1024:.2f} GiB" for m in r["peak_device_mib_per_process"]) or "—"
            mem += " (per process, nvidia-smi)" if r["peak_device_mib_per_process"] else ""
        else:
            peak = r.get("peak_device_allocated_bytes")
            mem = f"{gib(peak)} allocated" if peak else "— (cpu)" if a.device == "cpu" else "—"
        ratio = f"{eager / r['s_per_step']:.2f}" if eager and r.get("s_per_step") else "—"
        plan = {"klein_coordinator_1s": "klein_plan_1s", "klein_coordinator_2s": "klein_plan_2s"}.get(key)
        est = ", ".join(bp.get(plan, {}).get("stage_memory_estimates", [])) if plan else ""
        if r.get("exit_code"):
            label += f" (exited {r['exit_code']} after its last step)"
        md.append(f"| {label} | {sec(r.get('s_per_step'))} | {mem} | {est or '—'} | {ratio} |")
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
        md.append(f"| {label} | {sec(r.get('s_per_step'))} | {gib(r.get('peak_device_allocated_bytes'))} |")
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
        md += ["", "## Errors", ""] + [f"- **{k}**: `{v[-500:]}`" for k, v in bench["errors"].items()]
    with open(os.path.join(a.out, "gpu_report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md[:14]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# The demo job (configs/jobs/demo.yaml: 60 steps, 4 micro-batches, validation and samples) trained by
# `coordinator --stages 2` as one pipeline and as 2 replicas of 2 stages (replica_split: equal, so that the split is
# 2 + 2 at every step), on the demo's pipeline and cache (scripts/demo.sh makes out/demo). Prints the loss curves side
# by side every 10 steps, the largest relative and absolute LoRA difference, and the validation losses.
#   bench/replicas_demo.sh      (after scripts/demo.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
[ -d out/demo/pipeline ] && [ -d out/demo/cache ] || { echo "run scripts/demo.sh first (out/demo)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/baton_replicas_demo.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
sed 's/^schedule: 1f1b/schedule: 1f1b\nreplica_split: equal/' configs/jobs/demo.yaml >"$OUT/demo.yaml"
for r in 1 2; do
  t0=$(date +%s.%N)
  "$BIN/coordinator" --stages 2 --replicas $r --job "$OUT/demo.yaml" --output "$OUT/r$r" >"$OUT/r$r.log" 2>&1 ||
    { tail -20 "$OUT/r$r.log" >&2; exit 1; }
  echo "replicas $r: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s wall"
done
.venv/bin/python - "$OUT" <<'PY'
import json, sys
from safetensors.torch import load_file
out = sys.argv[1]
logs = {r: [json.loads(l) for l in open(f"{out}/r{r}/train_log.jsonl") if l.strip()] for r in (1, 2)}
steps = {r: {x["step"]: x for x in logs[r] if "loss" in x and "event" not in x} for r in (1, 2)}
val = {r: {x["step"]: x["validation_loss"]["mean"] for x in logs[r] if x.get("event") == "validation"} for r in (1, 2)}
print("| step | loss, 1 replica | loss, 2 replicas | validation, 1 | validation, 2 |")
print("|---|---|---|---|---|")
for s in [1] + list(range(10, 61, 10)):
    v1, v2 = val[1].get(s), val[2].get(s)
    fv = lambda v: f"{v:.6f}" if v is not None else ""
    print(f"| {s} | {steps[1][s]['loss']:.6f} | {steps[2][s]['loss']:.6f} | {fv(v1)} | {fv(v2)} |")
a, b = load_file(f"{out}/r1/lora.safetensors"), load_file(f"{out}/r2/lora.safetensors")
rel = max(((a[k] - b[k]).abs().max() / a[k].abs().max().clamp_min(1e-12)).item() for k in a)
ab = max((a[k] - b[k]).abs().max().item() for k in a)
print(f"LoRA after 60 steps, {len(a)} tensors: largest difference {ab:.3g} absolute, {rel:.3g} relative "
      "(to each tensor's largest magnitude)")
print("splits of 2 replicas:", sorted({tuple(x.get("replica_micro_batches", [])) for x in steps[2].values()}))
PY

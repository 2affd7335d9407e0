#!/usr/bin/env bash
# The demo job (configs/jobs/demo.yaml) trained twice with train-local: quantize none and quantize int8 (and fp8),
# then the final losses compared (target: int8 within 2 % of none). Needs out/demo/pipeline and out/demo/cache,
# which scripts/demo.sh writes. Last line: JSON with both losses and the relative differences.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
OUT=out/quant_bench
for need in out/demo/pipeline out/demo/cache; do
  [[ -e $need ]] || { echo "missing $need: run scripts/demo.sh first" >&2; exit 1; }
done
rm -rf "$OUT" && mkdir -p "$OUT"
for q in none int8 fp8; do
  { cat configs/jobs/demo.yaml; echo "quantize: $q"; } > "$OUT/$q.yaml"
  echo "+ $BIN/baton train-local --job $OUT/$q.yaml --output $OUT/$q"
  "$BIN/baton" train-local --job "$OUT/$q.yaml" --output "$OUT/$q" | tail -1
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def losses(q):
    return [json.loads(l)["loss"] for l in open(f"{out}/{q}/train_log.jsonl")]
res = {}
for q in ("none", "int8", "fp8"):
    l = losses(q)
    res[q] = {"final": l[-1], "mean_last10": sum(l[-10:]) / 10}
for q in ("int8", "fp8"):
    for k in ("final", "mean_last10"):
        res[q][f"{k}_rel_diff"] = (res[q][k] - res["none"][k]) / res["none"][k]
for q in ("none", "int8", "fp8"):
    print(f"quantize {q:4s}: final loss {res[q]['final']:.5f}, mean of last 10 steps {res[q]['mean_last10']:.5f}")
print(json.dumps(res))
PY

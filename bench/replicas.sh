#!/usr/bin/env bash
# Data-parallel replicas (stage_driver/replica_set.h) on this machine's cores: one FLUX.2 LoRA job (D 384, 2 double +
# 4 single blocks, 256 image + 64 text tokens, m = 8 micro-batches of 1, rank 16 all-linear) trained by
# `coordinator --stages 1` over `stage_worker --listen` processes of 1 compute thread each (--workers, --insecure on
# loopback), ROUNDS times each way, alternating:
#   1x1        one replica (worker A)
#   2x1        two replicas (A, B), replica_split: speed
# then with worker B slowed to half a core (a cgroup v1 CPU quota of 50 ms per 100 ms: root, /sys/fs/cgroup/cpu):
#   2x1-speed  micro-batches dealt in proportion to measured speed
#   2x1-equal  replica_split: equal (4 + 4)
# and 1x1 again on A alone. Each run: STEPS steps, the median samples/s over the steps after the first 2 (the first
# deals evenly: nothing measured yet). Prints a table, the ratios, and one JSON line. Fresh workers for every run.
#   bench/replicas.sh [ROUNDS] [STEPS]     (default 3 8)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${BUILD_DIR:-build}/bin")
ROUNDS=${1:-3}
STEPS=${2:-8}
OUT=$(mktemp -d /tmp/baton_replicas.XXXXXX)
CG=/sys/fs/cgroup/cpu/baton_bench_slow
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -d "$CG" ] && { for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do echo "$p" >/sys/fs/cgroup/cpu/cgroup.procs; done; rmdir "$CG"; }
  rm -rf "$OUT"
}
trap cleanup EXIT
mkdir -p "$CG"
echo 100000 >"$CG/cpu.cfs_period_us"
echo 50000 >"$CG/cpu.cfs_quota_us"

python3 - "$OUT/config.json" <<'PY'
import json, sys
json.dump({"_class_name": "Flux2Transformer2DModel", "attention_head_dim": 64, "axes_dims_rope": [16, 16, 16, 16],
           "eps": 1e-06, "guidance_embeds": True, "in_channels": 128, "joint_attention_dim": 256, "mlp_ratio": 3.0,
           "num_attention_heads": 6, "num_layers": 2, "num_single_layers": 4, "out_channels": None, "patch_size": 1,
           "rope_theta": 2000, "timestep_guidance_channels": 256}, open(sys.argv[1], "w"))
PY
"$BIN/baton" init-weights --config "$OUT/config.json" --out "$OUT/model" >/dev/null
"$BIN/baton" synthetic-cache --config "$OUT/model/config.json" --out "$OUT/cache" --samples 16 --grids 16x16 \
  --text-len 64 --seed 1 >/dev/null

worker() {  # $1: name, $2: "slow" to start it in the CPU-quota cgroup; sets ADDR once it is listening
  if [ "${2:-}" = slow ]; then
    (echo $BASHPID >"$CG/cgroup.procs" && exec "$BIN/stage_worker" --listen 127.0.0.1:0 --insecure --model_root "$OUT") \
      >"$OUT/$1.log" 2>&1 &
  else
    "$BIN/stage_worker" --listen 127.0.0.1:0 --insecure --model_root "$OUT" >"$OUT/$1.log" 2>&1 &
  fi
  PIDS+=($!)
  for _ in $(seq 1 300); do
    grep -qs LISTENING "$OUT/$1.log" && break
    sleep 0.1
  done
  ADDR=$(sed -n 's/^LISTENING //p' "$OUT/$1.log")
}

run() {  # $1: label, $2: replicas, $3: replica_split, $4: "slow" for a half-speed worker B; prints samples/s
  local label=$1 replicas=$2 split=$3 n=$((RUN_N += 1))
  worker "a$n"
  local workers=$ADDR
  if [ "$replicas" = 2 ]; then
    worker "b$n" "${4:-}"
    workers="$workers,$ADDR"
  fi
  printf 'model: %s/model\ndataset: %s/cache\nlora: {rank: 16, alpha: 16, targets: all-linear}\nsteps: %s\n' \
    "$OUT" "$OUT" "$STEPS" >"$OUT/job$n.yaml"
  printf 'batch_size: 8\nmicro_batches: 8\nschedule: 1f1b\nrecompute: false\nseed: 1\nthreads: 1\n' >>"$OUT/job$n.yaml"
  printf 'replicas: %s\nreplica_split: %s\n' "$replicas" "$split" >>"$OUT/job$n.yaml"
  "$BIN/coordinator" --stages 1 --replicas "$replicas" --workers "$workers" --insecure --job "$OUT/job$n.yaml" \
    --output "$OUT/run$n" >"$OUT/run$n.log" 2>&1 || { cat "$OUT/run$n.log" >&2; exit 1; }
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${PIDS[@]}" 2>/dev/null || true
  PIDS=()
  python3 - "$OUT/run$n/train_log.jsonl" "$label" >>"$OUT/results.tsv" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "samples_per_second" in r][2:]
split = rows[-1].get("replica_micro_batches", [8])
print(f"{sys.argv[2]}\t{statistics.median(r['samples_per_second'] for r in rows):.4f}\t{'+'.join(map(str, split))}")
PY
}
RUN_N=0
: >"$OUT/results.tsv"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run 1x1 1 speed; run 2x1 2 speed; else run 2x1 2 speed; run 1x1 1 speed; fi
  run 2x1-speed 2 speed slow
  run 2x1-equal 2 equal slow
done
python3 - "$OUT/results.tsv" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)" <<'PY'
import collections, json, statistics, sys
by, splits = collections.defaultdict(list), {}
for line in open(sys.argv[1]):
    label, sps, split = line.split("\t")
    by[label].append(float(sps))
    splits[label] = split.strip()
med = {k: statistics.median(v) for k, v in by.items()}
print(f"machine: {sys.argv[3]}, {sys.argv[2]} cores; samples/s (median over rounds of each run's median step)")
print("| run | samples/s | runs | last split |")
print("|---|---|---|---|")
for k in ("1x1", "2x1", "2x1-speed", "2x1-equal"):
    print(f"| {k} | {med[k]:.3f} | {', '.join(f'{x:.3f}' for x in by[k])} | {splits[k]} |")
ratios = {"2x1 / 1x1": med["2x1"] / med["1x1"], "2x1-speed / 2x1-equal (B at half speed)": med["2x1-speed"] / med["2x1-equal"],
          "2x1-speed / 1x1 (the fast replica alone)": med["2x1-speed"] / med["1x1"]}
for k, v in ratios.items():
    print(f"{k}: {v:.2f}x")
print(json.dumps({"samples_per_second": med, "ratios": ratios, "splits": splits}))
PY

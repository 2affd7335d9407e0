#!/usr/bin/env bash
# The coordinator's encode step with 2 encoder workers (encode: {encoder_workers: [A, B]}: shares 0/2 and 1/2 at once,
# then the merge into the job's cache) against 1 (encode: {encoder_worker: A}), each worker an `encoder_worker --listen`
# process with 1 thread, on the bundled sample data with the tiny FLUX.2 pipeline; each way ROUNDS times into fresh
# caches, alternating which goes first, timed by the step's own "cache ... ready ... in T s" line (a 1-step training
# run follows each, untimed). Checks the 2-worker cache equals the 1-worker one byte for byte. Usage:
# bench/encode_step_workers.sh [RESOLUTION] [ROUNDS] [DATASET]   (default 1024 3 data/sample)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
RES=${1:-1024}
ROUNDS=${2:-3}
DATA=$(realpath "${3:-data/sample}")
OUT=$(mktemp -d /tmp/baton_encode_step.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$OUT"' EXIT
"$BIN/baton" init-weights --pipeline tiny --out "$OUT/pipeline" >/dev/null
start() {  # $1: name; prints host:port once listening
  "$BIN/encoder_worker" --model "$OUT/pipeline" --listen 127.0.0.1:0 --insecure --threads 1 --cache_root "$OUT" \
    >"$OUT/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do
    grep -qs LISTENING "$OUT/$1.log" && break
    sleep 0.1
  done
}
start w0
start w1
W0=$(sed -n 's/^LISTENING //p' "$OUT/w0.log")
W1=$(sed -n 's/^LISTENING //p' "$OUT/w1.log")
run() {  # $1: cache name, $2: the encode key; prints the step's seconds
  cat >"$OUT/$1.yaml" <<JOB
model: $OUT/pipeline
dataset: $OUT/$1
encode: {images: $DATA, $2, resolution: $RES}
steps: 1
batch_size: 1
micro_batches: 1
JOB
  "$BIN/coordinator" --job "$OUT/$1.yaml" --stages 1 --insecure --output "$OUT/run_$1" >"$OUT/$1.out" 2>&1
  grep "^cache $OUT/$1 ready" "$OUT/$1.out" | sed 's/.* in \([0-9.]*\) s$/\1/'
}
for r in $(seq 1 "$ROUNDS"); do
  one() { run "one_$r" "encoder_worker: '$W0'"; }
  two() { run "two_$r" "encoder_workers: ['$W0', '$W1']"; }
  if (( r % 2 )); then a=$(one); b=$(two); else b=$(two); a=$(one); fi
  diff -r "$OUT/one_$r" "$OUT/two_$r" >/dev/null || { echo "round $r: 2 workers' cache differs from 1's" >&2; exit 1; }
  echo "round $r: 1 worker x 1 thread ${a} s; 2 workers x 1 thread (+ merge) ${b} s ($(echo "scale=2; $a / $b" | bc)x)"
  grep -h "^cache .* ready" "$OUT/one_$r.out" "$OUT/two_$r.out" | sed "s|$OUT/||; s/^/  /"
done
echo "$DATA, resolution $RES; $(lscpu | grep 'Model name' | sed 's/  */ /g'); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

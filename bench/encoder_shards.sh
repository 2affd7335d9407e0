#!/usr/bin/env bash
# Several encoder workers on one dataset (issue 26): 2 encoder_worker processes x 1 thread (--shard 0/2 and 1/2 at
# once, then --merge) against 1 worker x 1 thread, on the bundled sample data (data/sample) with the tiny FLUX.2
# pipeline, each way ROUNDS times into fresh cache folders, alternating which goes first. Checks that the merged
# cache is byte for byte the single worker's. Usage: bench/encoder_shards.sh [RESOLUTION] [ROUNDS] [DATASET]
# (default 1024 3 data/sample).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
RES=${1:-1024}
ROUNDS=${2:-3}
DATA=${3:-data/sample}
OUT=$(mktemp -d /tmp/baton_encoder_shards.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
"$BIN/baton" init-weights --pipeline tiny --out "$OUT/pipeline" >/dev/null
worker() { "$BIN/encoder_worker" --dataset "$DATA" --model "$OUT/pipeline" --resolution "$RES" --threads 1 "$@"; }
now() { date +%s.%N; }
one() {  # $1: round
  local t0; t0=$(now)
  worker --cache "$OUT/one_$1" >"$OUT/one_$1.log"
  echo "$(now) - $t0" | bc
}
two() {
  local t0; t0=$(now)
  worker --cache "$OUT/s0_$1" --shard 0/2 >"$OUT/s0_$1.log" &
  local p0=$!
  worker --cache "$OUT/s1_$1" --shard 1/2 >"$OUT/s1_$1.log" &
  local p1=$!
  wait "$p0" "$p1"
  "$BIN/encoder_worker" --merge "$OUT/s0_$1,$OUT/s1_$1" --cache "$OUT/merged_$1" >"$OUT/merge_$1.log"
  echo "$(now) - $t0" | bc
}
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then a=$(one "$r"); b=$(two "$r"); else b=$(two "$r"); a=$(one "$r"); fi
  diff -r "$OUT/one_$r" "$OUT/merged_$r" >/dev/null || { echo "round $r: merged cache differs from 1 worker's" >&2; exit 1; }
  echo "round $r: 1 worker x 1 thread ${a} s; 2 workers x 1 thread + merge ${b} s ($(echo "scale=2; $a / $b" | bc)x)"
  sed -n 's/^\(encoded.*samples[^;]*\) in \([0-9.]* s\).*/  \1 in \2/p' "$OUT/one_$r.log" "$OUT/s0_$r.log" "$OUT/s1_$r.log"
  sed 's/^/  /; s/; cache:.*//' "$OUT/merge_$r.log"
done
echo "$DATA, resolution $RES; $(lscpu | grep 'Model name' | sed 's/  */ /g'); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

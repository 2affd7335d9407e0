#!/usr/bin/env bash
# Every Wan demo kind end to end at the demo size, one after the other: a tiny pipeline of the kind
# (`baton init-weights --pipeline ...`), the bundled clips of data/wan_sample/ encoded by encoder_worker (64x64, 9
# frames), then `coordinator --stages 2` on the kind's demo job (20 steps, sample videos every 10 steps). Prints each
# run's median seconds per step, its loss from the first to the last step and the seconds per sample video.
# Usage: bench/wan_demos.sh [OUT_DIR]   (default /tmp/baton-wan-demos; build/ must be built)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/baton-wan-demos}
BIN=${BUILD_DIR:-build}/bin

run() {  # name, tiny pipeline, demo job, text tokens, extra encoder flag ("" for none), expert ("" for none)
  local d="$OUT/$1"
  rm -rf "$d" && mkdir -p "$d"
  "$BIN/baton" init-weights --pipeline "$2" --out "$d/pipeline" >/dev/null
  "$BIN/encoder_worker" --dataset data/wan_sample --cache "$d/cache" --model "$d/pipeline" --resolution 64 \
    --max_frames 9 --max_sequence_length "$4" --threads 1 ${5:+"$5"} >/dev/null
  sed "s#out/$3#$d#" "configs/jobs/$3.yaml" > "$d/job.yaml"
  [ -n "$6" ] && echo "expert: $6" >> "$d/job.yaml"
  "$BIN/coordinator" --stages 2 --job "$d/job.yaml" --output "$d/out" > "$d/coordinator.log" 2>&1
  python3 - "$1" "$d" <<'PY'
import glob, json, re, statistics, sys
name, d = sys.argv[1], sys.argv[2]
for log in sorted(glob.glob(d + "/out/**/train_log.jsonl", recursive=True)):
    steps = [json.loads(line) for line in open(log) if '"step_seconds"' in line]
    run = log[len(d) + 5:-len("train_log.jsonl")].strip("/") or "-"
    print(f"{name:6s} {run:10s} {len(steps):3d} steps  median {statistics.median(s['step_seconds'] for s in steps):.4f} s/step"
          f"  loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}")
per = [float(x) for x in re.findall(r"\(\d+ videos, ([0-9.]+) s per sample\)", open(d + "/coordinator.log").read())]
if per:
    print(f"{name:6s} samples    {len(per)} renderings, median {statistics.median(per):.2f} s per sample video")
PY
}

run t2v wan-tiny wan-demo 32 "" ""
run i2v wan-i2v-tiny wan-i2v-demo 32 "" ""
run ti2v wan-ti2v-tiny wan-i2v-demo 32 --conditioning=first-frame ""
run i2v21 wan-i2v-2.1-tiny wan-i2v-demo 512 "" ""
run a14b wan-i2v-a14b-tiny wan-i2v-demo 32 "" both

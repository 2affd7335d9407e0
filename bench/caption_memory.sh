#!/usr/bin/env bash
# The encoder worker's peak resident memory (VmHWM, which its summary prints as "peak RSS") with one oversized caption
# (issue 35): the tiny FLUX.2 pipeline encodes one 64x64 image whose caption is SIZE_MB of words, then the same image
# with a short caption, each in a fresh process and cache. Before issue 35 a 100 MB caption was tokenized whole
# (2.42 GB against 0.55 GB); now it is refused by its size (kMaxCaptionBytes) before a byte is read.
# Usage: bench/caption_memory.sh [SIZE_MB] [ENCODER_WORKER]   (default 100, $BUILD_DIR/bin/encoder_worker)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
SIZE_MB=${1:-100}
WORKER=${2:-$BIN/encoder_worker}
OUT=$(mktemp -d /tmp/baton_caption_memory.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
"$BIN/baton" init-weights --pipeline tiny --out "$OUT/pipeline" >/dev/null
for kind in long short; do
  mkdir -p "$OUT/$kind"
  cp data/sample/red_circle.png "$OUT/$kind/a.png"
done
echo "a red circle on a white background" >"$OUT/short/a.txt"
# Words, as a caption has them (a run without spaces would be one pre-token).
yes "a red circle on a white background," | head -c $((SIZE_MB << 20)) >"$OUT/long/a.txt" || true  # yes ends on SIGPIPE
for kind in short long; do
  set +e
  /usr/bin/env "$WORKER" --dataset "$OUT/$kind" --cache "$OUT/${kind}_cache" --model "$OUT/pipeline" \
    --resolution 64 --max_sequence_length 128 --threads 1 >"$OUT/$kind.log" 2>&1
  code=$?
  set -e
  peak=$(sed -n 's/.*peak RSS \([0-9]*\) MiB.*/\1/p' "$OUT/$kind.log")
  summary=$(grep -o 'encoded [0-9]*, kept [0-9]* unchanged, [0-9]* failed of [0-9]* samples in [0-9.]* s' \
    "$OUT/$kind.log" || true)
  size=$(stat -c %s "$OUT/$kind/a.txt")
  echo "caption $size bytes: peak RSS ${peak} MiB, exit $code; $summary"
  grep '^error:' "$OUT/$kind.log" | cut -c1-160 || true
done

#!/usr/bin/env bash
# The Wan jobs, end to end (the README's main demo stays FLUX.2): set up; write a tiny Wan pipeline (random weights in
# the real layouts); encode the bundled clips of data/wan_sample/ with its Wan VAE and umT5 encoder (encoder_worker;
# for image-to-video also each clip's first-frame conditioning); then train a LoRA with the transformer split over
# two stage-worker processes. `scripts/wan_demo.sh` trains Wan 2.1 T2V (configs/jobs/wan-demo.yaml);
# `scripts/wan_demo.sh i2v` a Wan 2.2 I2V-A14B-kind model on first-frame conditioning (configs/jobs/wan-i2v-demo.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-t2v}
case "$variant" in
  t2v) name=wan-demo; pipeline=wan-tiny ;;
  i2v) name=wan-i2v-demo; pipeline=wan-i2v-tiny ;;
  *) echo "usage: scripts/wan_demo.sh [t2v|i2v]" >&2; exit 2 ;;
esac
scripts/setup.sh
BIN=${BUILD_DIR:-build}/bin
run() { echo "+ $*"; "$@"; }

rm -rf "out/$name"
run "$BIN/baton" init-weights --pipeline "$pipeline" --out "out/$name/pipeline" --seed 0
run "$BIN/encoder_worker" --dataset data/wan_sample --cache "out/$name/cache" --model "out/$name/pipeline" \
  --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1
run "$BIN/coordinator" --stages 2 --job "configs/jobs/$name.yaml" --output "out/$name"
echo "LoRA (diffusers/PEFT format): out/$name/lora.safetensors; train log: out/$name/train_log.jsonl"

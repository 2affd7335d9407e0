#!/usr/bin/env bash
# The Wan job, end to end (the README's main demo stays FLUX.2): set up; write a tiny Wan 2.1 T2V pipeline (random
# weights in the real layouts); encode the bundled clips of data/wan_sample/ with its Wan VAE and umT5 encoder
# (encoder_worker); then train a LoRA with the transformer split over two stage-worker processes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BIN=${BUILD_DIR:-build}/bin
run() { echo "+ $*"; "$@"; }

rm -rf out/wan-demo
run "$BIN/baton" init-weights --pipeline wan-tiny --out out/wan-demo/pipeline --seed 0
run "$BIN/encoder_worker" --dataset data/wan_sample --cache out/wan-demo/cache --model out/wan-demo/pipeline \
  --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1
run "$BIN/coordinator" --stages 2 --job configs/jobs/wan-demo.yaml --output out/wan-demo
echo "LoRA (diffusers/PEFT format): out/wan-demo/lora.safetensors; train log: out/wan-demo/train_log.jsonl"

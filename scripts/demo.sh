#!/usr/bin/env bash
# The main job, end to end: set up, make a small FLUX.2-shaped model and its training cache, then train a
# LoRA with the transformer split over two stage-worker processes (coordinator --stages 2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BIN=${BUILD_DIR:-build}/bin
export OMP_NUM_THREADS=1
run() { echo "+ $*"; "$@"; }

rm -rf out/demo
# Weights: deterministic random FLUX.2 weights in the diffusers layout (no downloads, ever).
run "$BIN/baton" init-weights --config configs/models/flux2-small.json --out out/demo/model --seed 0
# Data: a synthetic latent/text cache (see README: real images arrive with the encoder worker).
run "$BIN/baton" synthetic-cache --config configs/models/flux2-small.json --out out/demo/cache \
  --samples 32 --grids 8x8,6x10 --text-len 16 --seed 0
# Training: two local stage workers on loopback, 1F1B over 4 micro-batches per step.
run "$BIN/coordinator" --stages 2 --job configs/jobs/demo.yaml --output out/demo

echo
echo "Loss per step (out/demo/train_log.jsonl):"
awk -F'"loss":' 'NR==1 || NR%10==0 { split($2, a, ","); printf "  step %3d  loss %.4f\n", NR, a[1] }' out/demo/train_log.jsonl
echo "LoRA (diffusers/PEFT format): out/demo/lora.safetensors; checkpoints: out/demo/checkpoints/"

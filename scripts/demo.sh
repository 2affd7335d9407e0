#!/usr/bin/env bash
# The main job, end to end: set up; write a tiny FLUX.2 pipeline in the real layouts whose transformer and VAE were
# trained on drawn circles and squares (data/demo_pipeline, made by scripts/make_demo_pipeline.py); encode the bundled
# sample images and captions with its VAE and Mistral-3 text encoder (encoder_worker); then train a LoRA with the
# transformer split over two stage-worker processes (coordinator --stages 2) that teaches it triangles and stripes.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs (scripts/test.sh builds the rest, the tests, in the same build: nothing twice).
BUILD_TARGETS="baton baton-tools encoder_worker coordinator stage_worker" scripts/setup.sh
BIN=${BUILD_DIR:-build}/bin
run() { echo "+ $*"; "$@"; }

rm -rf out/demo
# 1. Weights: a complete tiny pipeline folder (transformer/, vae/, text_encoder/, tokenizer/). No downloads, ever.
run "$BIN/baton" init-weights --pipeline tiny --trained data/demo_pipeline --out out/demo/pipeline --seed 0
# 2. Data: data/sample/*.png + .txt → latents and text embeddings, one cache record per image.
run "$BIN/encoder_worker" --dataset data/sample --cache out/demo/cache --model out/demo/pipeline \
  --resolution 128 --max_sequence_length 128 --threads 1
# 3. Training: two local stage workers on loopback, 1F1B over 4 micro-batches per step.
run "$BIN/coordinator" --stages 2 --job configs/jobs/demo.yaml --output out/demo

echo
echo "Loss per step and validation loss (out/demo/train_log.jsonl):"
awk -F'"step":' '/"event":"validation"/ { split($2, s, ","); split($0, m, "\"mean\":"); split(m[2], v, "}");
                   printf "  step %3d  validation %.4f\n", s[1], v[1]; next }
                 /"loss":/ { split($2, s, ","); split($0, l, "\"loss\":"); split(l[2], v, ",");
                   if (s[1] == 1 || s[1] % 10 == 0) printf "  step %3d  loss       %.4f\n", s[1], v[1] }' \
  out/demo/train_log.jsonl
echo "Sample images (before training the pipeline draws its circles and squares, not triangles or stripes):"
for d in out/demo/samples/step-*/; do echo "  ${d}contact_sheet.png"; done
echo "LoRA (diffusers/PEFT format): out/demo/lora.safetensors; checkpoints: out/demo/checkpoints/"

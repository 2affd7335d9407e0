#!/usr/bin/env bash
# Activation compression on slow links: the same 2-stage LoRA job with wire_dtype none | bf16 | fp8, each
# stage worker in its own network namespace, the namespaces joined by a bridge whose links are shaped with
# `tc ... tbf` (this kernel has tbf but no netem) in both directions; the coordinator stays in the root
# namespace. Stage 0 -> stage 1 traffic therefore crosses two shaped links, like two PCs on one switch.
#
#   sudo bench/bench_wire_netns.sh [--rate 1gbit] [--steps 4] [--dim 512] [--grid 32] [--text 64] [--m 4]
#
# Prints per wire_dtype the median step seconds (after the first step) and the
# final loss; the last line is one JSON object. Needs root (ip netns, tc) and a built tree (build/bin).
# The demo's loss effect is measured separately by `bench/bench_wire_netns.sh --demo-loss` (loopback, no
# shaping: it compares the final loss of the demo job under the three settings).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
RATE=1gbit STEPS=4 DIM=512 GRID=32 TEXT=64 M=4 DEMO_LOSS=false
while (($#)); do
  case $1 in
    --rate) RATE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --grid) GRID=$2; shift 2 ;;
    --text) TEXT=$2; shift 2 ;;
    --m) M=$2; shift 2 ;;
    --demo-loss) DEMO_LOSS=true; shift ;;
    *) echo "bench_wire_netns: unknown argument $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d /tmp/baton-wire.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in 0 1; do ip netns del "bw-s$i" 2>/dev/null || true; done
  ip link del bw-br 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

final_loss() { tail -1 "$1/train_log.jsonl" | sed 's/.*"loss":\([-0-9.e]*\).*/\1/'; }
median_step() {  # median step_seconds over steps 2..N (the first step warms up)
  sed -n '2,$p' "$1/train_log.jsonl" | sed 's/.*"step_seconds":\([0-9.e-]*\).*/\1/' | sort -g |
    awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'
}

if $DEMO_LOSS; then
  # The demo job (scripts/demo.sh's data) under each wire_dtype, on loopback.
  "$BIN/baton" init-weights --pipeline tiny --out "$WORK/pipeline" --seed 0 >/dev/null
  "$BIN/encoder_worker" --dataset data/sample --cache "$WORK/cache" --model "$WORK/pipeline" --resolution 128 \
    --max_sequence_length 128 --threads 1 >/dev/null
  json="{\"bench\":\"wire_demo_loss\""
  for w in none bf16 fp8; do
    sed -e "s|^model: .*|model: $WORK/pipeline|" -e "s|^dataset: .*|dataset: $WORK/cache|" configs/jobs/demo.yaml \
      >"$WORK/demo-$w.yaml"
    echo "wire_dtype: $w" >>"$WORK/demo-$w.yaml"
    "$BIN/coordinator" --stages 2 --job "$WORK/demo-$w.yaml" --output "$WORK/demo-$w" >/dev/null 2>&1
    loss=$(final_loss "$WORK/demo-$w")
    echo "demo wire_dtype=$w final loss $loss"
    json="$json,\"loss_$w\":$loss"
  done
  echo "$json}"
  exit 0
fi

[[ $(id -u) == 0 ]] || { echo "bench_wire_netns: needs root (ip netns, tc)" >&2; exit 1; }
# A model whose activations are worth shaping: D = DIM, 1 double + 1 single block, GRID² image tokens.
cat >"$WORK/config.json" <<JSON
{"_class_name": "Flux2Transformer2DModel", "attention_head_dim": 64, "axes_dims_rope": [16, 16, 16, 16],
 "eps": 1e-06, "guidance_embeds": true, "in_channels": 128, "joint_attention_dim": $DIM, "mlp_ratio": 3.0,
 "num_attention_heads": $((DIM / 64)), "num_layers": 1, "num_single_layers": 1, "out_channels": null,
 "patch_size": 1, "rope_theta": 2000, "timestep_guidance_channels": 256}
JSON
"$BIN/baton" init-weights --config "$WORK/config.json" --out "$WORK/model" --seed 0 >/dev/null
"$BIN/baton" synthetic-cache --config "$WORK/config.json" --out "$WORK/cache" --samples $((M * 2)) \
  --grids "${GRID}x${GRID}" --text-len "$TEXT" --seed 0 >/dev/null

ip link add bw-br type bridge
ip link set bw-br up
ip addr add 10.77.0.1/24 dev bw-br
for i in 0 1; do
  ip netns add "bw-s$i"
  ip link add "bw-v$i" type veth peer name eth0 netns "bw-s$i"
  ip link set "bw-v$i" master bw-br up
  ip netns exec "bw-s$i" ip addr add "10.77.0.1$i/24" dev eth0
  ip netns exec "bw-s$i" ip link set eth0 up
  ip netns exec "bw-s$i" ip link set lo up
  tc qdisc add dev "bw-v$i" root tbf rate "$RATE" burst 256kb latency 100ms
  ip netns exec "bw-s$i" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 100ms
done

# Mutual TLS as deployed (deploy/README.md "Security"): a certificate per namespace address.
"$BIN/baton" certs --out "$WORK/certs" --hosts 10.77.0.10,10.77.0.11 >/dev/null
json="{\"bench\":\"wire_netns\",\"rate\":\"$RATE\",\"dim\":$DIM,\"tokens\":$((GRID * GRID + TEXT)),\"m\":$M"
for w in none bf16 fp8; do
  PIDS=()
  for i in 0 1; do
    ip netns exec "bw-s$i" "$BIN/stage_worker" --listen "10.77.0.1$i:7100" --tls_dir "$WORK/certs/10.77.0.1$i" --threads 1 >"$WORK/stage$i-$w.log" 2>&1 &
    PIDS+=($!)
  done
  cat >"$WORK/job-$w.yaml" <<YAML
model: $WORK/model
dataset: $WORK/cache
lora: {rank: 16, alpha: 16, targets: attention}
steps: $STEPS
batch_size: $M
micro_batches: $M
schedule: 1f1b
recompute: false
seed: 1
threads: 1
wire_dtype: $w
YAML
  "$BIN/coordinator" --stages 2 --workers 10.77.0.10:7100,10.77.0.11:7100 --tls_dir "$WORK/certs/10.77.0.10" --job "$WORK/job-$w.yaml" \
    --output "$WORK/run-$w" >"$WORK/coordinator-$w.log" 2>&1 || { cat "$WORK/coordinator-$w.log" >&2; exit 1; }
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  step=$(median_step "$WORK/run-$w")
  loss=$(final_loss "$WORK/run-$w")
  echo "wire_dtype=$w  rate=$RATE  median step ${step}s  final loss $loss"
  json="$json,\"step_s_$w\":$step,\"loss_$w\":$loss"
done
echo "$json}"

#!/usr/bin/env bash
# The browser view on this machine, in one command: a job service (`coordinator --listen`, two local stage workers
# per job, TLS with a token: `baton certs`, made once into out/certs/) and `baton ui` in front of it. Open the address
# it prints and sign in with the token in out/certs/token; submit configs/jobs/demo.yaml there (scripts/demo.sh made
# the data it names). Ctrl-C stops both; the running job checkpoints and resumes when the service starts again.
# Environment: BUILD_DIR (build), SERVICE (127.0.0.1:7070), LISTEN (127.0.0.1:8675).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
SERVICE=${SERVICE:-127.0.0.1:7070}
LISTEN=${LISTEN:-127.0.0.1:8675}
CERTS=out/certs
for b in baton coordinator stage_worker; do
  [[ -x $BIN/$b ]] || { echo "ui: no $BIN/$b: run scripts/demo.sh first (it builds it)" >&2; exit 1; }
done
[[ -f $CERTS/token ]] || "$BIN/baton" certs --out "$CERTS" --hosts 127.0.0.1 >/dev/null
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true; wait' EXIT
trap 'exit 130' INT TERM
"$BIN/coordinator" --listen "$SERVICE" --stages 2 --output out/jobs --tls_dir "$CERTS/127.0.0.1" \
  --token_file "$CERTS/token" &
pids+=($!)
"$BIN/baton" ui --server "$SERVICE" --listen "$LISTEN" --tls-dir "$CERTS/client" &
pids+=($!)
echo "ui: sign in with the token in $CERTS/token (cat $CERTS/token); Ctrl-C stops"
wait -n

#!/usr/bin/env bash
# bench/snapshots.sh — what a bucket snapshot costs on one node: the time to make
# one in an empty bucket and in a bucket of many objects (it is one number from
# the version sequence: it should not grow), 4 KiB overwrites per second with no
# snapshot and with one (each overwrite then keeps the version it replaces), and
# the time to delete a snapshot that keeps every one of them.
#
# Usage: bench/snapshots.sh [--quick]     (~2 min; --quick: 5 s runs)
#
# Prints a markdown table to stdout and bench-out/snapshots.md. Environment:
# BENCH_DIR (default /var/tmp/cairn-bench), SKIP_BUILD=1, BIN (default
# target/release).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
SECS=$([ "$QUICK" = 1 ] && echo 5 || echo 20)
WORK=${BENCH_DIR:-/var/tmp/cairn-bench}/snapshots
OUT=$ROOT/bench-out
BIN=${BIN:-$ROOT/target/release}
mkdir -p "$WORK" "$OUT/logs"
log() { echo "[snapshots $(date +%T)] $*" >&2; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
[ "${SKIP_BUILD:-0}" = 1 ] || (cd "$ROOT" && cargo build --release --bins >&2)

DATA=$WORK/node; rm -rf "$DATA"
PORT=$(free_port)
export CAIRN_ROOT_ACCESS_KEY=SNAPBENCH$RANDOM$RANDOM
export CAIRN_ROOT_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=')
export AWS_ACCESS_KEY_ID=$CAIRN_ROOT_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CAIRN_ROOT_SECRET_KEY
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
log "nodectl dev up: S3 127.0.0.1:$PORT"
"$BIN/nodectl" dev up --data "$DATA" --s3 "127.0.0.1:$PORT" --resp "127.0.0.1:$(free_port)" \
  --admin "127.0.0.1:$(free_port)" > "$OUT/logs/snapshots-node.log" 2>&1 &
PIDS+=("$!")
wait_port 127.0.0.1 "$PORT" 120 || { log "node did not start"; exit 1; }
for _ in $(seq 600); do [ -f "$DATA/run/dev.json" ] && break; sleep 0.1; done
EP=http://127.0.0.1:$PORT
ctl() { "$BIN/nodectl" "$@" --data "$DATA"; }
ms() { python3 -c "import time; print(int(time.time() * 1000))"; }
# Milliseconds `nodectl ARGS` takes (a process start included, the same for all).
timed() { local t0; t0=$(ms); ctl "$@" >/dev/null; echo $(( $(ms) - t0 )); }
# s3load: 4 KiB PUTs on 8 connections; each worker's keys start again at 0, so a
# second run overwrites what the first wrote.
puts() { "$BIN/s3load" run --endpoint "$EP" --bucket "$1" --size 4KiB --connections 8 \
  --duration "$SECS" --warmup 2 --mix put=1 --json | tail -1 |
  python3 -c 'import json, sys; print(round(json.load(sys.stdin)["put"]["ops_per_s"]))'; }

aws --endpoint-url "$EP" s3 mb s3://empty >/dev/null
EMPTY_MS=$(timed snapshot create root empty s)
log "writing the bucket (4 KiB objects, ${SECS} s)"
FIRST=$(puts many)
OBJECTS=$(ctl status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["objects"])')
log "overwriting with no snapshot"
PLAIN=$(puts many)
FULL_MS=$(timed snapshot create root many s)
log "overwriting with a snapshot that sees every object"
KEPT_OPS=$(puts many)
KEPT=$(ctl snapshot list root many --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["kept_versions"])')
DROP_MS=$(timed snapshot delete root many s)

{
  echo "| what | figure |"
  echo "|---|---|"
  echo "| snapshot create, empty bucket | $EMPTY_MS ms |"
  echo "| snapshot create, bucket of $OBJECTS objects | $FULL_MS ms |"
  echo "| 4 KiB PUTs, new keys (8 connections) | $FIRST ops/s |"
  echo "| 4 KiB overwrites, no snapshot | $PLAIN ops/s |"
  echo "| 4 KiB overwrites, a snapshot keeping each replaced version | $KEPT_OPS ops/s ($(python3 -c "print(f'{$KEPT_OPS / $PLAIN:.2f}')")×) |"
  echo "| snapshot delete, dropping $KEPT kept versions | $DROP_MS ms |"
} | tee "$OUT/snapshots.md"

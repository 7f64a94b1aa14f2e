#!/usr/bin/env bash
# bench/replication.sh — bucket replication between two local nodes (two
# clusters of one, same machine): the destination's own PUT rate for 16 MiB
# objects (the reference), the replication lag while the source takes 16 MiB
# PUTs at full rate, and the catch-up rate once the destination comes back
# after an outage during which the source kept writing (goal: ≥ 50% of the
# destination's own PUT rate).
#
# Usage: bench/replication.sh [--quick]     (~3 min; --quick: 4 s runs)
#
# Each load runs for a fixed time, so what the nodes hold grows with their
# speed: runs are kept short (8 s) so that every version fits the drives
# (versioned buckets keep them all).
#
# Prints a markdown table to stdout and bench-out/replication.md. Environment:
# BENCH_DIR (default /var/tmp/cairn-bench), SKIP_BUILD=1, BIN (default
# target/release).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
SECS=$([ "$QUICK" = 1 ] && echo 4 || echo 8)
WORK=${BENCH_DIR:-/var/tmp/cairn-bench}/replication
OUT=$ROOT/bench-out
BIN=${BIN:-$ROOT/target/release}
mkdir -p "$WORK" "$OUT/logs"
log() { echo "[replication $(date +%T)] $*" >&2; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
[ "${SKIP_BUILD:-0}" = 1 ] || (cd "$ROOT" && cargo build --release --bins >&2)

export CAIRN_ROOT_ACCESS_KEY=REPLBENCH$RANDOM$RANDOM
export CAIRN_ROOT_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=')
export AWS_ACCESS_KEY_ID=$CAIRN_ROOT_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CAIRN_ROOT_SECRET_KEY
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
SRC_DATA=$WORK/source DST_DATA=$WORK/dest
rm -rf "$SRC_DATA" "$DST_DATA"
SRC_PORT=$(free_port) DST_PORT=$(free_port)
DST_PID=""
up() { # DATA PORT NAME
  "$BIN/nodectl" dev up --data "$1" --drive-size 8G --s3 "127.0.0.1:$2" --resp "127.0.0.1:$(free_port)" \
    --nfs "127.0.0.1:$(free_port)" --admin "127.0.0.1:$(free_port)" >> "$OUT/logs/replication-$3.log" 2>&1 &
  PIDS+=("$!")
  wait_port 127.0.0.1 "$2" 120 || { log "$3 node did not start"; exit 1; }
  for _ in $(seq 600); do [ -f "$1/run/dev.json" ] && break; sleep 0.1; done
}
log "two nodes: source 127.0.0.1:$SRC_PORT, destination 127.0.0.1:$DST_PORT"
up "$SRC_DATA" "$SRC_PORT" source
up "$DST_DATA" "$DST_PORT" dest; DST_PID=${PIDS[-1]}
SRC=http://127.0.0.1:$SRC_PORT DST=http://127.0.0.1:$DST_PORT
versioned() { aws --endpoint-url "$1" s3 mb "s3://$2" >/dev/null
  aws --endpoint-url "$1" s3api put-bucket-versioning --bucket "$2" --versioning-configuration Status=Enabled; }
versioned "$DST" replica
versioned "$SRC" origin
echo -n "$CAIRN_ROOT_SECRET_KEY" > "$WORK/secret"
ctl() { "$BIN/nodectl" "$@" --data "$SRC_DATA"; }
ctl replication set root origin --endpoint "$DST" --to-bucket replica \
  --access-key "$CAIRN_ROOT_ACCESS_KEY" --secret-key-file "$WORK/secret" >/dev/null
status() { ctl replication status root origin --json; }
field() { python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
# s3load: 16 MiB PUTs on 8 connections for SECS; prints MB/s.
puts() { "$BIN/s3load" run --endpoint "$1" --bucket "$2" --size 16MiB --connections 8 \
  --duration "$SECS" --warmup 2 --mix put=1 --json | tail -1 |
  python3 -c 'import json, sys; print(round(json.load(sys.stdin)["put"]["mb_per_s"]))'; }
drain() { for _ in $(seq 3000); do [ "$(status | field backlog)" = 0 ] && return 0; sleep 0.2; done; log "backlog never drained"; exit 1; }
ms() { python3 -c "import time; print(int(time.time() * 1000))"; }

log "the destination's own 16 MiB PUT rate"
DIRECT=$(puts "$DST" direct)

log "16 MiB PUTs at the source at full rate, replicating; sampling the lag"
: > "$WORK/lag"
( while :; do status | field lag_ms >> "$WORK/lag"; sleep 0.5; done ) &
SAMPLER=$!
LOADED=$(puts "$SRC" origin)
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true
read -r LAG_P50 LAG_MAX < <(python3 -c '
import sys
v = sorted(int(x) for x in open(sys.argv[1]) if x.strip())
print(v[len(v) // 2] / 1000 if v else 0, v[-1] / 1000 if v else 0)' "$WORK/lag")
T0=$(ms); drain; DRAIN_MS=$(( $(ms) - T0 ))

log "the destination down while the source takes ${SECS} s of 16 MiB PUTs"
kill "$DST_PID"; wait "$DST_PID" 2>/dev/null || true
OUTAGE=$(puts "$SRC" origin)
BACKLOG=$(status | field backlog_bytes)
VERSIONS=$(status | field backlog)
log "the destination back: $VERSIONS versions, $BACKLOG bytes to catch up"
up "$DST_DATA" "$DST_PORT" dest
T0=$(ms); drain; CATCH_MS=$(( $(ms) - T0 ))
CATCH=$(python3 -c "print(round($BACKLOG / 1e6 / ($CATCH_MS / 1000)))")

{
  echo "| what | figure |"
  echo "|---|---|"
  echo "| destination's own 16 MiB PUTs (8 connections) | $DIRECT MB/s |"
  echo "| source's 16 MiB PUTs while replicating | $LOADED MB/s |"
  echo "| replication lag under that load | median $LAG_P50 s, max $LAG_MAX s (drained $DRAIN_MS ms after the load stopped) |"
  echo "| source's 16 MiB PUTs, destination down | $OUTAGE MB/s |"
  echo "| catch-up after the outage: $VERSIONS versions, $((BACKLOG / 1000000)) MB | $CATCH MB/s ($(python3 -c "print(f'{$CATCH / $DIRECT:.2f}')")× the destination's own PUT rate) |"
} | tee "$OUT/replication.md"

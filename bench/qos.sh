#!/usr/bin/env bash
# bench/qos.sh — sharing a node between tenants: tenant B's small-object latency,
# alone and while tenant A saturates the node with 16 MiB PUTs and GETs, with fair
# sharing off (CAIRN_FAIR_SLOTS=0) and on (the default slots).
#
# Usage: bench/qos.sh [--quick]      (~3 min; --quick ~1.5 min)
#
# For each mode it starts target/release/nodectl dev up (4 file drives), makes
# tenants `a` and `b` with a key each, and runs bench/qos.py: B (2 threads, PUT 4 KiB
# then GET it, back to back) alone, then beside A (bench/s3bench.py, 4 threads, 16
# MiB PUTs then GETs). Prints a markdown table (B's p50/p99 alone and loaded, the
# ratio, A's MB/s) to stdout and to bench-out/qos.md; raw lines in bench-out/qos.txt.
#
# Environment: BENCH_DIR (default /var/tmp/cairn-bench), SKIP_BUILD=1, SLOTS_ON=N
# (the fair slots of the "on" run; default: mgmtd's own), LOAD_NICE=N (nice value
# of A's client, default 0; niced, it takes the cores only when the node and B
# leave them idle, as clients on other machines would).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
DUR=$([ "$QUICK" = 1 ] && echo 8 || echo 15)
WORK=${BENCH_DIR:-/var/tmp/cairn-bench}/qos
OUT=$ROOT/bench-out
BIN=$ROOT/target/release
mkdir -p "$WORK" "$OUT/logs"
RAW=$OUT/qos.txt; : > "$RAW"
log() { echo "[qos $(date +%T)] $*" >&2; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

[ "${SKIP_BUILD:-0}" = 1 ] || (cd "$ROOT" && cargo build --release --bins >&2)

for MODE in off on; do
  DATA=$WORK/node-$MODE; rm -rf "$DATA"
  PORT=$(free_port)
  if [ "$MODE" = off ]; then export CAIRN_FAIR_SLOTS=0; elif [ -n "${SLOTS_ON:-}" ]; then export CAIRN_FAIR_SLOTS=$SLOTS_ON; else unset CAIRN_FAIR_SLOTS; fi
  log "fair sharing $MODE: nodectl dev up on 127.0.0.1:$PORT"
  "$BIN/nodectl" dev up --data "$DATA" --s3 "127.0.0.1:$PORT" \
    --resp "127.0.0.1:$(free_port)" --admin "127.0.0.1:$(free_port)" \
    > "$OUT/logs/qos-node-$MODE.log" 2>&1 &
  NP=$!; PIDS+=("$NP")
  wait_port 127.0.0.1 "$PORT" 120 || { log "node did not start"; exit 1; }
  # The S3 port opens before nodectl has written where the admin API is.
  for _ in $(seq 600); do [ -f "$DATA/run/dev.json" ] && break; sleep 0.1; done
  keys() { # TENANT -> ACCESS:SECRET
    "$BIN/nodectl" tenant create "$1" --data "$DATA" >&2
    "$BIN/nodectl" user create "$1" bench --data "$DATA" >&2
    "$BIN/nodectl" key create "$1" bench --json --data "$DATA" \
      | python3 -c 'import json,sys; k=json.load(sys.stdin); print(k["access_key"]+":"+k["secret_key"])'
  }
  A=$(keys a); B=$(keys b)
  python3 "$ROOT/bench/qos.py" --endpoint "http://127.0.0.1:$PORT" --label "$MODE" \
    --probe-keys "$B" --load-keys "$A" --duration "$DUR" --load-nice "${LOAD_NICE:-0}" \
    | tee -a "$RAW" >&2
  "$BIN/nodectl" tenant show b --data "$DATA" >> "$OUT/logs/qos-node-$MODE.log" 2>&1 || true
  kill "$NP"; wait "$NP" 2>/dev/null || true
  rm -rf "$DATA"
done

python3 - "$RAW" <<'PY' | tee "$OUT/qos.md"
import re, sys
r = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4 or f[0] != "RESULT":
        continue
    kv = dict(x.split("=", 1) for x in f[4:] if "=" in x)
    if f[1] == "qos":
        r[(f[2], f[3])] = kv
    elif f[1] == "s3":
        r[(f[2].removesuffix("-load"), "a-" + f[3])] = kv
print("| fair sharing | B alone p50 / p99 ms | B beside A p50 / p99 ms | B p99 ratio (goal <= 2) | B ops/s alone / beside | A 16 MiB PUT / GET MB/s |")
print("|---|---|---|---|---|---|")
for mode in ("off", "on"):
    a, l = r.get((mode, "alone")), r.get((mode, "loaded"))
    if not a or not l:
        print(f"| {mode} | missing | | | | |"); continue
    ratio = float(l["p99ms"]) / max(float(a["p99ms"]), 1e-9)
    ap, ag = r.get((mode, "a-put"), {}), r.get((mode, "a-get"), {})
    print(f"| {mode} | {a['p50ms']} / {a['p99ms']} | {l['p50ms']} / {l['p99ms']} | {ratio:.2f} | "
          f"{a['ops']} / {l['ops']} | {ap.get('mbps', '?')} / {ag.get('mbps', '?')} |")
PY

#!/usr/bin/env bash
# bench/qos.sh — sharing a node between tenants: tenant B's small-object latency,
# alone and while tenant A saturates the node with 16 MiB PUTs and GETs, with fair
# sharing off (CAIRN_FAIR_SLOTS=0) and on (the default slots).
#
# Usage: bench/qos.sh [--quick]      (~2 min; --quick ~1 min)
#
# For each mode it starts target/release/nodectl dev up (4 file drives), makes
# tenants `a` and `b` with a key each, and drives them with bench/s3load (Rust,
# SigV4 UNSIGNED-PAYLOAD: the clients cost the node's 2 cores little, unlike boto3
# hashing 16 MiB bodies): B (2 connections, PUTs of new 4 KiB objects and GETs of
# them, half each) alone, then beside A (4 connections, 16 MiB PUTs and GETs, half
# each). Prints a markdown table (B's PUT and GET p50/p99 alone and loaded, the
# ratios, A's MB/s) to stdout and to bench-out/qos.md; s3load's JSON in
# bench-out/qos.txt.
#
# Environment: BENCH_DIR (default /var/tmp/cairn-bench), SKIP_BUILD=1, SLOTS_ON=N
# (the fair slots of the "on" run; default: mgmtd's own), LOAD_NICE=N (nice value
# of A's client, default 0; niced, it takes the cores only when the node and B
# leave them idle, as clients on other machines would), MODES="on" (run only
# those modes), REACTORS=N (datapathd's reactors). The node's mgmtd and
# datapathd logs are kept in bench-out/logs/qos-*-MODE.log.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
DUR=$([ "$QUICK" = 1 ] && echo 10 || echo 20)
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
[ -x "$BIN/s3load" ] || { log "no $BIN/s3load: cargo build --release -p cairn-s3load"; exit 1; }

for MODE in ${MODES:-off on}; do
  DATA=$WORK/node-$MODE; rm -rf "$DATA"
  PORT=$(free_port)
  if [ "$MODE" = off ]; then export CAIRN_FAIR_SLOTS=0; elif [ -n "${SLOTS_ON:-}" ]; then export CAIRN_FAIR_SLOTS=$SLOTS_ON; else unset CAIRN_FAIR_SLOTS; fi
  log "fair sharing $MODE: nodectl dev up on 127.0.0.1:$PORT"
  "$BIN/nodectl" dev up --data "$DATA" --s3 "127.0.0.1:$PORT" ${REACTORS:+--reactors "$REACTORS"} \
    --resp "127.0.0.1:$(free_port)" --nfs "127.0.0.1:$(free_port)" --admin "127.0.0.1:$(free_port)" \
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
  s3load() { # ACCESS:SECRET LABEL ARGS... -> one JSON line, tagged, in $RAW
    local keys=$1 label=$2; shift 2
    AWS_ACCESS_KEY_ID=${keys%%:*} AWS_SECRET_ACCESS_KEY=${keys#*:} \
      "$BIN/s3load" run --endpoint "http://127.0.0.1:$PORT" --json "$@" \
      | tee -a "$OUT/logs/qos-s3load-$MODE.log" \
      | python3 -c 'import json,sys; l=[x for x in sys.stdin if x.startswith("{")]; d=json.loads(l[-1]); d["label"]=sys.argv[1]; print(json.dumps(d))' "$MODE-$label" \
      >> "$RAW"
  }
  probe() { s3load "$B" "$1" --bucket probe --size 4KiB --connections 2 --objects 64 --warmup 2 --duration "$DUR"; }
  log "B alone"
  probe alone
  log "A's load, then B beside it"
  # A runs through B's whole measurement: its prefill (16 x 16 MiB) and warm-up first.
  nice -n "${LOAD_NICE:-0}" bash -c "$(declare -f s3load); $(declare -p BIN PORT OUT MODE RAW); s3load '$A' load --bucket load --size 16MiB --connections 4 --warmup 6 --duration $((DUR + 4))" &
  LP=$!; PIDS+=("$LP")
  sleep 8
  probe loaded
  wait "$LP"
  "$BIN/nodectl" tenant show b --data "$DATA" >> "$OUT/logs/qos-node-$MODE.log" 2>&1 || true
  kill "$NP"; wait "$NP" 2>/dev/null || true
  for d in mgmtd datapathd; do cp "$DATA/logs/$d.log" "$OUT/logs/qos-$d-$MODE.log" 2>/dev/null || true; done
  rm -rf "$DATA"
done

python3 - "$RAW" <<'PY' | tee "$OUT/qos.md"
import json, sys
r = {json.loads(l)["label"]: json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")}
print("| fair sharing | B PUT p50 / p99 ms alone | beside A | PUT p99 ratio | B GET p50 / p99 ms alone | beside A | GET p99 ratio (goal <= 2) | B ops/s alone / beside | A 16 MiB PUT / GET MB/s |")
print("|---|---|---|---|---|---|---|---|---|")
for mode in ("off", "on"):
    a, l, x = r.get(f"{mode}-alone"), r.get(f"{mode}-loaded"), r.get(f"{mode}-load")
    if not a or not l or not x:
        print(f"| {mode} | missing | | | | | | | |"); continue
    def pp(d, op): return f"{d[op]['p50_ms']:.2f} / {d[op]['p99_ms']:.2f}"
    def ratio(op): return l[op]["p99_ms"] / max(a[op]["p99_ms"], 1e-9)
    def ops(d): return d["put"]["ops_per_s"] + d["get"]["ops_per_s"]
    errs = a["errors"] + l["errors"] + x["errors"]
    print(f"| {mode} | {pp(a, 'put')} | {pp(l, 'put')} | {ratio('put'):.2f} | {pp(a, 'get')} | {pp(l, 'get')} | "
          f"{ratio('get'):.2f} | {ops(a):.0f} / {ops(l):.0f} | {x['put']['mb_per_s']:.0f} / {x['get']['mb_per_s']:.0f} |"
          + (f" errors: {errs}" if errs else ""))
PY

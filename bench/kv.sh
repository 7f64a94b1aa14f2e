#!/usr/bin/env bash
# bench/kv.sh — the KV-cache tier benchmark (RESP, LMCache's prefill/decode
# scenario): Cairn beside redis-server and the loopback TCP ceiling, same client.
#
# Usage: bench/kv.sh [--quick]
#
#   (on 2 shared cores, once built: full run ~1 min, --quick ~20 s)
#
# Prints one markdown table to stdout and to bench-out/kv-results.md (raw RESULT
# lines in bench-out/kv-raw.txt, logs in bench-out/kv-logs/).
#
# Scenario: Llama-3.1-8B in bf16 has 32 layers x 8 KV heads x 128 dims x 2 (K, V) x
# 2 bytes = 128 KiB of KV cache per token; LMCache stores it in chunks of 256 tokens,
# 32 MiB each. A 32K-token context is 128 chunks = 4 GiB (--quick: 32 chunks, 8K
# tokens, 1 GiB). The client is bench/chunkbench's kvbench (Rust, std::net: 8
# threads, one TCP connection each, AUTH first, one key per SET/GET, what LMCache's
# resp:// connector does; GET replies read into a preallocated buffer and checked:
# the value's header and 16 windows of its body).
#
#  1. Loopback TCP ceiling: `kvbench tcp` (GET) and `kvbench tcp --op set`: the same
#     client against an in-process server answering from memory. Nothing can be
#     faster over loopback on this machine with this client.
#  2. Cairn: `nodectl dev up --nodes 2` on loopback (a /24 of our own, nodes at .11
#     and .12; 2 file-backed drives per node; erasure 1+1 across the nodes, data
#     sealed at rest, every SET acknowledged after fsync). The prefill server SETs
#     the chunks through node 1, into database 0 (durable) and then into a
#     write-back pool (`kv pool create root prefill`, the pools' default); the
#     decode server GETs database 0's through node 2, twice: cold (node 2 has
#     never served them: fetched and decrypted from the drives of both nodes,
#     and promoted into node 2's RAM tier) and warm (the second read,
#     served from node 2's RAM tier; --kv-ram sized to hold the context). mgmtd's
#     and datapathd's RSS are sampled every second (bench-out/kv-logs/rss.txt).
#  3. redis-server (Debian package; installed with apt-get once if missing, else
#     "redis-server: unavailable (reason)"), started after Cairn is stopped (memory):
#     a free port on 127.0.0.1, a password, --save '' --appendonly no (RAM only),
#     maxmemory 2x the context, noeviction; the same client and values, SET then GET.
#  4. The turn: loading the context's KV cache (context bytes / GET rate) against
#     recomputing it (tokens / a published prefill rate, PREFILL_TOKS below).
#
# Environment:
#   BENCH_DIR     scratch directory (default /var/tmp/cairn-kvbench; tmpfs refused)
#   CAIRN_BIN     directory holding datapathd, mgmtd and nodectl (default
#                 ${CARGO_TARGET_DIR:-target}/release of this checkout)
#   KVBENCH       the kvbench binary (default ${CARGO_TARGET_DIR:-target}/release/kvbench)
#   SKIP_BUILD=1  build nothing (otherwise `cargo build --release --bins`, or only
#                 kvbench when CAIRN_BIN is set)
#   PREFILL_TOKS  prefill rate for the recompute time, tokens/s (default 55000:
#                 NVIDIA's TensorRT-LLM performance overview, Llama 3.1 8B FP8 on one
#                 H100 SXM, ISL/OSL 2048/128: 3,450 output tokens/s = 26.95 requests/s
#                 x 2,048 prompt tokens = 55,200 prompt tokens/s, decode included, so a
#                 lower bound of that GPU's prefill rate at 2K tokens;
#                 https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md)
#
# Everything it starts it stops (trap on exit), by pid.
set -euo pipefail

QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench-out
LOGS=$OUT/kv-logs
WORK=${BENCH_DIR:-/var/tmp/cairn-kvbench}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${CAIRN_BIN:-$TARGET/release}
KV=${KVBENCH:-$TARGET/release/kvbench}
PREFILL_TOKS=${PREFILL_TOKS:-55000}
PREFILL_SRC="TensorRT-LLM perf overview: Llama 3.1 8B FP8, 1x H100 SXM, ISL/OSL 2048/128, 3,450 output tok/s x 2048/128 (https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md)"
if [ "$QUICK" = 1 ]; then
  MODE=quick; CHUNKS=32; DRIVE=8G
else
  MODE=full; CHUNKS=128; DRIVE=16G
fi
SIZE_MIB=32
CONNS=8
TOKENS_PER_CHUNK=256
OPTIMEOUT=600

log() { echo "[kv-bench $(date +%T)] $*" >&2; }
die() { echo "kv-bench: $*" >&2; exit 1; }

# ---------------------------------------------------------------- prerequisites
missing=()
command -v python3 >/dev/null || missing+=("python3")
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  command -v cargo >/dev/null || missing+=("cargo (or SKIP_BUILD=1 with built binaries)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf 'kv-bench: missing prerequisite: %s\n' "${missing[@]}" >&2
  exit 1
fi
mkdir -p "$WORK" "$LOGS"
FSTYPE=$(df -T "$WORK" | awk 'NR==2 {print $2}')
[ "$FSTYPE" != tmpfs ] || die "BENCH_DIR=$WORK is on tmpfs (no O_DIRECT): use ext4"
AVAIL_GB=$(df -BG --output=avail "$WORK" | tail -1 | tr -dc 0-9)
NEED_GB=$(( CHUNKS * SIZE_MIB * 3 / 1024 + 4 ))
[ "$AVAIL_GB" -ge "$NEED_GB" ] || die "$WORK has ${AVAIL_GB}G free; the run needs ~${NEED_GB}G"

# ---------------------------------------------------------------- process hygiene
# PIDS: every process started, stopped on exit by pid (TERM, then KILL after 20 s),
# and only while its command line still names our scratch directory (pids are
# reused; other engineers run clusters and redis-servers on this machine too).
PIDS=()
ours() { tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline" | grep -qF "$WORK"; }
stop_pid() {
  local p=$1
  ours "$p" || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 200); do ours "$p" || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
}
stop_all() {
  local p
  for p in "${PIDS[@]}"; do ours "$p" && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do stop_pid "$p"; done
  PIDS=()
}
RSS_PID=
cleanup() {
  local rc=$?
  [ -z "$RSS_PID" ] || kill "$RSS_PID" 2>/dev/null || true
  stop_all
  rm -rf "$WORK/cairn" "$WORK/redis"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
hex() { python3 -c "import os; print(os.urandom($1).hex())"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

RAW=$OUT/kv-raw.txt; META=$OUT/kv-meta.txt
: > "$RAW"; : > "$META"
meta() { echo "$1=$2" >> "$META"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
T0=$(date +%s)
meta mode "$MODE"
meta date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
meta commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
meta cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
meta cores "$(nproc)"
meta ram "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
meta fs "$FSTYPE on $(df "$WORK" | awk 'NR==2 {print $1}') at $WORK"
meta load_before "$(loadavg)"
meta chunks "$CHUNKS"
meta chunk_mib "$SIZE_MIB"
meta tokens "$(( CHUNKS * TOKENS_PER_CHUNK ))"
meta conns "$CONNS"
meta prefill_toks "$PREFILL_TOKS"
meta prefill_src "$PREFILL_SRC"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if [ -z "${CAIRN_BIN:-}" ]; then
    log "cargo build --release --bins (may wait on the shared target lock)"
    (cd "$ROOT" && cargo build --release --bins) > "$LOGS/build.log" 2>&1 \
      || { tail -20 "$LOGS/build.log" >&2; die "build failed: see $LOGS/build.log"; }
  else
    log "cargo build --release -p cairn-chunkbench --bin kvbench"
    (cd "$ROOT" && cargo build --release -p cairn-chunkbench --bin kvbench) > "$LOGS/build.log" 2>&1 \
      || { tail -20 "$LOGS/build.log" >&2; die "build failed: see $LOGS/build.log"; }
  fi
fi
for b in datapathd mgmtd nodectl; do
  [ -x "$BIN/$b" ] || die "missing $BIN/$b (cargo build --release --bins, or CAIRN_BIN=)"
done
[ -x "$KV" ] || die "missing $KV (cargo build --release -p cairn-chunkbench, or KVBENCH=)"
meta cairn_bin "$BIN (nodectl $(stat -c %y "$BIN/nodectl" | cut -d. -f1))"
meta client "kvbench ($KV): $CONNS connections, one thread each, one key per command, GET replies read into a preallocated buffer, header + 16 windows of each value checked"

LOAD=(--keys "$CHUNKS" --size "${SIZE_MIB}MiB" --conns "$CONNS")
kvrun() { # NAME ARGS... : one kvbench run, its RESULT line to RAW; status to META
  local name=$1; shift
  meta "load_start_$name" "$(loadavg)"
  if timeout "$OPTIMEOUT" "$KV" "$@" --label "$name" 2> "$LOGS/kvbench-$name.err" | tee -a "$RAW" >&2; then
    meta "status_$name" ok
  else
    meta "status_$name" "failed: $(tail -1 "$LOGS/kvbench-$name.err")"
    log "$name failed: $(tail -1 "$LOGS/kvbench-$name.err")"
  fi
}

# ---------------------------------------------------------------- 1. loopback
log "loopback TCP ceiling: kvbench tcp (GET, then SET), 128 x ${SIZE_MIB} MiB"
# Always 128 values (4 GiB, ~0.5 s): 32 are over too soon for a steady figure.
TCPLOAD=(--keys 128 --size "${SIZE_MIB}MiB" --conns "$CONNS")
kvrun tcp tcp --op get "${TCPLOAD[@]}" --prefix "kvtcp"
kvrun tcp-set tcp --op set "${TCPLOAD[@]}" --prefix "kvtcp"

# ---------------------------------------------------------------- 2. Cairn
# A loopback /24 of our own (127.0.X.0), nothing listening there already.
NET=
for _ in $(seq 50); do
  x=$((200 + RANDOM % 50))
  if ! ss -ltnH | awk '{print $4}' | grep -q "^127\.0\.$x\."; then NET=127.0.$x; break; fi
done
[ -n "$NET" ] || die "no free loopback range 127.0.200-249.0/24"

export CAIRN_ROOT_ACCESS_KEY=AKKV$(hex 6) CAIRN_ROOT_SECRET_KEY=$(hex 20)
CD=$WORK/cairn
rm -rf "$CD"
# Each node's RAM tier holds the whole context (and a quarter more): node 1 keeps
# what it is sent, node 2 what it reads cold, so the warm read is served from RAM.
KV_RAM=$(( CHUNKS * 32 * 5 / 4 ))M
log "Cairn: nodectl dev up --nodes 2 --drives 2 --drive-size $DRIVE --kv-ram $KV_RAM on $NET.11-12"
"$BIN/nodectl" dev up --nodes 2 --drives 2 --drive-size "$DRIVE" --data "$CD" \
  --kv-ram "$KV_RAM" --base-ip "$NET.10" > "$LOGS/cairn.log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
for _ in $(seq 900); do
  grep -q 'nodes serving S3' "$LOGS/cairn.log" 2>/dev/null && break
  kill -0 "$SUP" 2>/dev/null || { tail -20 "$LOGS/cairn.log" >&2; die "Cairn dev up exited; see $LOGS/cairn.log"; }
  sleep 0.2
done
grep -q 'nodes serving S3' "$LOGS/cairn.log" || die "Cairn cluster not up in 180 s; see $LOGS/cairn.log"
ST=$("$BIN/nodectl" dev status --json --data "$CD")
mapfile -t DPIDS < <(python3 -c 'import json,sys
for n in json.load(sys.stdin)["nodes"]:
    for k in ("mgmtd_pid", "datapathd_pid"):
        if n.get(k): print(n[k])' <<< "$ST")
PIDS+=("${DPIDS[@]}")
mapfile -t RESP < <(python3 -c 'import json,sys
for n in json.load(sys.stdin)["nodes"]: print(n["resp"])' <<< "$ST")
for a in "${RESP[@]}"; do
  wait_port "${a%:*}" "${a##*:}" 60 || die "Cairn RESP $a not listening; see $LOGS/cairn.log"
done
# Writable: "nodes serving S3" and a listening RESP port come before node 1 can
# reach node 2's chunk service (the first SETs failed "-ERR data unavailable: ... 1 of
# 2 fragments durable"), so a 1 MiB SET through node 1 and its GET through node 2 are
# retried until both succeed; how long that took is recorded.
export KVBENCH_USER=$CAIRN_ROOT_ACCESS_KEY KVBENCH_PASS=$CAIRN_ROOT_SECRET_KEY
TW=$(date +%s.%N); ready=0
for i in $(seq 240); do
  if "$KV" set --addr "${RESP[0]}" --keys 1 --size 1MiB --conns 1 --prefix "probe$i" >> "$LOGS/probe.log" 2>&1 \
      && "$KV" get --addr "${RESP[1]}" --keys 1 --size 1MiB --conns 1 --prefix "probe$i" >> "$LOGS/probe.log" 2>&1; then
    ready=1; break
  fi
  sleep 0.5
done
[ "$ready" = 1 ] || die "Cairn never took a 1 MiB SET in 2 min; see $LOGS/probe.log"
meta cairn_writable_after "$(python3 -c "import time; print(f'{time.time() - $TW:.1f} s after RESP listened, {$i - 1} failed probe(s)')")"
unset KVBENCH_USER KVBENCH_PASS
meta cairn "nodectl dev up --nodes 2 --drives 2 --drive-size $DRIVE --kv-ram $KV_RAM: $("$BIN/nodectl" cluster status --data "$CD" | head -1 | sed 's/.*epoch [0-9]* *term [0-9]* *//')"

# mgmtd / datapathd RSS every second, for the memory column and to catch growth.
(
  echo "# time $(python3 -c 'import json,sys
print(" ".join("n%d-mgmtd n%d-datapathd" % (n["node"], n["node"]) for n in json.load(sys.stdin)["nodes"]))' <<< "$ST") (RSS KiB)"
  while :; do
    line=$(date +%T)
    for p in "${DPIDS[@]}"; do line+=" $(ps -o rss= -p "$p" 2>/dev/null | tr -d ' ' || echo -)"; done
    echo "$line"
    sleep 1
  done
) > "$LOGS/rss.txt" 2>/dev/null &
RSS_PID=$!
rss_now() { local p s=""; for p in "${DPIDS[@]}"; do s+="$(ps -o rss= -p "$p" 2>/dev/null | tr -d ' ')K "; done; echo "$s"; }
meta rss_cairn_start "$(rss_now)"

export KVBENCH_USER=$CAIRN_ROOT_ACCESS_KEY KVBENCH_PASS=$CAIRN_ROOT_SECRET_KEY
PFX=ctx-$(hex 4)
log "Cairn: prefill SETs $CHUNKS chunks through node 1 (${RESP[0]})"
kvrun cairn-set set --addr "${RESP[0]}" "${LOAD[@]}" --prefix "$PFX"
meta rss_cairn_after_set "$(rss_now)"
# The same chunks into a write-back pool (a KV pool's default: acknowledged once
# every fragment is in its node's memory, flushed within 200 ms), then dropped.
"$BIN/nodectl" kv pool create root prefill --data "$CD" > "$LOGS/pool.log" 2>&1 \
  || die "kv pool create failed: $(tail -1 "$LOGS/pool.log")"
KVBENCH_USER="$CAIRN_ROOT_ACCESS_KEY/prefill" \
  kvrun cairn-set-wb set --addr "${RESP[0]}" "${LOAD[@]}" --prefix "$PFX-wb"
"$BIN/nodectl" kv pool delete root prefill --data "$CD" >> "$LOGS/pool.log" 2>&1 || true
log "Cairn: decode GETs them through node 2 (${RESP[1]}): cold, then warm"
kvrun cairn-get-cold get --addr "${RESP[1]}" "${LOAD[@]}" --prefix "$PFX"
meta rss_cairn_after_get_cold "$(rss_now)"
kvrun cairn-get-warm get --addr "${RESP[1]}" "${LOAD[@]}" --prefix "$PFX"
meta rss_cairn_after_get_warm "$(rss_now)"
unset KVBENCH_USER KVBENCH_PASS
kill "$RSS_PID" 2>/dev/null || true; RSS_PID=
meta rss_cairn_max "$(awk 'NR>1 {for (i=2;i<=NF;i++) if ($i+0 > m[i]) m[i]=$i+0} END {s=""; for (i=2;i in m;i++) s=s m[i] "K "; print s}' "$LOGS/rss.txt")"

log "Cairn: stopping"
stop_pid "$SUP"
stop_all
mkdir -p "$LOGS/cairn-nodes"
for n in "$CD"/nodes/n*; do cp -r "$n/logs" "$LOGS/cairn-nodes/$(basename "$n")" 2>/dev/null || true; done
rm -rf "$CD"

# ---------------------------------------------------------------- 3. redis-server
REDIS=$(command -v redis-server || true)
if [ -z "$REDIS" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "redis-server missing: apt-get install -y redis-server (once)"
    if apt-get install -y redis-server > "$LOGS/apt-redis.log" 2>&1; then
      REDIS=$(command -v redis-server || true)
    fi
  fi
fi
if [ -z "$REDIS" ]; then
  why="not installed and apt-get install -y redis-server failed or not allowed (see $LOGS/apt-redis.log)"
  echo "redis-server: unavailable ($why)" >&2
  meta status_redis "unavailable ($why)"
else
  RD=$WORK/redis
  rm -rf "$RD"; mkdir -p "$RD"
  RPORT=$(free_port)
  RPASS=$(hex 16)
  RVER=$("$REDIS" --version | awk '{print $3}' | sed 's/^v=//')
  MAXMEM=$(( CHUNKS * SIZE_MIB * 2 + 256 ))mb
  # The password in a 0600 file, not on a command line; no proc title rewrite, so
  # the command line keeps naming $WORK (ours()).
  ( umask 077; cat > "$RD/redis.conf" <<EOF
bind 127.0.0.1
port $RPORT
requirepass $RPASS
save ""
appendonly no
maxmemory $MAXMEM
maxmemory-policy noeviction
dir $RD
set-proc-title no
EOF
  )
  log "redis-server $RVER on 127.0.0.1:$RPORT (RAM only, maxmemory $MAXMEM)"
  "$REDIS" "$RD/redis.conf" > "$LOGS/redis.log" 2>&1 &
  RPID=$!; PIDS+=("$RPID")
  if wait_port 127.0.0.1 "$RPORT" 30; then
    meta redis "redis-server $RVER: 127.0.0.1, requirepass, save '', appendonly no, maxmemory $MAXMEM noeviction (one event-loop thread; io-threads default 1)"
    export KVBENCH_PASS=$RPASS
    RPFX=ctx-$(hex 4)
    kvrun redis-set set --addr "127.0.0.1:$RPORT" "${LOAD[@]}" --prefix "$RPFX"
    kvrun redis-get get --addr "127.0.0.1:$RPORT" "${LOAD[@]}" --prefix "$RPFX"
    unset KVBENCH_PASS
    meta rss_redis "$(ps -o rss= -p "$RPID" | tr -d ' ')K"
  else
    meta status_redis "did not listen: $(tail -1 "$LOGS/redis.log")"
    echo "redis-server: unavailable (did not start: $(tail -1 "$LOGS/redis.log"))" >&2
  fi
  stop_all
  rm -rf "$RD"
fi

meta load_after "$(loadavg)"
meta duration "$(( $(date +%s) - T0 )) s"
python3 "$ROOT/bench/report.py" kv-table "$RAW" "$META" | tee "$OUT/kv-results.md"

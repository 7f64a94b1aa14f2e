#!/usr/bin/env bash
# bench/nfs.sh — NFS beside S3 on one node, the same bytes: a 1 GiB file written
# and read sequentially over NFS (libnfs's nfs-cp, and nfs-cat into /dev/null: one
# stream, 1 MiB WRITEs and READs, the client's defaults) against 1 GiB objects PUT
# and read by s3load on one connection (the fast Rust S3 client of bench/s3load,
# which keeps no bytes it reads: hence nfs-cat into /dev/null), and 1000 small files
# copied in over NFS (nfs-cp, a process and a mount per file, as a shell loop
# does) against `aws s3 cp --recursive` of the same directory.
#
# Usage: bench/nfs.sh [--quick]     (~4 min; --quick: 256 MiB and 200 files)
#
# Prints a markdown table to stdout and bench-out/nfs.md. Environment: BENCH_DIR
# (default /var/tmp/cairn-bench), SKIP_BUILD=1, BIN (default target/release).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0; [ "${1:-}" = --quick ] && QUICK=1
MIB=$([ "$QUICK" = 1 ] && echo 256 || echo 1024)
FILES=$([ "$QUICK" = 1 ] && echo 200 || echo 1000)
WORK=${BENCH_DIR:-/var/tmp/cairn-bench}/nfs
OUT=$ROOT/bench-out
BIN=${BIN:-$ROOT/target/release}
mkdir -p "$WORK" "$OUT/logs"
log() { echo "[nfs $(date +%T)] $*" >&2; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -f /dev/shm/cairn-nfs-bench.*; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
command -v nfs-cp >/dev/null || { log "nfs-cp missing: apt-get install libnfs-utils"; exit 1; }
[ "${SKIP_BUILD:-0}" = 1 ] || (cd "$ROOT" && cargo build --release --bins >&2)

DATA=$WORK/node; rm -rf "$DATA"
PORT=$(free_port); NPORT=$(free_port)
export CAIRN_ROOT_ACCESS_KEY=NFSBENCH$RANDOM$RANDOM
export CAIRN_ROOT_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=')
export AWS_ACCESS_KEY_ID=$CAIRN_ROOT_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CAIRN_ROOT_SECRET_KEY
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
log "nodectl dev up: S3 127.0.0.1:$PORT, NFS 127.0.0.1:$NPORT"
"$BIN/nodectl" dev up --data "$DATA" --s3 "127.0.0.1:$PORT" --nfs "127.0.0.1:$NPORT" \
  --resp "127.0.0.1:$(free_port)" --admin "127.0.0.1:$(free_port)" > "$OUT/logs/nfs-node.log" 2>&1 &
PIDS+=("$!")
wait_port 127.0.0.1 "$PORT" 120 || { log "node did not start"; exit 1; }
for _ in $(seq 600); do [ -f "$DATA/run/dev.json" ] && break; sleep 0.1; done
EP=http://127.0.0.1:$PORT
aws --endpoint-url "$EP" s3 mb s3://nfsbench >/dev/null
"$BIN/nodectl" export add --data "$DATA" root nfsbench --client 127.0.0.1/32 >/dev/null
sleep 2.2
url() { echo "nfs://127.0.0.1/root/nfsbench/$1?version=3&nfsport=$NPORT&mountport=$NPORT"; }
secs() { python3 -c "import time; print(time.time())"; }
rate() { python3 -c "print(f'{$1 / ($3 - $2):.0f}')"; } # AMOUNT START END

BIG=/dev/shm/cairn-nfs-bench.big
head -c "$((MIB << 20))" /dev/urandom > "$BIG"
log "NFS: write $MIB MiB with nfs-cp"
t0=$(secs); nfs-cp "$BIG" "$(url big)" >/dev/null; t1=$(secs)
NFS_W=$(rate "$MIB*1.048576" "$t0" "$t1")
log "NFS: read it back with nfs-cat into /dev/null (s3load's GET keeps no bytes either), then with nfs-cp into a file"
t0=$(secs); nfs-cat "$(url big)" >/dev/null; t1=$(secs)
NFS_R=$(rate "$MIB*1.048576" "$t0" "$t1")
t0=$(secs); nfs-cp "$(url big)" "$BIG.back" >/dev/null; t1=$(secs)
NFS_RF=$(rate "$MIB*1.048576" "$t0" "$t1")
cmp "$BIG" "$BIG.back" || { log "NFS read differs"; exit 1; }
rm -f "$BIG.back"

log "S3: $MIB MiB objects, PUT then GET, s3load on one connection"
s3l() { "$BIN/s3load" run --endpoint "$EP" --bucket s3bench --size "${MIB}MiB" --connections 1 \
  --duration "$([ "$QUICK" = 1 ] && echo 10 || echo 20)" --warmup 2 --objects 1 --json --mix "$1" | tail -1; }
mbps() { python3 -c 'import json, sys; print(round(json.load(sys.stdin)[sys.argv[1]]["mb_per_s"]))' "$1"; }
S3_W=$(s3l put=1 | mbps put)
S3_R=$(s3l get=1 | mbps get)

log "$FILES small files: nfs-cp each, then aws s3 cp --recursive"
SMALL=$WORK/small; rm -rf "$SMALL"; mkdir -p "$SMALL"
for i in $(seq "$FILES"); do head -c $((1000 + i)) /dev/urandom > "$SMALL/f$i"; done
aws --endpoint-url "$EP" s3api put-object --bucket nfsbench --key tree/ >/dev/null
t0=$(secs); for i in $(seq "$FILES"); do nfs-cp "$SMALL/f$i" "$(url "tree/f$i")" >/dev/null; done; t1=$(secs)
NFS_F=$(rate "$FILES" "$t0" "$t1")
t0=$(secs); aws --endpoint-url "$EP" s3 cp --recursive --only-show-errors "$SMALL" s3://nfsbench/s3tree/; t1=$(secs)
S3_F=$(rate "$FILES" "$t0" "$t1")
n=$(aws --endpoint-url "$EP" s3 ls s3://nfsbench/tree/ | grep -c ' f')
[ "$n" = "$FILES" ] || { log "$n of $FILES NFS files listed over S3"; exit 1; }

ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
{
  echo "| $MIB MiB, one node, $(nproc) cores | NFS (nfs-cp) | S3 (s3load, 1 conn) | NFS / S3 |"
  echo "|---|---|---|---|"
  echo "| sequential write, MB/s | $NFS_W | $S3_W | $(ratio "$NFS_W" "$S3_W") |"
  echo "| sequential read, MB/s | $NFS_R (nfs-cat > /dev/null) | $S3_R | $(ratio "$NFS_R" "$S3_R") |"
  echo "| sequential read into a file, MB/s | $NFS_RF (nfs-cp to /dev/shm) | $S3_R | $(ratio "$NFS_RF" "$S3_R") |"
  echo "| $FILES small files in, files/s | $NFS_F (nfs-cp per file) | $S3_F (aws s3 cp --recursive) | $(ratio "$NFS_F" "$S3_F") |"
} | tee "$OUT/nfs.md"

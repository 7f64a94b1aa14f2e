#!/usr/bin/env bash
# bench/run.sh — Cairn's benchmark, one command, bounded time.
#
# Usage: bench/run.sh [--quick]
#
#   (full run: ~6 min of measurement, < 10 min with start-ups; --quick: < 2 min)
#
# What it measures, side by side with ratios, printed as a markdown table to stdout
# and to bench-out/results.md (raw lines in bench-out/raw.txt, logs in bench-out/logs/):
#
#  A. The chunk store on the io_uring backend vs fio on the same ext4 file, QD 32:
#     4 KiB random read IOPS, 4 KiB random write IOPS (durable), 1 MiB sequential
#     write (durable) and read MB/s.
#       - fio: --ioengine=io_uring --direct=1 --iodepth=32. Durable writes use
#         --sync=dsync (O_DSYNC: every write is acknowledged only once it is on stable
#         media — the per-write equivalent of Cairn's RWF_DSYNC group-commit write;
#         fio's --fsync=1 would instead serialise an fdatasync after every write,
#         which Cairn never does). A no-sync fio run is shown as the device ceiling.
#       - Cairn: a real target/release/datapathd (1 reactor, 1 network thread, the
#         defaults nodectl uses) on that same file (fio laid it out, so both write
#         over allocated blocks; block 0 is zeroed so datapathd formats it), driven
#         over the chunk protocol by bench/chunkbench (cairn_chunkproto::ChunkClient,
#         32 tasks, 4 connections), then the in-process ChunkStore on the same file
#         (calls of 32 operations: write_batch / get_many).
#  B. S3, Cairn vs Garage on this machine, same client (bench/s3load: Rust, one
#     keep-alive connection per stream, SigV4 UNSIGNED-PAYLOAD as fast clients send
#     it; 32 connections for 4 KiB, 8 for 1 MiB and 16 MiB; each GET phase reads 64
#     objects its prefill wrote; warm-up not counted): PUT and GET of 4 KiB (ops/s),
#     1 MiB and 16 MiB (MB/s) objects. `s3load ceiling` first: the client against
#     a do-nothing responder in its own process, beside one loopback TCP stream.
#       - Cairn: target/release/nodectl dev up (4 sparse file drives -> EC 2+2 for
#         large objects, 3 replicas for objects <= 128 KiB; every ack after fsync).
#       - Garage: /opt/garage/bin/garage (or $GARAGE), one node, replication_factor 1,
#         lmdb, data_fsync = true, metadata_fsync = true, compression off (the data is
#         random). Missing binary -> "garage: unavailable (reason)", Cairn still runs.
#
#  C. Encryption's cost: S3 PUT/GET of 16 MiB objects as the root (sealed, the
#     default) and as a tenant made with --no-encryption, same node, same client;
#     and bench/chunkbench's aeadbench: AES-256-GCM seal and open of 1 MiB buffers
#     on one core with ring (what Cairn uses) and aws-lc-rs, beside memcpy.
#
# Environment:
#   BENCH_DIR   scratch directory on ext4 (default /var/tmp/cairn-bench; tmpfs refused)
#   GARAGE      garage binary (default /opt/garage/bin/garage)
#   SKIP_BUILD=1  do not run `cargo build --release --bins` first
#
# Everything it starts it stops (trap on exit). Needs: cargo, fio, python3.
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
WORK=${BENCH_DIR:-/var/tmp/cairn-bench}
GARAGE=${GARAGE:-/opt/garage/bin/garage}
BIN=$ROOT/target/release
if [ "$QUICK" = 1 ]; then
  MODE=quick; DUR=3; S3DUR=3; S3WARM=1; FIO_SIZE=2G; SEQ_CAP=768; RAND_CAP=100000
else
  MODE=full; DUR=10; S3DUR=10; S3WARM=3; FIO_SIZE=8G; SEQ_CAP=3072; RAND_CAP=500000
fi
QD=32

mkdir -p "$OUT/logs" "$WORK"
RAW=$OUT/raw.txt; META=$OUT/meta.txt
: > "$RAW"; : > "$META"
log() { echo "[bench $(date +%T)] $*" >&2; }
meta() { echo "$1=$2" >> "$META"; }

FSTYPE=$(df -T "$WORK" | awk 'NR==2 {print $2}')
if [ "$FSTYPE" = tmpfs ]; then
  echo "BENCH_DIR=$WORK is on tmpfs (no O_DIRECT, io_uring goes to workers): use ext4" >&2
  exit 1
fi

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT
# stop PID: SIGTERM, wait up to 20 s, then SIGKILL.
stop() {
  local p=$1
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

T0=$(date +%s)
meta mode "$MODE"
meta date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
meta commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
meta cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
meta cores "$(nproc)"
meta ram "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
meta fs "$FSTYPE on $(df "$WORK" | awk 'NR==2 {print $1}') (write cache: $(cat /sys/block/"$(basename "$(df "$WORK" | awk 'NR==2 {print $1}')")"/queue/write_cache 2>/dev/null || echo '?'))"
meta workdir "$WORK"
meta load_before "$(cut -d' ' -f1-3 /proc/loadavg)"
meta s3_client "bench/s3load, 32 connections for 4 KiB, 8 for 1 MiB and 16 MiB, ${S3DUR}s per phase after ${S3WARM}s of warm-up"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "cargo build --release --bins (may wait on the shared target lock)"
  (cd "$ROOT" && cargo build --release --bins) > "$OUT/logs/build.log" 2>&1 \
    || { echo "build failed: see $OUT/logs/build.log" >&2; tail -20 "$OUT/logs/build.log" >&2; exit 1; }
fi
for b in datapathd mgmtd nodectl chunkbench aeadbench; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b" >&2; exit 1; }
done

# ------------------------------------------------------------------ A
FILE=$WORK/a-drive.img
rm -f "$FILE"
fio_run() { # NAME RW BS [extra...]
  local name=$1 rw=$2 bs=$3; shift 3
  log "fio $name"
  fio --name="$name" --filename="$FILE" --size="$FIO_SIZE" --ioengine=io_uring --direct=1 \
      --iodepth=$QD --numjobs=1 --rw="$rw" --bs="$bs" --time_based --runtime="$DUR" \
      --randrepeat=0 --norandommap --group_reporting --output-format=json "$@" \
      > "$OUT/logs/fio-$name.json" 2> "$OUT/logs/fio-$name.err"
  python3 "$ROOT/bench/report.py" fio-json "$name" "$OUT/logs/fio-$name.json" | tee -a "$RAW" >&2
}
log "A: fio lays out $FIO_SIZE at $FILE"
fio_run seqwrite1m_nosync write 1M
fio_run seqwrite1m_dsync write 1M --sync=dsync
fio_run seqread1m read 1M
fio_run randwrite4k_nosync randwrite 4k
fio_run randwrite4k_dsync randwrite 4k --sync=dsync
fio_run randread4k randread 4k

CB_ARGS=(--duration "$DUR" --qd "$QD" --seq-cap-mib "$SEQ_CAP" --rand-cap "$RAND_CAP")
log "A: datapathd on the same file"
dd if=/dev/zero of="$FILE" bs=1M count=1 conv=notrunc,fsync status=none
rm -f "$WORK/dp.ready"
"$BIN/datapathd" --listen 127.0.0.1:0 --local-key "$WORK/chunk.key" --ready-file "$WORK/dp.ready" --backend uring \
  --drive "$FILE" > "$OUT/logs/datapathd.log" 2>&1 &
DP=$!; PIDS+=("$DP")
for _ in $(seq 600); do [ -s "$WORK/dp.ready" ] && break; kill -0 "$DP" || break; sleep 0.1; done
[ -s "$WORK/dp.ready" ] || { echo "datapathd did not start; see $OUT/logs/datapathd.log" >&2; exit 1; }
DPADDR=$(head -1 "$WORK/dp.ready")
"$BIN/chunkbench" service --addr "$DPADDR" --key "$WORK/chunk.key" --drive 0 --conns 4 "${CB_ARGS[@]}" \
  2> "$OUT/logs/chunkbench-service.err" | tee -a "$RAW" >&2
stop "$DP"

log "A: in-process ChunkStore on the same file"
dd if=/dev/zero of="$FILE" bs=1M count=1 conv=notrunc,fsync status=none
"$BIN/chunkbench" local --path "$FILE" "${CB_ARGS[@]}" \
  2> "$OUT/logs/chunkbench-local.err" | tee -a "$RAW" >&2
rm -f "$FILE"

# ------------------------------------------------------------------ B
# s3phases LABEL ENDPOINT ACCESS SECRET REGION SIZE...: a PUT phase and a GET
# phase of each size with bench/s3load, as RESULT lines.
s3phases() {
  local label=$1 ep=$2 ak=$3 sk=$4 region=$5 size op conns; shift 5
  for size in "$@"; do
    conns=$([ "$size" = 4KiB ] && echo 32 || echo 8)
    for op in put get; do
      AWS_ACCESS_KEY_ID=$ak AWS_SECRET_ACCESS_KEY=$sk "$BIN/s3load" run --endpoint "$ep" \
        --region "$region" --bucket bench --size "$size" --mix "$op=1" --connections "$conns" \
        --duration "$S3DUR" --warmup "$S3WARM" --objects 64 --json 2>> "$OUT/logs/s3load-$label.err" \
        | tee -a "$OUT/logs/s3load-$label.log" \
        | python3 "$ROOT/bench/report.py" s3load "$label" "$op" "$size" | tee -a "$RAW" >&2 || return 1
    done
  done
}
S3SIZES=(4KiB 1MiB 16MiB)

log "B: s3load's own ceiling (a do-nothing responder, beside one loopback TCP stream)"
"$BIN/s3load" ceiling --size 16MiB --connections 8 --duration "$S3DUR" --warmup "$S3WARM" \
  2> "$OUT/logs/s3load-ceiling.err" | tee "$OUT/logs/s3load-ceiling.log" >&2 || log "s3load ceiling failed; see logs"

log "B: Cairn node (nodectl dev up)"
CDIR=$WORK/cairn-node
rm -rf "$CDIR"
CPORT=$(free_port)
export CAIRN_ROOT_ACCESS_KEY=benchaccesskey01 CAIRN_ROOT_SECRET_KEY=benchsecretkey0123456789abcdef
"$BIN/nodectl" dev up --data "$CDIR" --s3 "127.0.0.1:$CPORT" > "$OUT/logs/nodectl.log" 2>&1 &
NP=$!; PIDS+=("$NP")
if wait_port 127.0.0.1 "$CPORT" 120; then
  s3phases cairn "http://127.0.0.1:$CPORT" "$CAIRN_ROOT_ACCESS_KEY" "$CAIRN_ROOT_SECRET_KEY" \
    us-east-1 "${S3SIZES[@]}" || log "cairn s3load failed; see $OUT/logs/s3load-cairn.err"
  # C. Encryption's cost: the same 16 MiB PUT/GET as a tenant made with
  # --no-encryption (the root's data above is sealed, as every tenant's by default).
  log "C: Cairn 16 MiB PUT/GET, encryption off (a --no-encryption tenant)"
  NC() { "$BIN/nodectl" "$@" --data "$CDIR"; }
  if NC tenant create plain --no-encryption >> "$OUT/logs/nodectl.log" 2>&1 \
     && NC user create plain bench >> "$OUT/logs/nodectl.log" 2>&1 \
     && PKEY=$(NC key create plain bench --json 2>> "$OUT/logs/nodectl.log"); then
    PAK=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["access_key"])' <<< "$PKEY")
    PSK=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["secret_key"])' <<< "$PKEY")
    s3phases cairn-plain "http://127.0.0.1:$CPORT" "$PAK" "$PSK" us-east-1 16MiB \
      || log "plain s3load failed; see $OUT/logs/s3load-cairn-plain.err"
  else
    log "could not make the plaintext tenant; see $OUT/logs/nodectl.log"
  fi
else
  log "Cairn S3 did not come up; see $OUT/logs/nodectl.log"
fi
stop "$NP"
cp -r "$CDIR/logs" "$OUT/logs/cairn-node" 2>/dev/null || true
rm -rf "$CDIR"

GSTATUS="not run"
if [ ! -x "$GARAGE" ]; then
  GSTATUS="no binary at $GARAGE (build: cargo install garage --locked --root /opt/garage)"
else
  log "B: Garage single node ($($GARAGE --version 2>/dev/null | head -1))"
  GDIR=$WORK/garage-node
  rm -rf "$GDIR"; mkdir -p "$GDIR/meta" "$GDIR/data"
  GPORT=$(free_port); RPORT=$(free_port)
  cat > "$GDIR/garage.toml" <<EOF
metadata_dir = "$GDIR/meta"
data_dir = "$GDIR/data"
db_engine = "lmdb"
replication_factor = 1
metadata_fsync = true
data_fsync = true
compression_level = "none"
rpc_bind_addr = "127.0.0.1:$RPORT"
rpc_public_addr = "127.0.0.1:$RPORT"
rpc_secret = "$(python3 -c 'import os; print(os.urandom(32).hex())')"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$GPORT"
root_domain = ".s3.garage.localhost"
EOF
  G() { "$GARAGE" -c "$GDIR/garage.toml" "$@"; }
  RUST_LOG=garage=warn "$GARAGE" -c "$GDIR/garage.toml" server > "$OUT/logs/garage.log" 2>&1 &
  GP=$!; PIDS+=("$GP")
  GKEY=GK$(python3 -c 'import os; print(os.urandom(12).hex())')
  GSECRET=$(python3 -c 'import os; print(os.urandom(32).hex())')
  if wait_port 127.0.0.1 "$RPORT" 60 && sleep 1 \
     && NODE=$(G node id -q 2>>"$OUT/logs/garage-cli.log" | cut -d@ -f1) && [ -n "$NODE" ] \
     && G layout assign -z dc1 -c 50G "$NODE" >> "$OUT/logs/garage-cli.log" 2>&1 \
     && G layout apply --version 1 >> "$OUT/logs/garage-cli.log" 2>&1 \
     && G key import --yes -n bench "$GKEY" "$GSECRET" >> "$OUT/logs/garage-cli.log" 2>&1 \
     && G bucket create bench >> "$OUT/logs/garage-cli.log" 2>&1 \
     && G bucket allow --read --write --owner bench --key bench >> "$OUT/logs/garage-cli.log" 2>&1 \
     && wait_port 127.0.0.1 "$GPORT" 30; then
    sleep 1
    if s3phases garage "http://127.0.0.1:$GPORT" "$GKEY" "$GSECRET" garage "${S3SIZES[@]}"; then
      GSTATUS=ok
    else
      GSTATUS="s3load against garage failed; see $OUT/logs/s3load-garage.err"
    fi
  else
    GSTATUS="garage did not start or set up; see $OUT/logs/garage.log, garage-cli.log"
  fi
  stop "$GP"
  rm -rf "$GDIR"
fi
[ "$GSTATUS" = ok ] || echo "garage: unavailable ($GSTATUS)" >&2
meta garage "$GSTATUS"
meta load_after "$(cut -d' ' -f1-3 /proc/loadavg)"
meta duration "$(( $(date +%s) - T0 )) s"

log "C: AES-256-GCM on one core, ring and aws-lc-rs, beside memcpy"
"$BIN/aeadbench" "$([ "$QUICK" = 1 ] && echo 1 || echo 3)" | tee -a "$RAW" >&2

python3 "$ROOT/bench/report.py" table "$RAW" "$META" | tee "$OUT/results.md"

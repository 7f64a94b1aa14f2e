#!/usr/bin/env bash
# bench/cluster.sh — the cluster benchmark: Cairn, Garage and Ceph side by side on
# this one machine, same client, then Cairn's rebuild rate after a node loss.
#
# Usage: bench/cluster.sh [--quick] [--skip cairn|garage|ceph|rebuild ...]
#
#   (on 2 shared cores, once the binaries and peers exist: full run ~10 min,
#   --quick ~4 min)
#
# Prints one markdown table to stdout and to bench-out/cluster-results.md (raw RESULT
# lines in bench-out/cluster-raw.txt, logs in bench-out/cluster-logs/).
#
#  1. S3 through every node: PUT then GET of 4 KiB (ops/s), 1 MiB and 16 MiB (MB/s)
#     objects, bench/s3bench.py (boto3, checksums when_required, unique random bytes
#     per 1 MiB block, 12 threads; thread t talks to node t mod 6), against
#       - Cairn: `nodectl dev up --nodes 6 --drives 2 --drive-size 4G --ec 4+2
#         --replicas 3` on loopback 127.0.X.11-16 (EC 4+2 for objects > 128 KiB,
#         3 copies for smaller ones; one fragment per node; mutual TLS between nodes;
#         every ack after fsync);
#       - Garage ($GARAGE, default /opt/garage/bin/garage): 6 nodes on 127.0.X.21-26,
#         replication_factor 3, consistency_mode consistent, lmdb, data_fsync and
#         metadata_fsync true, no compression;
#       - Ceph 16 (Debian packages ceph + radosgw): one mon, one mgr, 6 OSDs on
#         file-backed BlueStore, an EC profile k=4 m=2 (ISA-L plugin)
#         crush-failure-domain=osd for the radosgw data pool, one radosgw (beast)
#         on 127.0.X.31 (a single host has one gateway: all 12 threads go to it).
#  2. fio on the same filesystem: 1 MiB sequential writes, O_DIRECT, io_uring, QD 32,
#     durable (--sync=dsync, what Cairn's writes are) and not: the drives' write
#     bandwidth.
#  3. Cairn's rebuild: a fresh 6-node cluster (--repair-grace 10) is filled with
#     16 MiB objects (3 GiB; 1 GiB with --quick), one non-leader node is killed
#     (`nodectl dev stop N --kill`), its drives and state wiped and started again, so
#     it rejoins as a new, empty node (what ci/cluster_check.py --wipe does). The old
#     node's fragments are rebuilt onto it once the grace has passed;
#     bench/cluster_rebuild.py times that from the start of the repair to
#     `cluster status` reporting full protection, and reports MiB/s and the share of
#     fio's durable write bandwidth.
#
# Environment:
#   BENCH_DIR     scratch directory on ext4 (default /var/tmp/cairn-bench-cluster;
#                 tmpfs refused). Needs ~25 GiB free at the peak (sparse files).
#   GARAGE        garage binary (default /opt/garage/bin/garage, else `garage` in PATH)
#   CAIRN_BIN     directory holding Cairn's datapathd, mgmtd and nodectl (default
#                 target/release of this checkout)
#   SKIP_BUILD=1  do not run `cargo build --release --bins` first (never run when
#                 CAIRN_BIN is set)
#
# A missing prerequisite stops the run before anything starts, saying what is missing
# and how to get it; `--skip garage` / `--skip ceph` run without that peer on purpose
# (`--skip cairn` / `--skip rebuild` leave out Cairn's S3 run / the rebuild).
# Everything it starts it stops (trap on exit), by pid.
set -euo pipefail

QUICK=0
SKIP=" "
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --skip)
      shift
      case "${1:-}" in cairn|garage|ceph|rebuild) SKIP+="$1 " ;; *) echo "--skip cairn|garage|ceph|rebuild" >&2; exit 2 ;; esac ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "usage: $0 [--quick] [--skip cairn|garage|ceph|rebuild ...]" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ "$SKIP" != *" $1 "* ]]; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench-out
LOGS=$OUT/cluster-logs
WORK=${BENCH_DIR:-/var/tmp/cairn-bench-cluster}
BIN=${CAIRN_BIN:-$ROOT/target/release}
if [ -n "${GARAGE:-}" ]; then :
elif [ -x /opt/garage/bin/garage ]; then GARAGE=/opt/garage/bin/garage
else GARAGE=$(command -v garage || echo /opt/garage/bin/garage); fi
if [ "$QUICK" = 1 ]; then
  MODE=quick; S3DUR=4; FIODUR=4; FIO_SIZE=2G; FILL=1GiB; REBUILD_TIMEOUT=240
else
  MODE=full; S3DUR=20; FIODUR=8; FIO_SIZE=4G; FILL=3GiB; REBUILD_TIMEOUT=600
fi
THREADS=12
NODES=6

log() { echo "[cluster-bench $(date +%T)] $*" >&2; }
die() { echo "cluster-bench: $*" >&2; exit 1; }

# ---------------------------------------------------------------- prerequisites
# Checked before anything starts, so a run never dies half-way for want of a tool.
missing=()
command -v python3 >/dev/null || missing+=("python3")
python3 -c 'import boto3' 2>/dev/null || missing+=("python3 boto3 (pip install boto3)")
command -v fio >/dev/null || missing+=("fio (apt-get install fio)")
[ "${SKIP_BUILD:-0}" = 1 ] || [ -n "${CAIRN_BIN:-}" ] || command -v cargo >/dev/null || missing+=("cargo (or SKIP_BUILD=1 with built binaries)")
if want garage && [ ! -x "$GARAGE" ]; then
  missing+=("garage at $GARAGE (cargo install garage --locked --root /opt/garage; or set GARAGE=; or --skip garage)")
fi
if want ceph; then
  for t in ceph ceph-mon ceph-mgr ceph-osd radosgw radosgw-admin monmaptool ceph-authtool; do
    command -v "$t" >/dev/null || { missing+=("$t (apt-get install ceph radosgw; or --skip ceph)"); break; }
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf 'cluster-bench: missing prerequisite: %s\n' "${missing[@]}" >&2
  exit 1
fi
mkdir -p "$WORK" "$LOGS"
FSTYPE=$(df -T "$WORK" | awk 'NR==2 {print $2}')
[ "$FSTYPE" != tmpfs ] || die "BENCH_DIR=$WORK is on tmpfs (no O_DIRECT): use ext4"
AVAIL_GB=$(df -BG --output=avail "$WORK" | tail -1 | tr -dc 0-9)
[ "$AVAIL_GB" -ge 25 ] || die "$WORK has ${AVAIL_GB}G free; the run needs ~25G at its peak"

# ---------------------------------------------------------------- process hygiene
# PIDS: every process started, stopped on exit by pid (TERM, then KILL after 20 s).
# pid_max is small here (32768) and other engineers' builds spawn many processes, so a
# pid is signalled only while its command line still names our scratch directory
# (every daemon started here is given a path under $WORK).
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
cleanup() {
  local rc=$?
  stop_all
  rm -rf "$WORK/cairn" "$WORK/cairn-rebuild" "$WORK/garage" "$WORK/ceph" "$WORK/fio.img"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
hex() { python3 -c "import os; print(os.urandom($1).hex())"; }

# A loopback /24 of our own (127.0.X.0): nothing may listen there already, so this
# run never meets another engineer's cluster (ci/cluster-check.sh uses 100–199).
NET=
for _ in $(seq 50); do
  x=$((200 + RANDOM % 50))
  if ! ss -ltnH | awk '{print $4}' | grep -q "^127\.0\.$x\."; then NET=127.0.$x; break; fi
done
[ -n "$NET" ] || die "no free loopback range 127.0.200-249.0/24"

RAW=$OUT/cluster-raw.txt; META=$OUT/cluster-meta.txt
: > "$RAW"; : > "$META"
meta() { echo "$1=$2" >> "$META"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
T0=$(date +%s)
meta mode "$MODE"
meta date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
meta commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
meta cairn_bin "$BIN (nodectl $(stat -c %y "$BIN/nodectl" 2>/dev/null | cut -d. -f1))"
meta cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
meta cores "$(nproc)"
meta ram "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
meta fs "$FSTYPE on $(df "$WORK" | awk 'NR==2 {print $1}') at $WORK"
meta load_before "$(loadavg)"
meta client "bench/s3bench.py, boto3 $(python3 -c 'import boto3; print(boto3.__version__)'), $THREADS threads over the nodes' endpoints, checksums when_required, ${S3DUR}s per phase"

NEED_CAIRN=0
{ want cairn || want rebuild; } && NEED_CAIRN=1
if [ "$NEED_CAIRN" = 1 ] && [ "${SKIP_BUILD:-0}" != 1 ] && [ -z "${CAIRN_BIN:-}" ]; then
  log "cargo build --release --bins (may wait on the shared target lock)"
  (cd "$ROOT" && cargo build --release --bins) > "$LOGS/build.log" 2>&1 \
    || { tail -20 "$LOGS/build.log" >&2; die "build failed: see $LOGS/build.log"; }
fi
for b in datapathd mgmtd nodectl; do
  [ "$NEED_CAIRN" = 0 ] || [ -x "$BIN/$b" ] || die "missing $BIN/$b (cargo build --release --bins)"
done

S3PY=(python3 "$ROOT/bench/s3bench.py" --threads "$THREADS" --duration "$S3DUR" --wait-ready 90)
s3bench() { # LABEL ARGS... : one system's S3 run, RESULT lines to RAW
  local label=$1; shift
  meta "load_start_$label" "$(loadavg)"
  if "${S3PY[@]}" --label "$label" "$@" 2> "$LOGS/s3bench-$label.err" | tee -a "$RAW" >&2; then
    meta "status_$label" ok
  else
    meta "status_$label" "s3bench failed: $(tail -1 "$LOGS/s3bench-$label.err")"
    log "$label: s3bench failed; see $LOGS/s3bench-$label.err"
  fi
}

# ---------------------------------------------------------------- Cairn
CAIRN_SUP=
CAIRN_EP=
export CAIRN_ROOT_ACCESS_KEY=AKBENCH$(hex 6) CAIRN_ROOT_SECRET_KEY=$(hex 20)
cairn_up() { # DIR LOGNAME EXTRA-ARGS...
  local dir=$1 name=$2; shift 2
  rm -rf "$dir"
  log "Cairn: nodectl dev up --nodes $NODES on $NET.11-$((10 + NODES)) $*"
  "$BIN/nodectl" dev up --nodes "$NODES" --drives 2 --drive-size 4G --ec 4+2 --replicas 3 \
    --data "$dir" --base-ip "$NET.10" "$@" > "$LOGS/$name.log" 2>&1 &
  CAIRN_SUP=$!; PIDS+=("$CAIRN_SUP")
  for _ in $(seq 900); do
    grep -q 'nodes serving S3' "$LOGS/$name.log" 2>/dev/null && break
    kill -0 "$CAIRN_SUP" 2>/dev/null || { tail -20 "$LOGS/$name.log" >&2; die "Cairn dev up exited; see $LOGS/$name.log"; }
    sleep 0.2
  done
  grep -q 'nodes serving S3' "$LOGS/$name.log" || die "Cairn cluster not up in 180 s; see $LOGS/$name.log"
  # The daemons' pids, so they are stopped by pid even if the supervisor is not.
  local st
  st=$("$BIN/nodectl" dev status --json --data "$dir")
  mapfile -t dpids < <(python3 -c 'import json,sys
for n in json.load(sys.stdin)["nodes"]:
    for k in ("mgmtd_pid", "datapathd_pid"):
        if n.get(k): print(n[k])' <<< "$st")
  PIDS+=("${dpids[@]}")
  CAIRN_EP=$(python3 -c 'import json,sys; print(",".join("http://" + n["s3"] for n in json.load(sys.stdin)["nodes"]))' <<< "$st")
}
cairn_down() { # DIR LOGNAME
  # The supervisor stops its daemons on SIGTERM; then whatever it left, by pid.
  stop_pid "$CAIRN_SUP"
  stop_all
  mkdir -p "$LOGS/$2-nodes"
  for n in "$1"/nodes/n*; do cp -r "$n/logs" "$LOGS/$2-nodes/$(basename "$n")" 2>/dev/null || true; done
  rm -rf "$1"
}

if want cairn; then
cairn_up "$WORK/cairn" cairn
meta cairn "nodectl dev up --nodes $NODES --drives 2 --drive-size 4G --ec 4+2 --replicas 3: $("$BIN/nodectl" cluster status --json --data "$WORK/cairn" | python3 -c 'import json,sys; print(json.load(sys.stdin)["protection"])')"
s3bench cairn --endpoint "$CAIRN_EP" --access-key "$CAIRN_ROOT_ACCESS_KEY" \
  --secret-key "$CAIRN_ROOT_SECRET_KEY" --region us-east-1 --create-bucket --bucket bench
cairn_down "$WORK/cairn" cairn
else
  meta status_cairn "skipped (--skip cairn)"
fi

# ---------------------------------------------------------------- Garage
if want garage; then
  GD=$WORK/garage
  rm -rf "$GD"
  GVER=$("$GARAGE" --version 2>/dev/null | head -1)
  log "Garage: $GVER, $NODES nodes on $NET.21-$((20 + NODES)), replication_factor 3"
  RPC_SECRET=$(hex 32)
  gconf() { echo "$GD/n$1/garage.toml"; }
  G() { local n=$1; shift; "$GARAGE" -c "$(gconf "$n")" "$@"; }
  GEP=
  for n in $(seq "$NODES"); do
    ip=$NET.$((20 + n))
    mkdir -p "$GD/n$n/meta" "$GD/n$n/data"
    # data_fsync / metadata_fsync: Cairn acknowledges after fsync, so Garage must too
    # (both default to false). Random payload: compression would only cost CPU.
    cat > "$(gconf "$n")" <<EOF
metadata_dir = "$GD/n$n/meta"
data_dir = "$GD/n$n/data"
db_engine = "lmdb"
replication_factor = 3
consistency_mode = "consistent"
metadata_fsync = true
data_fsync = true
compression_level = "none"
rpc_bind_addr = "$ip:3901"
rpc_public_addr = "$ip:3901"
rpc_secret = "$RPC_SECRET"

[s3_api]
s3_region = "garage"
api_bind_addr = "$ip:3900"
root_domain = ".s3.garage.localhost"
EOF
    RUST_LOG=garage=warn "$GARAGE" -c "$(gconf "$n")" server > "$LOGS/garage-n$n.log" 2>&1 &
    PIDS+=("$!")
    GEP+="${GEP:+,}http://$ip:3900"
  done
  GKEY=GK$(hex 12); GSECRET=$(hex 32)
  gsetup() {
    local n id ids=()
    for n in $(seq "$NODES"); do wait_port "$NET.$((20 + n))" 3901 60 || return 1; done
    sleep 1
    for n in $(seq "$NODES"); do
      id=$(G "$n" node id -q) || return 1
      ids+=("${id%%@*}")
      [ "$n" = 1 ] || G 1 node connect "$id" || return 1
    done
    # One zone: replicas go to 3 distinct nodes of the 6.
    for id in "${ids[@]}"; do G 1 layout assign -z dc1 -c 20G "$id" || return 1; done
    G 1 layout apply --version 1 || return 1
    G 1 key import --yes -n bench "$GKEY" "$GSECRET" || return 1
    G 1 bucket create bench || return 1
    G 1 bucket allow --read --write --owner bench --key bench || return 1
  }
  if gsetup >> "$LOGS/garage-cli.log" 2>&1; then
    meta garage "$GVER; 6 nodes, replication_factor 3, consistency_mode consistent, lmdb, data_fsync and metadata_fsync true, compression none"
    s3bench garage --endpoint "$GEP" --access-key "$GKEY" --secret-key "$GSECRET" --region garage --bucket bench
  else
    meta garage "$GVER"
    meta status_garage "set-up failed: $(tail -1 "$LOGS/garage-cli.log")"
    log "Garage set-up failed; see $LOGS/garage-cli.log"
  fi
  stop_all
  rm -rf "$GD"
else
  meta status_garage "skipped (--skip garage)"
fi

# ---------------------------------------------------------------- Ceph
if want ceph; then
  CD=$WORK/ceph
  rm -rf "$CD"
  mkdir -p "$CD"/{run,log,mon/mon.a,mgr/mgr.x,rgw}
  CIP=$NET.31
  CVER=$(ceph --version | awk '{print $3, $5}')
  log "Ceph: $CVER, mon + mgr + $NODES BlueStore OSDs (files) + radosgw on $CIP"
  FSID=$(python3 -c 'import uuid; print(uuid.uuid4())')
  C() { timeout 60 ceph -c "$CD/ceph.conf" "$@"; }
  # cephx, as deployed (under auth none radosgw never got past the monitor:
  # "get_initial_auth_request returned -13", retried forever); every daemon's key
  # is in one keyring file. chooseleaf type 0: one host, so replicas and EC chunks go to
  # distinct OSDs. osd memory target 1 GiB: 6 OSDs must fit beside the rest.
  cat > "$CD/ceph.conf" <<EOF
[global]
fsid = $FSID
mon host = [v2:$CIP:3300,v1:$CIP:6789]
public addr = $CIP
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
run dir = $CD/run
admin socket = $CD/run/\$name.asok
log file = $CD/log/\$name.log
pid file = $CD/run/\$name.pid
keyring = $CD/keyring
osd crush chooseleaf type = 0
osd pool default size = 3
osd pool default min size = 2
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 5
[mon]
mon data = $CD/mon/\$name
[mgr]
mgr data = $CD/mgr/\$name
[osd]
osd data = $CD/osd/\$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 8589934592
bluestore fsck on mount = false
osd memory target = 1073741824
[client.rgw.bench]
rgw frontends = beast endpoint=$CIP:7480
rgw data = $CD/rgw
EOF
  csetup() {
    local i id u
    ceph-authtool --create-keyring "$CD/keyring" --gen-key -n mon. --cap mon 'allow *' || return 1
    ceph-authtool "$CD/keyring" --gen-key -n client.admin --cap mon 'allow *' \
      --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' || return 1
    monmaptool --create --fsid "$FSID" --addv a "[v2:$CIP:3300,v1:$CIP:6789]" "$CD/monmap" || return 1
    ceph-mon -c "$CD/ceph.conf" --mkfs -i a --monmap "$CD/monmap" --keyring "$CD/keyring" || return 1
    ceph-mon -c "$CD/ceph.conf" -i a -f > "$CD/log/mon.out" 2>&1 &
    PIDS+=("$!")
    wait_port "$CIP" 3300 30 || return 1
    C auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
      >> "$CD/keyring" || return 1
    ceph-mgr -c "$CD/ceph.conf" -i x -f > "$CD/log/mgr.out" 2>&1 &
    PIDS+=("$!")
    for i in $(seq 0 $((NODES - 1))); do
      u=$(python3 -c 'import uuid; print(uuid.uuid4())')
      id=$(C osd new "$u") || return 1
      mkdir -p "$CD/osd/$id"
      C auth get-or-create "osd.$id" mon 'allow profile osd' mgr 'allow profile osd' \
        osd 'allow *' >> "$CD/keyring" || return 1
      # BlueStore on a sparse 8 GiB file in the OSD's directory (block create).
      ceph-osd -c "$CD/ceph.conf" -i "$id" --mkfs --osd-uuid "$u" > "$CD/log/mkfs.$id.out" 2>&1 || return 1
      ceph-osd -c "$CD/ceph.conf" -i "$id" -f > "$CD/log/osd.$id.out" 2>&1 &
      PIDS+=("$!")
    done
    for _ in $(seq 120); do
      [ "$(C osd stat -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])')" = "$NODES" ] && break
      sleep 1
    done
    [ "$(C osd stat -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])')" = "$NODES" ] || { echo "OSDs not up"; return 1; }
    # The same code as Cairn's: Reed-Solomon 4+2 with ISA-L, one chunk per OSD.
    C osd erasure-code-profile set bench42 k=4 m=2 plugin=isa technique=reed_sol_van \
      crush-failure-domain=osd || return 1
    C osd pool create default.rgw.buckets.data 32 32 erasure bench42 || return 1
    C osd pool application enable default.rgw.buckets.data rgw || return 1
    C auth get-or-create client.rgw.bench mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
      >> "$CD/keyring" || return 1
    radosgw -c "$CD/ceph.conf" -n client.rgw.bench -f > "$CD/log/rgw.out" 2>&1 &
    PIDS+=("$!")
    wait_port "$CIP" 7480 120 || { echo "radosgw did not listen"; return 1; }
    radosgw-admin -c "$CD/ceph.conf" user create --uid bench --display-name bench \
      --access-key "$CKEY" --secret-key "$CSECRET" > /dev/null || return 1
    # Every PG active+clean before measuring (rgw made its own pools meanwhile).
    for _ in $(seq 120); do
      C pg stat -f json | python3 -c 'import json,sys
d = json.load(sys.stdin)
s = {x["name"]: x["num"] for x in d["pg_summary"]["num_pg_by_state"]}
sys.exit(0 if d["pg_summary"]["num_pgs"] > 0 and s.get("active+clean") == d["pg_summary"]["num_pgs"] else 1)' && return 0
      sleep 1
    done
    echo "PGs not active+clean in 120 s"; C -s; return 1
  }
  CKEY=CK$(hex 10); CSECRET=$(hex 20)
  if csetup > "$LOGS/ceph-setup.log" 2>&1; then
    meta ceph "$CVER; mon + mgr + $NODES OSDs on file-backed BlueStore (8 GiB sparse files), data pool EC k=4 m=2 (isa, reed_sol_van, crush-failure-domain=osd, 32 PGs), other rgw pools 3 replicas, one radosgw (beast)"
    s3bench ceph --endpoint "http://$CIP:7480" --access-key "$CKEY" --secret-key "$CSECRET" \
      --region us-east-1 --create-bucket --bucket bench
    { C -s; C df detail; C osd pool ls detail; } > "$LOGS/ceph-status-after.txt" 2>&1 || true
  else
    meta ceph "$CVER"
    meta status_ceph "set-up failed: $(tail -1 "$LOGS/ceph-setup.log")"
    log "Ceph set-up failed; see $LOGS/ceph-setup.log"
  fi
  stop_all
  cp -r "$CD/log" "$LOGS/ceph" 2>/dev/null || true
  rm -rf "$CD"
else
  meta status_ceph "skipped (--skip ceph)"
fi

# ---------------------------------------------------------------- rebuild
if want rebuild; then
  # The drives' write bandwidth, just before the rebuild, on the same filesystem.
  FILE=$WORK/fio.img
  rm -f "$FILE"
  for sync in dsync nosync; do
    extra=(); [ "$sync" = dsync ] && extra=(--sync=dsync)
    log "fio: 1 MiB sequential write, O_DIRECT, QD 32, $sync"
    fio --name="seqwrite1m_$sync" --filename="$FILE" --size="$FIO_SIZE" --ioengine=io_uring \
      --direct=1 --iodepth=32 --numjobs=1 --rw=write --bs=1M --time_based --runtime="$FIODUR" \
      --group_reporting --output-format=json "${extra[@]}" \
      > "$LOGS/fio-$sync.json" 2> "$LOGS/fio-$sync.err"
    python3 "$ROOT/bench/report.py" fio-json "seqwrite1m_$sync" "$LOGS/fio-$sync.json" | tee -a "$RAW" >&2
  done
  rm -f "$FILE"

  cairn_up "$WORK/cairn-rebuild" cairn-rebuild --repair-grace 10
  log "rebuild: filling $FILL of 16 MiB objects"
  meta load_start_rebuild "$(loadavg)"
  python3 "$ROOT/bench/s3bench.py" --threads "$THREADS" --duration 900 --wait-ready 90 \
    --sizes 16MiB --put-bytes "$FILL" --no-get --label cairn-fill --endpoint "$CAIRN_EP" \
    --access-key "$CAIRN_ROOT_ACCESS_KEY" --secret-key "$CAIRN_ROOT_SECRET_KEY" \
    --create-bucket --bucket rebuild 2> "$LOGS/s3bench-fill.err" | tee -a "$RAW" >&2
  if python3 "$ROOT/bench/cluster_rebuild.py" --nodectl "$BIN/nodectl" --data "$WORK/cairn-rebuild" \
      --grace 10 --timeout "$REBUILD_TIMEOUT" 2> "$LOGS/rebuild.err" | tee -a "$RAW" >&2; then
    meta status_rebuild ok
  else
    meta status_rebuild "failed: $(tail -1 "$LOGS/rebuild.err")"
    log "rebuild failed; see $LOGS/rebuild.err"
  fi
  cairn_down "$WORK/cairn-rebuild" cairn-rebuild
else
  meta status_rebuild "skipped (--skip rebuild)"
fi

meta load_after "$(loadavg)"
meta duration "$(( $(date +%s) - T0 )) s"
python3 "$ROOT/bench/report.py" cluster-table "$RAW" "$META" | tee "$OUT/cluster-results.md"

#!/usr/bin/env bash
# Cluster checks (ci/cluster_check.py says what each step asserts):
#  1. a 7-node local cluster (`nodectl dev up --nodes 7 --ec 4+2`: one node more
#     than a stripe is wide, so writes go on with two nodes down and a node can be
#     drained), real S3 clients (boto3) through every node, kill -9 of two nodes
#     under load, every object read back by hash, restart to full protection, NFS
#     handles compared between all nodes (ci/nfs_rpc.py, raw RPC), a voter
#     down until it is replaced that comes back and rejoins within a bound (then two
#     voters at once), a node
#     wiped and replaced (its chassis a VM behind a simulated BMC, which the
#     cluster must power off, fencing it, before rebuilding its data), a node
#     drained and removed;
#  2. a 6-node cluster in network namespaces (`--netns`, needs root and iproute2):
#     the leader and one more node cut off under load, then healed;
#  3. history (only when asked for): ci/history_check.py on a 5-node cluster in
#     network namespaces, whose mgmtd is built with `--features failpoints` (BIN_DIR
#     must hold that mgmtd, and nodectl and datapathd).
#
#   ci/cluster-check.sh [BIN_DIR]                  1 and 2 (default target/release)
#   ci/cluster-check.sh --only MODE [BIN_DIR]      MODE: faults | partition | history
set -euo pipefail
cd "$(dirname "$0")/.."
ONLY=
if [[ "${1:-}" == --only ]]; then ONLY=$2; shift 2; fi
BIN=${1:-target/release}
run_cluster() { # MODE: faults | partition | history
DATA=$(mktemp -d /tmp/cairn-cluster-check.XXXXXX)
# Collector rounds every 20 s (an hour by default), so the check can wait out the
# two epochs garbage must age before it is taken.
export CAIRN_GC_EVERY=20
# A lifecycle rule's day lasts a second here (the lifecycle step of the check).
export CAIRN_LIFECYCLE_DAY=1 CAIRN_LIFECYCLE_EVERY=1
export CAIRN_ROOT_ACCESS_KEY="AKCI$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CAIRN_ROOT_SECRET_KEY="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# A loopback range of its own, so this run never meets another cluster.
BASE=127.0.$((100 + RANDOM % 100)).10
extra=()
[[ $1 != faults ]] && extra=(--netns)
nodes=6 ec=4+2
[[ $1 == faults ]] && nodes=7
[[ $1 == history ]] && nodes=5 ec=3+2
"$BIN/nodectl" dev up --nodes $nodes --ec $ec --drives 2 --drive-size 2G --data "$DATA" \
  --base-ip "$BASE" --repair-grace 10 "${extra[@]}" >"$DATA/dev-up.log" 2>&1 &
SUP=$!
cleanup() {
  kill -TERM "$SUP" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$SUP" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$SUP" 2>/dev/null || true
  pkill -KILL -f "$DATA" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  grep -q 'nodes serving S3' "$DATA/dev-up.log" 2>/dev/null && break
  kill -0 "$SUP" 2>/dev/null || { cat "$DATA/dev-up.log"; echo "cluster-check: dev up failed" >&2; exit 1; }
  sleep 0.2
done
grep -q 'nodes serving S3' "$DATA/dev-up.log" || { cat "$DATA/dev-up.log"; exit 1; }
"$BIN/nodectl" dev status --data "$DATA"
check=(ci/cluster_check.py)
case $1 in
  partition) check+=(--partition) ;;
  faults) check+=(--objects 60 --rejoin 2 --rejoin 2,4 --wipe 3 --fence --drain 5) ;;
  history) check=(ci/history_check.py) ;;
esac
if ! timeout 900 python3 "${check[@]}" --nodectl "$BIN/nodectl" --data "$DATA"; then
  echo "cluster-check: FAILED; logs:" >&2
  tail -n 30 "$DATA"/nodes/n*/logs/mgmtd.log >&2 || true
  exit 1
fi
"$BIN/nodectl" cluster status --data "$DATA"
cleanup
trap - EXIT
# A failed run keeps its directory (logs, drives) for a look; a passed one goes.
rm -rf "$DATA"
}
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null; then
  echo "cluster-check: the partition and history checks need root and iproute2 (ip); FAILING" >&2
  exit 1
fi
if [[ -n $ONLY ]]; then
  run_cluster "$ONLY"
else
  run_cluster faults
  run_cluster partition
fi

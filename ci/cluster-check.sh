#!/usr/bin/env bash
# Cluster checks (ci/cluster_check.py says what each step asserts):
#  1. a 7-node local cluster (`nodectl dev up --nodes 7 --ec 4+2`: one node more
#     than a stripe is wide, so writes go on with two nodes down and a node can be
#     drained), real S3 clients (boto3) through every node, kill -9 of two nodes
#     under load, every object read back by hash, restart to full protection, a voter
#     down until it is replaced that comes back and rejoins within a bound, a node
#     wiped and replaced, a node drained and removed;
#  2. a 6-node cluster in network namespaces (`--netns`, needs root and iproute2):
#     the leader and one more node cut off under load, then healed.
#
#   ci/cluster-check.sh [BIN_DIR]      (default target/release)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
run_cluster() { # MODE: faults | partition
DATA=$(mktemp -d /tmp/cairn-cluster-check.XXXXXX)
# Collector rounds every 20 s (an hour by default), so the check can wait out the
# two epochs garbage must age before it is taken.
export CAIRN_GC_EVERY=20
export CAIRN_ROOT_ACCESS_KEY="AKCI$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CAIRN_ROOT_SECRET_KEY="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# A loopback range of its own, so this run never meets another cluster.
BASE=127.0.$((100 + RANDOM % 100)).10
extra=()
[[ $1 == partition ]] && extra=(--netns)
nodes=6
[[ $1 == faults ]] && nodes=7
"$BIN/nodectl" dev up --nodes $nodes --ec 4+2 --drives 2 --drive-size 2G --data "$DATA" \
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
if [[ $1 == partition ]]; then
  args=(--partition)
else
  args=(--objects 60 --rejoin 2 --wipe 3 --drain 5)
fi
if ! timeout 900 python3 ci/cluster_check.py --nodectl "$BIN/nodectl" --data "$DATA" "${args[@]}"; then
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
run_cluster faults
if [[ $(id -u) == 0 ]] && command -v ip >/dev/null; then
  run_cluster partition
else
  echo "cluster-check: the partition check needs root and iproute2 (ip); FAILING" >&2
  exit 1
fi

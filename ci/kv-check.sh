#!/usr/bin/env bash
# The KV tier checked from the outside with the real clients (issue 12, items 5 and
# 7), against a 3-node local cluster (`nodectl dev up --nodes 3`: RESP on port 6379
# and S3 on port 9000 of BASE+1..3, virtual-hosted S3 domain s3.localhost).
# ci/kv_check.py does the checks; each asserts replies byte-exact where the client
# depends on them, and a failure names the actual and the expected reply.
#
#  startup    a 3 MiB SET as soon as dev up prints "nodes serving S3" (then retried
#             until it succeeds, so the later sections are not hit by start-up)
#  reference  the new-command checks (expire, scan, info) first run against a real
#             redis-server, so a failure there is a wrong check, not a Cairn bug
#  rediscli   redis-cli -x SET of a 3 MiB binary value (NULs, CR LF) through node 1,
#             GET through nodes 2 and 3 compared with cmp, EXISTS/DEL seen everywhere
#  lmcache    LMCache's resp:// connector on a raw socket: 8 threads, each sends only
#             `AUTH user pass` first (+OK), then one key per command in LMCache's key
#             format ({model with /}@1@0@{hash}@bfloat16), 1-4 MiB values; SET via
#             node 1, GET/EXISTS via nodes 2 and 3 ($len payload, $-1, :0/:1 exact);
#             batched_contains (one EXISTS per key, hit prefix) = CAIRN.PREFIXLEN; DEL
#  redispy    LMCache's redis:// connector: redis-py asyncio pool (CLIENT SETINFO on
#             connect), <key>kv_bytes then <key>metadata (28-byte int32 array),
#             existence on metadata, read back via node 2; MSET/MGET, EXISTS of many
#             keys, STRLEN, SET EX/PX/NX/XX, TTL/PTTL, DBSIZE, INFO, PING, SELECT 0
#  expire     [new commands] EXPIRE/PEXPIRE/PERSIST/TTL transitions across nodes
#  scan       [new commands] SCAN MATCH/COUNT to cursor 0, each key exactly once
#  info       [new commands] INFO memory / stats (keyspace_hits, _misses) / keyspace
#  bench      redis-benchmark --user/-a -t set,get -d 4096 -n 2000 -P 16 -c 8: no errors
#  s3         awscrt as LMCache's s3:// connector: virtual-hosted (Host
#             <bucket>.s3.localhost:9000), 8 MiB parts, region us-lmcache-1, SigV4
#             with the root key: PUT 32 MiB (multipart, 4 parts), HEAD (size),
#             ranged GET (206) and full GET byte-exact via another node, HEAD of a
#             missing key 404. glibc here does not resolve *.localhost and the CRT
#             uses getaddrinfo, so the checks run in a mount namespace of their own
#             (unshare -m, root) with a private copy of /etc/hosts bind-mounted over
#             it; the real /etc/hosts is never edited
#  tenants    tenants A and B (nodectl tenant/user/key): B cannot see A's key (GET,
#             EXISTS, PREFIXLEN, DBSIZE 0, SCAN, DEL), same key names kept apart,
#             read-only user -NOPERM, wrong password -WRONGPASS, -NOAUTH before AUTH
#  badinput   MGET of 1,000,000 keys; 100,000 pipelined commands in one write,
#             answered in order; a client that never reads 200 x GET of 32 MiB
#             (mgmtd RSS bounded, others served); $600000000, negative and absurd
#             lengths; an unterminated SET then close (not applied)
#  placement  a pool on nodes 1 and 2 (kv pool create --nodes, write-back): SETs via
#             node 3 add no chunk to node 3's drives; byte-exact via every node, and
#             via nodes 1 and 3 with node 2 killed -9 and kept down, when a SET
#             into the pool is refused (-ERR) and stores nothing
#  nodeloss   20 acknowledged SETs via node 1, node 3 killed -9 and kept down
#             (`nodectl dev stop 3 --kill`: dev up restarts a bare kill -9 within a
#             second), all read byte-exact via nodes 1 and 2, a DEL via node 2 seen
#             via node 1, node 3 back reads them all and sees the DEL
#
#   ci/kv-check.sh [BIN_DIR]          (default target/release)
#   KV_CHECK_SKIP="expire scan info"  sections to skip (default: none)
#   KV_CHECK_ONLY="s3 tenants"        only these sections
# Needs redis-tools, redis-server (reference; optional), python3 with redis, awscrt and
# boto3 (ci/install-deps.sh), and root (unshare -m for the s3 section).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
DATA=$(mktemp -d /tmp/cairn-kv-check.XXXXXX)
export CAIRN_ROOT_ACCESS_KEY="AKKV$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CAIRN_ROOT_SECRET_KEY="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# A loopback range of its own, so this run never meets another cluster.
BASE=${KV_CHECK_BASE_IP:-127.0.$((100 + RANDOM % 100)).$((20 + 4 * (RANDOM % 50)))}
"$BIN/nodectl" dev up --nodes 3 --drives 2 --drive-size 2G --data "$DATA" --base-ip "$BASE" \
  >"$DATA/dev-up.log" 2>&1 &
SUP=$!
cleanup() {
  kill -TERM "$SUP" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$SUP" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$SUP" 2>/dev/null || true
  # Daemons the supervisor left behind, by the pids it recorded (and only if
  # they are still ours: their command line names this run's directory).
  local pid
  for pid in $(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))
print(*[n[k] for n in s["nodes"] for k in ("mgmtd_pid", "datapathd_pid")])' "$DATA/run/dev.json" 2>/dev/null); do
    grep -qF "$DATA" "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  grep -q 'nodes serving S3' "$DATA/dev-up.log" 2>/dev/null && break
  kill -0 "$SUP" 2>/dev/null || { cat "$DATA/dev-up.log"; echo "kv-check: dev up failed" >&2; exit 1; }
  sleep 0.2
done
grep -q 'nodes serving S3' "$DATA/dev-up.log" || { cat "$DATA/dev-up.log"; echo "kv-check: cluster not up after 60 s" >&2; exit 1; }
check=(python3 ci/kv_check.py --nodectl "$BIN/nodectl" --data "$DATA"
  --skip "${KV_CHECK_SKIP:-}" --only "${KV_CHECK_ONLY:-}")
# A private /etc/hosts for the awscrt client (see s3 above).
cp /etc/hosts "$DATA/hosts"
if [[ $(id -u) == 0 ]] && unshare -m true 2>/dev/null; then
  check=(unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$DATA/hosts" "${check[@]}"
    --hosts-file "$DATA/hosts")
else
  echo "kv-check: not root or no unshare -m: the s3 section cannot route <bucket>.s3.localhost" >&2
fi
rc=0
timeout 600 "${check[@]}" || rc=$?
if [[ $rc != 0 ]]; then
  echo "kv-check: FAILED (exit $rc); mgmtd log tails:" >&2
  tail -n 8 "$DATA"/nodes/n*/logs/mgmtd.log 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-300 >&2 || true
fi
cleanup
trap - EXIT
# A failed run keeps its directory (logs, drives) for a look; a passed one goes.
[[ $rc == 0 ]] && rm -rf "$DATA"
exit $rc

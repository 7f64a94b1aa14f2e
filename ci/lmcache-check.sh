#!/usr/bin/env bash
# Run LMCache's own remote-backend check (python -m lmcache.v1.basic_check
# --mode test_remote) against a RESP server. By hand only, not in CI: LMCache
# needs torch, whose PyPI wheels pull ~3 GB of CUDA libraries (they load without a
# GPU). Set up once:
#   python3 -m venv /work/lmcache-venv && /work/lmcache-venv/bin/pip install lmcache
# (tried with lmcache 0.5.6, torch 2.15.0). Against a node of `nodectl dev up`:
#   ci/lmcache-check.sh 127.0.0.1:6379 "$ACCESS_KEY" "$SECRET_KEY"
#   ci/lmcache-check.sh 127.0.0.1:6379 "$ACCESS_KEY/prefill" "$SECRET_KEY"   (a pool)
#
# Usage: lmcache-check.sh HOST:PORT [USERNAME] [PASSWORD] [extra basic_check args...]
#   USERNAME may be "" (LMCache then sends "AUTH <password>"; otherwise
#   "AUTH <username> <password>"). PASSWORD "" means no AUTH at all.
# Env:
#   SCHEME=resp   (default) LMCache's native C++ RESP client (lmcache_redis.so):
#                 AUTH, SET/GET/EXISTS/DEL on one raw-bytes value per key.
#   SCHEME=redis  LMCache's redis-py connector (redis://user:pass@host:port):
#                 keys "<key>metadata" and "<key>kv_bytes".
#   NUM_KEYS=5  KV_DTYPE=  OBJ_SIZE=  SETTLE=0   -> --num-keys/--kv-dtype/--obj-size/--settle-time
#   TIMEOUT=300  VENV=/work/lmcache-venv  LMCACHE_LOG_LEVEL=WARNING
# Exit code: 0 only if every "Validation" line is N/N, nothing reported an
# error, and the check process exited cleanly.
set -u
ADDR=${1:?usage: $0 HOST:PORT [USERNAME] [PASSWORD] [extra args]}
USER_NAME=${2-}
PASS_WORD=${3-}
shift $(( $# < 3 ? $# : 3 ))
VENV=${VENV:-/work/lmcache-venv}
SCHEME=${SCHEME:-resp}

HOST=${ADDR%:*}; PORT=${ADDR##*:}
WORK=$(mktemp -d /tmp/lmcache-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CFG=$WORK/lmcache.yaml

case "$SCHEME" in
  resp)
    URL="resp://$HOST:$PORT"
    # credentials go through env vars, not the (logged) config
    export LMCACHE_RESP_USERNAME="$USER_NAME" LMCACHE_RESP_PASSWORD="$PASS_WORD"
    EXTRA=$'extra_config:\n  resp_num_threads: 4' ;;
  redis)
    urlenc() { "$VENV/bin/python" -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1],safe=""))' "$1"; }
    if [ -n "$PASS_WORD" ]; then
      URL="redis://$(urlenc "$USER_NAME"):$(urlenc "$PASS_WORD")@$HOST:$PORT"
    else
      URL="redis://$HOST:$PORT"
    fi
    EXTRA='' ;;
  *) echo "SCHEME must be resp or redis" >&2; exit 2 ;;
esac

umask 077
cat > "$CFG" <<EOF
# LMCache engine config used by basic_check test_remote
chunk_size: 256
local_cpu: true
max_local_cpu_size: 1        # GB of host buffer; default 5 is needlessly large
remote_url: "$URL"
remote_serde: "naive"
save_unfull_chunk: false
$EXTRA
EOF

# LMCache 0.5.6 bug: RESPConnector/RedisConnector.close() runs as a coroutine on
# the backend's event-loop thread and calls the *sync* AsyncPQExecutor.shutdown(),
# which blocks on run_coroutine_threadsafe(<same loop>).result() -> deadlock after
# the check has printed its results. Patched in-process here (venv untouched):
# called from its own loop, shutdown() returns the shutdown_async() coroutine,
# which those close() methods already `await`.
cat > "$WORK/run.py" <<'PYEOF'
import asyncio, runpy
from lmcache.v1.storage_backend.job_executor import pq_executor as m
for cls in (m.AsyncPQExecutor, m.AsyncPQThreadPoolExecutor):
    orig = cls.__dict__["shutdown"]
    def shutdown(self, wait=True, _orig=orig):
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self.loop:
            return self.shutdown_async(wait)
        return _orig(self, wait)
    cls.shutdown = shutdown
runpy.run_module("lmcache.v1.basic_check", run_name="__main__", alter_sys=True)
PYEOF

echo "== LMCache test_remote -> $SCHEME://$HOST:$PORT (user='${USER_NAME}', password $( [ -n "$PASS_WORD" ] && echo set || echo none))"
ARGS=(--mode test_remote --num-keys "${NUM_KEYS:-5}" --settle-time "${SETTLE:-0}")
[ -n "${KV_DTYPE:-}" ] && ARGS+=(--kv-dtype "$KV_DTYPE")
[ -n "${OBJ_SIZE:-}" ] && ARGS+=(--obj-size "$OBJ_SIZE")

LMCACHE_CONFIG_FILE="$CFG" LMCACHE_LOG_LEVEL="${LMCACHE_LOG_LEVEL:-WARNING}" \
  timeout "${TIMEOUT:-300}" "$VENV/bin/python" "$WORK/run.py" "${ARGS[@]}" "$@" 2>&1 \
  | grep --line-buffered -v 'is being garbage collected with ref_count' | tee "$WORK/out.log"
RC=${PIPESTATUS[0]}

# basic_check exits 0 even on failure: judge from its output.
FAIL=0
if grep -qE 'Test Failed|failed:|timed out|returned None|mismatch|Error closing|Error occurred|Traceback' "$WORK/out.log"; then
  echo "RESULT: errors reported above"; FAIL=1; fi
NVAL=$(grep -c 'Validation' "$WORK/out.log")
BAD=$(grep 'Validation' "$WORK/out.log" | grep -vE ' ([0-9]+)/\1 passed' | wc -l)
if [ "$NVAL" -lt 5 ] || [ "$BAD" -ne 0 ]; then
  echo "RESULT: $BAD of $NVAL validation lines not all-passed"; FAIL=1; fi
if [ "$RC" -ne 0 ]; then echo "RESULT: check process exit code $RC (124 = timeout)"; FAIL=1; fi
if [ "$FAIL" -ne 0 ]; then echo "RESULT: FAIL"; exit 1; fi
echo "RESULT: PASS ($NVAL/$NVAL validation lines all-passed, clean exit)"

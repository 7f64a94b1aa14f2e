#!/usr/bin/env bash
# The KV tier's memory bound, proved the hard way: a node's mgmtd runs in a memory
# cgroup far smaller than what a write flood sends it, and must neither be
# OOM-killed nor lose an acknowledged value.
#
#   ci/kv-memory-check.sh [BIN_DIR]     (default target/release; needs root)
#
# One node (`nodectl dev up`, RAM tier 128M, RESP intake budget 64M); its mgmtd is
# moved into a memory cgroup of 512 MiB (v1 `memory` controller, else v2). Then 16
# clients each SET eight distinct 16 MiB values at once (2 GiB offered, 4x the
# cgroup; 16 MiB is the largest value a 128M tier holds, so it fills), two of
# them stalling for 2 s halfway through a value, while another
# client PINGs and must be answered throughout. Checked: no OOM kill in the
# cgroup, the same mgmtd still running, every acknowledged value read back by
# SHA-256, the RAM tier within its bound; the peak usage is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release}
work=$(mktemp -d /var/tmp/cairn-kvmem.XXXXXX)
rport=$((17000 + RANDOM % 1000))
nport=$((15000 + RANDOM % 1000))
port=$((18000 + RANDOM % 1000))
limit=$((512 << 20))
export CAIRN_ROOT_ACCESS_KEY=KVMEM$RANDOM$RANDOM
export CAIRN_ROOT_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=')
export CAIRN_RESP_INTAKE=64M
fail() { echo "kv-memory-check: FAILED: $*" >&2; exit 1; }
sup="" cg=""
cleanup() {
  [[ -n "$sup" ]] && kill "$sup" 2>/dev/null && wait "$sup" 2>/dev/null || true
  pkill -9 -f "$work" 2>/dev/null || true
  if [[ -n "$cg" && -d "$cg" ]]; then
    # Anything left in it goes back to the root group before it is removed.
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do echo "$p" >"$(dirname "$cg")/cgroup.procs" 2>/dev/null || true; done
    rmdir "$cg" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [[ -d /sys/fs/cgroup/memory ]]; then
  cg=/sys/fs/cgroup/memory/cairn-kvmem-$$
  mkdir "$cg"
  echo "$limit" >"$cg/memory.limit_in_bytes"
  oom() { awk '/^oom_kill /{print $2}' "$cg/memory.oom_control"; }
  peak() { cat "$cg/memory.max_usage_in_bytes"; }
else
  root=/sys/fs/cgroup
  [[ -f $root/unified/cgroup.controllers ]] && root=$root/unified
  grep -qw memory "$root/cgroup.controllers" || fail "no memory cgroup controller here"
  echo +memory >"$root/cgroup.subtree_control" 2>/dev/null || true
  cg=$root/cairn-kvmem-$$
  mkdir "$cg"
  echo "$limit" >"$cg/memory.max"
  oom() { awk '/^oom_kill /{print $2}' "$cg/memory.events"; }
  peak() { cat "$cg/memory.peak" 2>/dev/null || echo 0; }
fi

"$bin/nodectl" dev up --data "$work/data" --drive-size 4G --s3 "127.0.0.1:$port" \
  --resp "127.0.0.1:$rport" --nfs "127.0.0.1:$nport" --kv-ram 128M >"$work/nodectl.log" 2>&1 &
sup=$!
for _ in $(seq 1 300); do
  redis-cli -p "$rport" --no-auth-warning --user "$CAIRN_ROOT_ACCESS_KEY" \
    --pass "$CAIRN_ROOT_SECRET_KEY" PING 2>/dev/null | grep -q PONG && break
  kill -0 "$sup" 2>/dev/null || { cat "$work/nodectl.log"; fail "nodectl died"; }
  sleep 0.2
done
mgmtd=$(pgrep -f "mgmtd.*$work" | head -1)
[[ -n "$mgmtd" ]] || fail "no mgmtd"
echo "$mgmtd" >"$cg/cgroup.procs" 2>/dev/null || echo "$mgmtd" >"$cg/tasks"
echo "-- mgmtd $mgmtd in a $((limit >> 20)) MiB memory cgroup; 16 clients x 8 x 16 MiB"

python3 - "$rport" <<'PY' || fail "flood"
import hashlib, os, socket, sys, threading, time
port = int(sys.argv[1])
ak, sk = os.environ["CAIRN_ROOT_ACCESS_KEY"], os.environ["CAIRN_ROOT_SECRET_KEY"]
MIB = 1 << 20

def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    s.sendall(cmd(b"AUTH", ak.encode(), sk.encode()))
    assert reply(s) == b"+OK\r\n"
    return s

def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out

def reply(s):
    line = b""
    while not line.endswith(b"\r\n"):
        c = s.recv(1)
        if not c:
            raise EOFError("closed")
        line += c
    if line.startswith(b"$") and line != b"$-1\r\n":
        n = int(line[1:-2]) + 2
        buf = bytearray(n)
        v = memoryview(buf)
        got = 0
        while got < n:
            k = s.recv_into(v[got:])
            if k == 0:
                raise EOFError("closed mid-value")
            got += k
        return bytes(buf[:-2])
    return line

acked, errors, lock = {}, [], threading.Lock()
base = os.urandom(16 * MIB)

def writer(t):
    try:
        s = conn()
        for i in range(8):
            key = b"flood-%d-%d" % (t, i)
            val = key.ljust(64, b".") + base[64:]          # distinct per key
            msg = cmd(b"SET", key, val)
            if t < 2 and i == 2:
                half = len(msg) // 2                        # a client that stalls mid-value
                s.sendall(msg[:half]); time.sleep(2); s.sendall(msg[half:])
            else:
                s.sendall(msg)
            r = reply(s)
            if r == b"+OK\r\n":
                with lock:
                    acked[key] = hashlib.sha256(val).hexdigest()
            else:
                with lock:
                    errors.append((key, r))
    except Exception as e:
        with lock:
            errors.append(("writer %d" % t, repr(e)))

stop = threading.Event()
slowest = [0.0]
def pinger():
    s = conn()
    while not stop.is_set():
        t0 = time.time(); s.sendall(cmd(b"PING")); assert reply(s) == b"+PONG\r\n"
        slowest[0] = max(slowest[0], time.time() - t0); time.sleep(0.1)

p = threading.Thread(target=pinger); p.start()
ws = [threading.Thread(target=writer, args=(t,)) for t in range(16)]
t0 = time.time()
for w in ws: w.start()
for w in ws: w.join()
stop.set(); p.join()
print("  %d SETs acknowledged, %d refused in %.1f s; slowest PING %.2f s" % (len(acked), len(errors), time.time() - t0, slowest[0]))
for e in errors[:5]:
    print("  refused:", e)
if len(acked) < 16 * 8 * 0.9:
    sys.exit("too few SETs acknowledged: %d" % len(acked))
s = conn()
for key, want in acked.items():
    s.sendall(cmd(b"GET", key))
    got = reply(s)
    if hashlib.sha256(got).hexdigest() != want:
        sys.exit("acknowledged %s reads back wrong (%d bytes)" % (key.decode(), len(got)))
print("  ok  every acknowledged value read back by SHA-256")
s.sendall(cmd(b"INFO", b"memory")); info = reply(s).decode()
f = dict(l.split(":", 1) for l in info.split("\r\n") if ":" in l)
held, bound = int(f["cairn_ram_tier_bytes"]), int(f["maxmemory"])
assert 0 < held <= bound, f"RAM tier holds {held} of {bound}"
print("  ok  RAM tier %s of %s bytes; intake in use %s" % (f["cairn_ram_tier_bytes"], f["maxmemory"], f["cairn_intake_in_use"]))
PY
[[ $(oom) == 0 ]] || fail "OOM kills in the cgroup: $(oom)"
pgrep -f "mgmtd.*$work" | grep -qx "$mgmtd" || fail "mgmtd $mgmtd is gone (restarted?)"
find "$work/data" -name '*.log' -exec grep -l panicked {} + 2>/dev/null | grep -q . && fail "a daemon panicked"
echo "  ok  no OOM kill, mgmtd $mgmtd still serving; peak $(( $(peak) >> 20 )) MiB of $((limit >> 20)) MiB"

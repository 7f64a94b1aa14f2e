#!/usr/bin/env python3
"""A Jepsen-style history check on a local cluster with failpoints, kill -9 and a
partition (`nodectl dev up --nodes 5 --netns` run with an mgmtd built with
`--features failpoints`: see ci/cluster-check.sh).

Writers put and delete objects (each key has one writer, so its operations are
ordered) and readers get them through every node, while the check injects, in
turn: failpoints on every node (the leader's answer to a forwarded proposal lost;
the forward's connection reset before the leader read it; mgmtd aborting between
writing fragments and proposing the manifest, between the commit and the free, and
as leader a few ms after taking an entry into its log), kill -9 of a node, a
partition of the leader and one more node, kill -9 of the leader. Then faults end,
the cluster must settle and return to full protection, the collector must leave no
unreferenced chunk, and every key must read the same on every node.

The checker (per key): a read may return the value of the last operation
acknowledged before it began (its "floor"), of any operation that began after the
floor and before the read ended, or of a failed operation older than the floor (a
failed operation's outcome is unknown to the client: it may take effect later).
Anything else is a lost acknowledged write, a resurrected delete or a stale read.
A GET that fails with an error that is not "unavailable" (5xx other than 503) is
counted as a read failing for freed chunks. Exits non-zero on any violation.

Usage: history_check.py --nodectl PATH --data DIR [--seconds 100]
"""
import argparse
import hashlib
import json
import os
import random
import re
import sys
import threading
import time

from botocore.exceptions import ClientError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_check import Cluster, body, client, gc_check, wait_settled  # noqa: E402

ABSENT = "absent"
FAILPOINTS = {
    "cluster::forward-reply-lost": "5%return",
    "cluster::forward-reset-before-send": "5%return",
    "objects::crash-before-commit": "0.3%return",
    "objects::crash-before-free": "0.3%return",
    "cluster::leader-crash-mid-commit": "0.2%return",
}


class History:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops = {}     # key -> [(start, end, ok, value)] in order (one writer per key)
        self.reads = []   # (key, start, end, value)

    def op(self, key, start, end, ok, value):
        with self.lock:
            self.ops.setdefault(key, []).append((start, end, ok, value))

    def read(self, key, start, end, value):
        with self.lock:
            self.reads.append((key, start, end, value))

    def allowed(self, key, start, end):
        ops = self.ops.get(key, [])
        floor = max((i for i, o in enumerate(ops) if o[2] and o[1] < start), default=None)
        vals = {ABSENT} if floor is None else {ops[floor][3]}
        first = 0 if floor is None else floor + 1
        vals |= {o[3] for o in ops[first:] if o[0] < end}
        late = {o[3] for o in ops[:first] if not o[2]}
        return vals, late

    def check(self):
        bad, late_seen = [], 0
        for key, start, end, value in self.reads:
            vals, late = self.allowed(key, start, end)
            if value in vals:
                continue
            if value in late:
                late_seen += 1
                continue
            bad.append((key, round(start, 2), value))
        return bad, late_seen


def self_test():
    """The checker on made-up histories: it must flag a lost acknowledged write, a
    resurrected delete and a stale read, and pass the allowed cases."""
    h = History()
    h.op("k", 0, 1, True, "a")        # put a, acknowledged
    h.op("k", 2, 3, True, "b")        # put b, acknowledged
    h.op("k", 4, 5, False, "c")       # put c, failed (outcome unknown)
    h.op("k", 6, 7, True, ABSENT)     # delete, acknowledged
    h.op("k", 8, 9, True, "d")        # put d, acknowledged (and still in flight below)
    cases = [  # (start, end, value, allowed)
        (3.5, 3.8, "b", True), (3.5, 3.8, "a", False),      # stale: a after b acked
        (4.5, 4.9, "c", True), (5.5, 5.9, "c", True),       # the failed put may land
        (7.5, 7.9, ABSENT, True), (7.5, 7.9, "b", False),   # resurrected before delete
        (8.5, 8.9, "d", True), (8.5, 8.9, ABSENT, True),    # concurrent with put d
        (9.5, 9.9, ABSENT, False), (9.5, 9.9, "b", False),  # d acknowledged: lost
        (-1, 0.5, ABSENT, True), (-1, 0.5, "b", False),     # before any ack
    ]
    for start, end, value, ok in cases:
        vals, late = h.allowed("k", start, end)
        got = value in vals or value in late
        assert got == ok, f"checker self-test: read {value} over [{start}, {end}]: " \
            f"allowed={got}, expected {ok}"
    h.read("k", 9.5, 9.9, ABSENT)
    bad, _ = h.check()
    assert len(bad) == 1, bad
    print(f"checker self-test: {len(cases)} made-up reads judged right", flush=True)


def fired(data):
    """How often each failpoint fired, from the nodes' logs."""
    out = {}
    for n in os.listdir(os.path.join(data, "nodes")):
        try:
            text = open(os.path.join(data, "nodes", n, "logs", "mgmtd.log")).read()
        except OSError:
            continue
        for name in re.findall(r"failpoint (\S+) fired", text):
            out[name] = out.get(name, 0) + 1
    return out


def node_dir(data, n):
    return os.path.join(data, "nodes", f"n{n}", "state")


def set_failpoints(data, nodes, spec):
    for n in nodes:
        path = os.path.join(node_dir(data, n), "failpoints")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in spec.items()))
        os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodectl", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seconds", type=float, default=100)
    ap.add_argument("--protect-timeout", type=float, default=240)
    a = ap.parse_args()
    self_test()
    c = Cluster(a.nodectl, a.data)
    dev = c.dev()
    key, secret = os.environ["CAIRN_ROOT_ACCESS_KEY"], os.environ["CAIRN_ROOT_SECRET_KEY"]
    nodes = dev["nodes"]
    ids = [n["node"] for n in nodes]
    clients = {n["node"]: client(n["s3"], key, secret) for n in nodes}
    by_id = {n["id"]: n["node"] for n in nodes}
    bucket = "history-%d" % random.randrange(1 << 30)
    clients[ids[0]].create_bucket(Bucket=bucket)
    # A key no writer touches: settling is "every node serves it" (a written key
    # may end deleted).
    clients[ids[0]].put_object(Bucket=bucket, Key="settle-probe", Body=b"probe")
    print(f"history check: {len(nodes)} nodes, {a.seconds:.0f} s of load", flush=True)

    h = History()
    stop = threading.Event()
    counts = {"put_ok": 0, "put_failed": 0, "delete_ok": 0, "delete_failed": 0,
              "reads": 0, "reads_unavailable": 0, "reads_failed": []}
    lock = threading.Lock()
    sizes = [1000, 64 << 10, 300 << 10]

    def writer(w):
        keys = [f"w{w}-k{i}" for i in range(4)]
        v = 0
        while not stop.is_set():
            v += 1
            k = random.choice(keys)
            node = random.choice(ids)
            s = time.time()
            if random.random() < 0.75:
                data = body(random.choice(sizes), f"{k}-{v}")
                value, kind = hashlib.md5(data).hexdigest(), "put"
                try:
                    clients[node].put_object(Bucket=bucket, Key=k, Body=data)
                    ok = True
                except Exception:
                    ok = False
            else:
                value, kind = ABSENT, "delete"
                try:
                    clients[node].delete_object(Bucket=bucket, Key=k)
                    ok = True
                except Exception:
                    ok = False
            h.op(k, s, time.time(), ok, value)
            with lock:
                counts[f"{kind}_{'ok' if ok else 'failed'}"] += 1

    def reader():
        while not stop.is_set():
            with h.lock:
                keys = list(h.ops)
            if not keys:
                time.sleep(0.05)
                continue
            k, node, s = random.choice(keys), random.choice(ids), time.time()
            try:
                got = clients[node].get_object(Bucket=bucket, Key=k)["Body"].read()
                value = hashlib.md5(got).hexdigest()
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code == "NoSuchKey":
                    value = ABSENT
                elif status == 503:
                    with lock:
                        counts["reads_unavailable"] += 1
                    continue
                else:
                    with lock:
                        counts["reads_failed"].append((k, node, status, code, str(e)[:120]))
                    continue
            except Exception:
                # Connection refused or timed out: the node is down or cut off.
                with lock:
                    counts["reads_unavailable"] += 1
                continue
            h.read(k, s, time.time(), value)
            with lock:
                counts["reads"] += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    t0 = time.time()

    def at(sec):
        time.sleep(max(0.0, t0 + sec * a.seconds / 100 - time.time()))

    def leader():
        for n in ids:
            try:
                lid = c.status(n)["leader"]
                if lid in by_id:
                    return by_id[lid]
            except Exception:
                pass
        return None

    set_failpoints(a.data, ids, FAILPOINTS)
    print(f"failpoints on: {FAILPOINTS}", flush=True)
    at(15)
    victim = random.choice(ids)
    c.stop(victim)
    print(f"{time.time()-t0:.0f} s: node {victim} killed (-9)", flush=True)
    at(30)
    c.start(victim)
    print(f"{time.time()-t0:.0f} s: node {victim} started", flush=True)
    at(45)
    ld = leader() or ids[0]
    minority = [ld, random.choice([n for n in ids if n != ld])]
    c.partition(minority)
    print(f"{time.time()-t0:.0f} s: nodes {minority} (leader {ld}) cut off", flush=True)
    at(62)
    c.heal()
    print(f"{time.time()-t0:.0f} s: healed", flush=True)
    at(72)
    ld = leader() or ids[-1]
    c.stop(ld)
    print(f"{time.time()-t0:.0f} s: leader node {ld} killed (-9)", flush=True)
    at(85)
    c.start(ld)
    print(f"{time.time()-t0:.0f} s: node {ld} started", flush=True)
    at(95)
    set_failpoints(a.data, ids, {})
    print(f"{time.time()-t0:.0f} s: failpoints off", flush=True)
    at(100)
    stop.set()
    for t in threads:
        t.join()
    log = open(os.path.join(a.data, "dev-up.log")).read()
    crashes = len(re.findall(r"mgmtd exited \(signal: 6", log))
    hits = fired(a.data)
    print(f"load: {json.dumps({k: v for k, v in counts.items() if k != 'reads_failed'})}; "
          f"failpoints fired: {json.dumps(hits)}; {crashes} mgmtd aborts (restarted by "
          "the supervisor)", flush=True)
    missing = [f for f in FAILPOINTS if not hits.get(f)]
    if missing:
        sys.exit(f"FAIL: failpoints that never fired (the run tested less than it says): "
                 f"{missing}")
    if counts["reads_failed"]:
        sys.exit(f"FAIL: {len(counts['reads_failed'])} GETs failed with an error other than "
                 f"unavailable, e.g. {counts['reads_failed'][:3]}")
    bad, late = h.check()
    if bad:
        for k, s, v in bad[:3]:
            print(f"  {k}: read at {s - t0:.2f} got {v[:8]}; ops "
                  f"{[(round(o[0]-t0, 2), round(o[1]-t0, 2), o[2], o[3][:6]) for o in h.ops[k]]}")
        sys.exit(f"FAIL: history checker: {len(bad)} reads outside the allowed values "
                 "(lost acknowledged write, resurrected delete or stale read)")
    print(f"history checker: {len(h.reads)} reads, all allowed ({late} returned a failed "
          "write's value that took effect late)", flush=True)
    if counts["put_ok"] == 0 or counts["delete_ok"] == 0 or len(h.reads) < 100:
        sys.exit("FAIL: too little load to check anything")

    # Faults over: the cluster must settle and return to full protection.
    since = time.time()
    wait_settled(c, nodes, clients, bucket, "settle-probe", since, timeout=a.protect_timeout)
    st = None
    while time.time() - since < a.protect_timeout:
        try:
            st = c.status(ids[0])
            if st["fully_protected"] and all(n["state"] == "up" for n in st["nodes"]):
                break
        except Exception:
            pass
        time.sleep(1)
    else:
        sys.exit(f"FAIL: not fully protected {a.protect_timeout:.0f} s after the faults: {st}")
    print(f"settled and fully protected {time.time()-since:.1f} s after the faults",
          flush=True)

    def final_reads(label):
        end = time.time()
        for k in sorted(h.ops):
            seen = set()
            for n in ids:
                try:
                    got = clients[n].get_object(Bucket=bucket, Key=k)["Body"].read()
                    seen.add(hashlib.md5(got).hexdigest())
                except ClientError as e:
                    if e.response.get("Error", {}).get("Code") != "NoSuchKey":
                        sys.exit(f"FAIL: {label}: {k} through node {n}: {e}")
                    seen.add(ABSENT)
            if len(seen) != 1:
                sys.exit(f"FAIL: {label}: nodes disagree on {k}: {seen}")
            vals, late = h.allowed(k, end, end)
            v = seen.pop()
            if v not in vals and v not in late:
                sys.exit(f"FAIL: {label}: {k} reads {v}, allowed {vals | late}")
        print(f"{label}: {len(h.ops)} keys read the same through all {len(ids)} nodes, "
              "each an allowed value", flush=True)

    final_reads("after the faults")
    gc_check(c, nodes)
    final_reads("after the collector")
    print("history check passed")


if __name__ == "__main__":
    main()

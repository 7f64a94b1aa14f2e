#!/usr/bin/env python3
"""Cluster fault check against a running `nodectl dev up --nodes N`.

Real S3 clients (boto3) write objects through every node. Then, under a
concurrent read/write load, it kills -9 M nodes (`nodectl dev stop K --kill`,
pids as `nodectl dev status --json` lists them), reads every acknowledged object
back by hash through the surviving nodes, starts the nodes again and waits until
`nodectl cluster status --json` reports full protection, and reads everything
once more. A history checker verifies, per key, that every read returned a
version no older than the last write acknowledged before the read began (no lost
acknowledged write, read-after-write across nodes).

Usage: cluster_check.py --nodectl PATH --data DIR [--kill 2] [--objects 60]
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import sys
import threading
import time

import boto3
import botocore.exceptions
from botocore.config import Config


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


class Cluster:
    def __init__(self, nodectl, data):
        self.nodectl, self.data = nodectl, data

    def dev(self):
        return json.loads(sh(self.nodectl, "dev", "status", "--json", "--data", self.data))

    def status(self, node):
        return json.loads(sh(self.nodectl, "cluster", "status", "--json", "--data", self.data,
                             "--node", str(node)))

    def health(self, node):
        """`nodectl cluster health`'s exit code (0 healthy, 1 degraded, 2 unavailable)."""
        return subprocess.run([self.nodectl, "cluster", "health", "--data", self.data,
                               "--node", str(node)], capture_output=True, text=True).returncode

    def partition(self, nodes):
        sh(self.nodectl, "dev", "partition", ",".join(map(str, nodes)), "--data", self.data)

    def heal(self):
        sh(self.nodectl, "dev", "heal", "--data", self.data)

    def stop(self, node):
        sh(self.nodectl, "dev", "stop", str(node), "--kill", "--data", self.data)

    def stop_gently(self, node):
        sh(self.nodectl, "dev", "stop", str(node), "--data", self.data)

    def start(self, node):
        sh(self.nodectl, "dev", "start", str(node), "--data", self.data)


class Bmc:
    """ci/bmc-sim.sh: ipmi_sim on a free UDP port, its chassis a QEMU VM."""
    PASSWORD = "fence-pw-1234"

    def __init__(self):
        import socket
        self.dir = tempfile.mkdtemp(prefix="cairn-fence-bmc-")
        ports = []
        for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
            s = socket.socket(socket.AF_INET, kind)
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
            s.close()
        self.port = ports[0]
        self.proc = subprocess.Popen(
            [os.path.join(os.path.dirname(os.path.abspath(__file__)), "bmc-sim.sh"),
             self.dir, str(ports[0]), str(ports[1]), self.PASSWORD],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t = time.time()
        while "is on" not in self.power():
            if time.time() - t > 20:
                sys.exit("FAIL: the simulated BMC did not come up in 20 s")
            time.sleep(0.3)

    def power(self):
        return subprocess.run(
            ["ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", str(self.port),
             "-U", "admin", "-P", self.PASSWORD, "power", "status"],
            capture_output=True, text=True).stdout

    def close(self):
        self.proc.kill()
        subprocess.run(["pkill", "-f", self.dir])
        shutil.rmtree(self.dir, ignore_errors=True)


def fence_setup(c, via, node_id):
    """Gives node `node_id` a BMC with fencing on, through node `via`."""
    bmc = Bmc()
    pw = os.path.join(bmc.dir, "pw")
    with open(pw, "w") as f:
        f.write(bmc.PASSWORD + "\n")
    sh(c.nodectl, "node", "bmc", "set", node_id, "--address", f"127.0.0.1:{bmc.port}",
       "--user", "admin", "--password-file", pw, "--fence", "--data", c.data, "--node", str(via))
    print(f"node {node_id}: simulated BMC on UDP {bmc.port}, fencing on", flush=True)
    return bmc


def fence_verify(c, via, node_id, bmc):
    """The node was fenced (its BMC reports power off, its record says when)."""
    try:
        show = json.loads(sh(c.nodectl, "node", "bmc", "show", node_id, "--json",
                             "--data", c.data, "--node", str(via)))[0]
        power = bmc.power()
        if not show.get("fenced_ms") or "is off" not in power:
            sys.exit(f"FAIL: node {node_id} rebuilt without being fenced: {show} / {power}")
        print(f"node {node_id} was fenced before its data was rebuilt "
              f"(BMC: {power.strip()})", flush=True)
    finally:
        bmc.close()


def client(endpoint, key, secret):
    cfg = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5,
                 read_timeout=60, request_checksum_calculation="when_required",
                 response_checksum_validation="when_required")
    return boto3.client("s3", endpoint_url="http://" + endpoint, aws_access_key_id=key,
                        aws_secret_access_key=secret, region_name="us-east-1", config=cfg)


def body(size, tag):
    # Unique bytes per object: a repeated seed block plus the tag.
    seed = hashlib.sha256(tag.encode()).digest()
    reps = size // len(seed) + 1
    return (seed * reps)[:size]


class History:
    """Per key: every write tried (start, acknowledged-at or None, hash) and every
    read (start, end, hash). Each key has one sequential writer, so its versions are
    ordered by start time. A read must return the newest version acknowledged
    before it began, or a later one that began before it ended (acknowledged or not:
    a failed write may still have taken effect, but never behind a later one)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.writes = {}   # key -> list of (start, ack or None, md5)
        self.reads = []    # (key, start, end, md5)

    def wrote(self, key, start, ack, md5):
        with self.lock:
            self.writes.setdefault(key, []).append((start, ack, md5))

    def acked(self, key):
        return [w for w in self.writes.get(key, []) if w[1] is not None]

    def read(self, key, start, end, md5):
        with self.lock:
            self.reads.append((key, start, end, md5))

    def check(self):
        bad = []
        for key, start, end, md5 in self.reads:
            ws = self.writes.get(key, [])
            floor = max((w for w in ws if w[1] is not None and w[1] < start),
                        key=lambda w: w[0], default=None)
            allowed = {w[2] for w in ws
                       if w[0] < end and (floor is None or w[0] >= floor[0])}
            if md5 not in allowed:
                bad.append((key, md5, floor[2] if floor else None))
        return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodectl", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--kill", type=int, default=2)
    ap.add_argument("--objects", type=int, default=60)
    ap.add_argument("--protect-timeout", type=float, default=180)
    ap.add_argument("--partition", action="store_true",
                    help="instead: cut the leader and one other node off from the rest "
                         "(cluster started with --netns), under load, then heal")
    ap.add_argument("--wipe", type=int, default=0,
                    help="then wipe this node (drives and state), let it rejoin as a new "
                         "node, and wait until its share is rebuilt (needs a short "
                         "--repair-grace on dev up)")
    ap.add_argument("--rejoin", action="append", default=[],
                    help="then stop these nodes (voters; comma-separated) until the leader "
                         "replaces them as voters, start them again, and require them up, "
                         "serving S3 promptly, and the cluster fully protected within "
                         "--rejoin-bound seconds (repeatable: one round each)")
    ap.add_argument("--rejoin-bound", type=float, default=90)
    ap.add_argument("--fence", action="store_true",
                    help="with --wipe: the wiped node's chassis is a QEMU VM behind a "
                         "simulated BMC (ci/bmc-sim.sh, set with --fence); the cluster must "
                         "power it off before it rebuilds the node's data")
    ap.add_argument("--drain", type=int, default=0,
                    help="then drain this node: removal is refused while it holds "
                         "fragments, allowed once repair has moved them all, and every "
                         "object still reads back with the node stopped")
    a = ap.parse_args()
    c = Cluster(a.nodectl, a.data)
    dev = c.dev()
    if os.environ.get("CAIRN_ROOT_ACCESS_KEY"):
        key, secret = os.environ["CAIRN_ROOT_ACCESS_KEY"], os.environ["CAIRN_ROOT_SECRET_KEY"]
    else:
        creds = json.load(open(os.path.join(a.data, "state", "root-credentials.json")))
        key, secret = creds["access_key"], creds["secret_key"]
    nodes = dev["nodes"]
    clients = {n["node"]: client(n["s3"], key, secret) for n in nodes}
    print(f"cluster {dev['cluster_id']}: {len(nodes)} nodes", flush=True)

    bucket = "check-%d" % random.randrange(1 << 30)
    clients[1].create_bucket(Bucket=bucket)
    if a.partition:
        return partition_check(a, c, nodes, clients, bucket)
    hist = History()
    acked = {}  # key -> md5 of the last acknowledged version
    sizes = [1000, 100 << 10, 300 << 10, 3 << 20]
    t0 = time.time()
    for i in range(a.objects):
        k = f"obj-{i}"
        data = body(sizes[i % len(sizes)], f"{k}-v0")
        node = nodes[i % len(nodes)]["node"]
        s = time.time()
        clients[node].put_object(Bucket=bucket, Key=k, Body=data)
        md5 = hashlib.md5(data).hexdigest()
        hist.wrote(k, s, time.time(), md5)
        acked[k] = md5
    print(f"wrote {a.objects} objects through {len(nodes)} nodes in {time.time()-t0:.1f} s",
          flush=True)

    victims = [n["node"] for n in nodes][-a.kill:] if a.kill else []
    survivors = [n["node"] for n in nodes if n["node"] not in victims]
    stop = threading.Event()
    errors = {"write_refused": 0, "read_failed": 0}
    lock = threading.Lock()

    def writer(wid):
        # Each writer owns its keys: one writer per key keeps the history exact.
        v = 0
        while not stop.is_set():
            v += 1
            k = f"w{wid}-{v % 8}"
            data = body(random.choice(sizes), f"{k}-{v}")
            node = random.choice(survivors)
            s = time.time()
            md5 = hashlib.md5(data).hexdigest()
            try:
                clients[node].put_object(Bucket=bucket, Key=k, Body=data)
            except Exception:
                hist.wrote(k, s, None, md5)
                with lock:
                    errors["write_refused"] += 1
                continue
            hist.wrote(k, s, time.time(), md5)
            with lock:
                acked[k] = md5

    def reader():
        while not stop.is_set():
            with lock:
                keys = list(acked)
            k = random.choice(keys)
            node = random.choice(survivors)
            s = time.time()
            try:
                got = clients[node].get_object(Bucket=bucket, Key=k)["Body"].read()
            except Exception:
                with lock:
                    errors["read_failed"] += 1
                continue
            hist.read(k, s, time.time(), hashlib.md5(got).hexdigest())

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(3)
    for v in victims:
        pids = [n for n in c.dev()["nodes"] if n["node"] == v][0]
        print(f"kill -9 node {v} (datapathd {pids['datapathd_pid']}, mgmtd {pids['mgmtd_pid']})",
              flush=True)
        c.stop(v)
    time.sleep(12)
    stop.set()
    for t in threads:
        t.join()
    print(f"load: {sum(len(hist.acked(k)) for k in hist.writes)} acknowledged writes, "
          f"{len(hist.reads)} reads; {errors['write_refused']} writes refused, "
          f"{errors['read_failed']} reads failed while nodes were down", flush=True)

    def read_all(via, label):
        t = time.time()
        for i, (k, md5) in enumerate(sorted(acked.items())):
            node = via[i % len(via)]
            got = clients[node].get_object(Bucket=bucket, Key=k)["Body"].read()
            if hashlib.md5(got).hexdigest() != md5:
                sys.exit(f"FAIL: {k} through node {node} has the wrong bytes ({label})")
        print(f"{label}: all {len(acked)} acknowledged objects bit-exact through nodes {via} "
              f"({time.time()-t:.1f} s)", flush=True)

    read_all(survivors, f"with {len(victims)} nodes down")
    st = c.status(survivors[0])
    print(f"status with nodes down: {st['objects']}", flush=True)
    if (code := c.health(survivors[0])) != 1:
        sys.exit(f"FAIL: cluster health with nodes down exited {code}, not 1 (degraded)")
    bad = hist.check()
    if bad:
        sys.exit(f"FAIL: history checker: {len(bad)} stale or unknown reads, e.g. {bad[:3]}")
    print(f"history checker: {len(hist.reads)} reads, every one saw its key's latest "
          "acknowledged write or a concurrent one", flush=True)
    if errors["read_failed"]:
        sys.exit(f"FAIL: {errors['read_failed']} reads failed with only {len(victims)} nodes down")

    for v in victims:
        c.start(v)
    t = time.time()
    st = wait_protected(c, survivors[0], a.protect_timeout, "restart")
    print(f"nodes back: full protection after {time.time()-t:.1f} s: {st['objects']}", flush=True)
    if (code := c.health(survivors[0])) != 0:
        sys.exit(f"FAIL: cluster health with every node back exited {code}, not 0")
    read_all([n["node"] for n in nodes], "after restart")
    scrub_check(c, nodes)
    resp_check(nodes, key, secret)
    nfs_check(c, nodes, clients)
    versions_verify = versions_check(nodes, clients)
    snapshots_verify = snapshots_check(c, nodes, clients)
    gc_check(c, nodes)
    lifecycle_check(c, nodes, clients)
    read_all([n["node"] for n in nodes], "after the collector")
    versions_verify("after the collector")
    snapshots_verify("after the collector")
    stop_drains_check(c, nodes, clients, bucket, a.protect_timeout)

    for group in a.rejoin:
        rejoin_check(group, a.rejoin_bound, c, clients, bucket, acked, survivors)

    if a.wipe:
        w = a.wipe
        entry = [n for n in c.dev()["nodes"] if n["node"] == w][0]
        old = entry["id"]
        bmc = fence_setup(c, survivors[0], old) if a.fence else None
        c.stop(w)
        for sub in ("drives", "state"):
            shutil.rmtree(os.path.join(entry["dir"], sub), ignore_errors=True)
        print(f"node {w} ({old}) wiped: drives and state gone", flush=True)
        c.start(w)
        t = time.time()
        new = None
        while time.time() - t < a.protect_timeout:
            cur = [n for n in c.dev()["nodes"] if n["node"] == w][0]["id"]
            try:
                st = c.status(survivors[0])
            except subprocess.CalledProcessError:
                st = None
            # The replacement must be up, and the wiped node seen down (until the
            # failure detector notices, its address answers for it).
            if st and cur != old and any(n["id"] == cur and n["state"] == "up"
                                         for n in st["nodes"]) \
                    and any(n["id"] == old and n["state"] == "down" for n in st["nodes"]):
                new = cur
                if st["fully_protected"]:
                    break
            time.sleep(1)
        else:
            sys.exit(f"FAIL: wiped node's share not rebuilt in {a.protect_timeout:.0f} s: {st}")
        print(f"node {w} rejoined as {new}; its share rebuilt, full protection after "
              f"{time.time()-t:.1f} s (repair: {st['repair']})", flush=True)
        if bmc:
            fence_verify(c, survivors[0], old, bmc)
        sh(c.nodectl, "node", "remove", old, "--data", c.data, "--node", str(survivors[0]))
        st = c.status(survivors[0])
        if any(n["id"] == old for n in st["nodes"]) or not st["fully_protected"]:
            sys.exit(f"FAIL: after removing {old}: {st}")
        print(f"old node {old} removed; still fully protected", flush=True)
        read_all([n["node"] for n in nodes], "after replacing a node")
        versions_verify("after replacing a node")

    if a.drain:
        d = a.drain
        via = [n["node"] for n in nodes if n["node"] != d][0]
        target = [n for n in c.dev()["nodes"] if n["node"] == d][0]["id"]
        sh(c.nodectl, "node", "drain", target, "--data", c.data, "--node", str(via))
        refused = subprocess.run(
            [c.nodectl, "node", "remove", target, "--data", c.data, "--node", str(via)],
            capture_output=True, text=True)
        if refused.returncode == 0:
            sys.exit(f"FAIL: node {target} was removed while it still held fragments")
        print(f"node {d} ({target}) draining; removal refused meanwhile: "
              f"{refused.stderr.strip().splitlines()[-1] if refused.stderr else '?'}", flush=True)
        t = time.time()
        # `--follow` stays until repair has moved everything: removal must then
        # be allowed at once.
        try:
            f = subprocess.run(
                [c.nodectl, "node", "drain", target, "--follow", "--data", c.data,
                 "--node", str(via)],
                capture_output=True, text=True, timeout=a.protect_timeout)
        except subprocess.TimeoutExpired:
            sys.exit(f"FAIL: drain --follow still following after {a.protect_timeout:.0f} s: "
                     f"{c.status(via)}")
        if f.returncode != 0 or "drained" not in f.stdout:
            sys.exit(f"FAIL: drain --follow: {f.returncode} {f.stdout} {f.stderr}")
        r = subprocess.run(
            [c.nodectl, "node", "remove", target, "--data", c.data, "--node", str(via)],
            capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: drain --follow returned, but removal was refused: "
                     f"{r.stderr.strip()} {c.status(via)}")
        st = c.status(via)
        if any(n["id"] == target for n in st["nodes"]) or not st["fully_protected"]:
            sys.exit(f"FAIL: after draining and removing {target}: {st}")
        print(f"node {d} drained in {time.time()-t:.1f} s and removed; "
              f"still fully protected: {st['objects']}", flush=True)
        c.stop(d)
        read_all([n["node"] for n in nodes if n["node"] != d], "with the drained node stopped")
        versions_verify("with the drained node stopped", [n["node"] for n in nodes if n["node"] != d])
    # Last: it kills the leader, and the steps above pick their nodes by number.
    live = [n for n in nodes if n["node"] != a.drain]
    replication_check(c, live, clients, key, secret, a.protect_timeout)
    print("cluster check passed")


def resp(host, port, key, secret, *cmds):
    """Sends RESP commands on one connection (AUTH first) and returns the replies,
    parsed just enough for this check: simple strings, errors, integers, bulk
    strings (None for a miss)."""
    import socket
    s = socket.create_connection((host, port), timeout=30)
    f = s.makefile("rb")

    def enc(args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        return out

    def reply():
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = f.read(n + 2)[:-2]
            return data
        if kind == b":":
            return int(rest)
        if kind == b"-":
            return RuntimeError(rest.decode())
        return rest.decode()
    all_cmds = [("AUTH", key, secret)] + list(cmds)
    s.sendall(b"".join(enc(c) for c in all_cmds))
    out = [reply() for _ in all_cmds]
    s.close()
    if out[0] != "OK":
        sys.exit(f"FAIL: RESP AUTH on {host}:{port}: {out[0]}")
    return out[1:]


def resp_check(nodes, key, secret):
    """A SET acknowledged through one node is read through every node at once; a
    DEL likewise (RESP goes through the same committed metadata as S3)."""
    hosts = [n["s3"].rsplit(":", 1)[0] for n in nodes]
    value = os.urandom(1 << 20)
    for i, writer in enumerate(hosts):
        k = f"coherence-{i}"
        assert resp(writer, 6379, key, secret, ("SET", k, value)) == ["OK"]
        for h in hosts:
            got, = resp(h, 6379, key, secret, ("GET", k))
            if got != value:
                sys.exit(f"FAIL: RESP SET {k} through {writer}, GET through {h}: "
                         f"{'miss' if got is None else 'other bytes'}")
        assert resp(writer, 6379, key, secret, ("DEL", k)) == [1]
        for h in hosts:
            if resp(h, 6379, key, secret, ("EXISTS", k)) != [0]:
                sys.exit(f"FAIL: RESP DEL {k} through {writer}, still there through {h}")
    print(f"RESP: a SET (1 MiB) through each of {len(hosts)} nodes read back through every "
          "node at once, and its DEL seen everywhere", flush=True)


def nfs_check(c, nodes, clients):
    """A bucket exported over NFS: its handles (MOUNT's root, LOOKUP's directory and
    file) are the same bytes from every node; a file is read through every node with
    the handle node 1 gave; a file created and written (FILE_SYNC) through node 2 under
    node 1's root handle is read over S3 through node 1."""
    from nfs_rpc import Rpc
    bucket = "nfs-%d" % random.randrange(1 << 30)
    clients[1].create_bucket(Bucket=bucket)
    sh(c.nodectl, "export", "add", "--data", c.data, "root", bucket, "--client", "127.0.0.0/8")
    data = os.urandom(3_000_001)
    clients[1].put_object(Bucket=bucket, Key="dir/file", Body=data)
    time.sleep(3)  # every node reads the exports every 2 s
    handles, rpcs = {}, {}
    for n in nodes:
        host, port = n["nfs"].rsplit(":", 1)
        rpc = rpcs[n["node"]] = Rpc(host, int(port))
        root = rpc.mount(f"/root/{bucket}")
        d = rpc.lookup(root, "dir")
        handles[n["node"]] = (root, d, rpc.lookup(d, "file"))
    first = handles[nodes[0]["node"]]
    differ = [k for k, h in handles.items() if h != first]
    if differ:
        sys.exit(f"FAIL: NFS handles differ between node {nodes[0]['node']} and nodes {differ}")
    for k, rpc in rpcs.items():
        if rpc.read_all(first[2]) != data:
            sys.exit(f"FAIL: NFS READ through node {k} with node 1's handle: other bytes")
    written = os.urandom(1 << 20)
    fh = rpcs[nodes[1]["node"]].create(first[0], "from-nfs")
    rpcs[nodes[1]["node"]].write_sync(fh, 0, written)
    got = clients[1].get_object(Bucket=bucket, Key="from-nfs")["Body"].read()
    if got != written:
        sys.exit("FAIL: a file written over NFS through node 2 reads otherwise over S3 through node 1")
    for rpc in rpcs.values():
        rpc.close()
    print(f"NFS: root, directory and file handles identical from all {len(nodes)} nodes; "
          "the file read through every node with node 1's handle; a file written through "
          "node 2 read over S3 through node 1", flush=True)


def wait_protected(c, node, timeout, after, also=lambda: True):
    """Until `node`'s cluster status says every node is up and every object fully
    protected (and `also()` holds); returns that status. Fails the check after
    `timeout` seconds."""
    t, st = time.time(), None
    while True:
        try:
            st = c.status(node)
            if st["fully_protected"] and all(n["state"] == "up" for n in st["nodes"]) and also():
                return st
        except Exception:  # nodes starting: status fails, S3 refuses or answers 503
            pass
        if time.time() - t > timeout:
            sys.exit(f"FAIL: not fully protected {timeout:.0f} s after {after}: {st}")
        time.sleep(1)


def stop_drains_check(c, nodes, clients, bucket, timeout):
    """A node stopped gently (SIGTERM) finishes the upload it is receiving: a PUT
    whose body is still arriving when `nodectl dev stop` is given answers 200, and
    the object reads back through another node. Then the node starts again."""
    node = nodes[-1]["node"]
    other = clients[nodes[0]["node"]]
    data = os.urandom(6 << 20)
    path = os.path.join(c.data, "drain-body")
    with open(path, "wb") as f:
        f.write(data)
    url = clients[node].generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "drained"}, ExpiresIn=600)
    # About 3 s of body at 2 MiB/s; the stop comes 1 s in.
    put = subprocess.Popen(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", path,
                            "--limit-rate", "2M", url], stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    t = time.time()
    c.stop_gently(node)
    stopped_in = time.time() - t
    code = put.communicate(timeout=60)[0].strip()
    if code != "200":
        sys.exit(f"FAIL: a PUT in flight when its node was stopped answered {code!r}")
    got = other.get_object(Bucket=bucket, Key="drained")["Body"].read()
    if got != data:
        sys.exit("FAIL: the PUT drained at stop reads back different bytes")
    c.start(node)
    t0 = time.time()
    # Served through the restarted node itself, and the cluster whole.
    wait_protected(c, nodes[0]["node"], timeout, "a gentle stop", also=lambda:
                   clients[node].get_object(Bucket=bucket, Key="drained")["Body"].read() == data)
    print(f"gentle stop: node {node} finished a 6 MiB PUT in flight (200, read back through "
          f"node {nodes[0]['node']}), stopped in {stopped_in:.1f} s, back in "
          f"{time.time()-t0:.1f} s", flush=True)


def gc_check(c, nodes, timeout=180):
    """Collector rounds on every node (the cluster runs with a short CAIRN_GC_EVERY)
    until none has a chunk left that no manifest references: the remains of the
    writes cut off by kill -9 and the copies repair replaced. The caller then reads
    every acknowledged object back, so nothing live was taken."""
    t = time.time()
    first, left, deleted = None, {}, 0
    while True:
        left, deleted = {}, 0
        for n in nodes:
            r = subprocess.run([c.nodectl, "gc", "--json", "--data", c.data,
                                "--node", str(n["node"])], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"FAIL: gc on node {n['node']}: {r.stderr.strip()} {r.stdout.strip()}")
            st = json.loads(r.stdout)
            deleted += st["deleted_total"]
            if st["last"]["unreferenced"]:
                left[n["node"]] = st["last"]["unreferenced"]
        if first is None:
            first = sum(left.values())
        if not left:
            break
        if time.time() - t > timeout:
            sys.exit(f"FAIL: unreferenced chunks left {timeout} s into collection: {left}")
        time.sleep(5)
    print(f"collector: {first} unreferenced chunks at the first round, {deleted} deleted by "
          f"the collectors since their start, none left on {len(nodes)} nodes "
          f"({time.time()-t:.1f} s)", flush=True)


def lifecycle_check(c, nodes, clients, timeout=90):
    """A lifecycle rule carried out for the cluster (CAIRN_LIFECYCLE_DAY=1 on this
    cluster: a rule's day is a second): what it selects expires, nothing else, and
    each expiry is done once (the leader runs the passes; a second proposal of the
    same deletion would be refused, and is not counted)."""
    bucket = "lc-%d" % random.randrange(1 << 30)
    ids = [n["node"] for n in nodes]
    clients[ids[0]].create_bucket(Bucket=bucket)
    for i, node in enumerate(ids):
        for prefix in ("lc/", "keep/"):
            clients[node].put_object(Bucket=bucket, Key=f"{prefix}{i}", Body=f"{prefix}{i}".encode())
    before = sum(node_status(c, n)["lifecycle"]["expired"] for n in ids)
    clients[ids[-1]].put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={"Rules": [{"ID": "lc", "Status": "Enabled", "Filter": {"Prefix": "lc/"},
                                           "Expiration": {"Days": 1}}]})
    t = time.time()
    while clients[ids[1]].list_objects_v2(Bucket=bucket, Prefix="lc/")["KeyCount"]:
        if time.time() - t > timeout:
            sys.exit(f"FAIL: lifecycle: lc/ objects left {timeout} s after the rule")
        time.sleep(1)
    kept = clients[ids[2]].list_objects_v2(Bucket=bucket, Prefix="keep/")["KeyCount"]
    if kept != len(ids):
        sys.exit(f"FAIL: lifecycle: {kept} of {len(ids)} keep/ objects left")
    expired = sum(node_status(c, n)["lifecycle"]["expired"] for n in ids) - before
    if expired != len(ids):
        sys.exit(f"FAIL: lifecycle: {expired} expiries counted across the nodes, {len(ids)} objects")
    for k in range(len(ids)):
        clients[ids[0]].delete_object(Bucket=bucket, Key=f"keep/{k}")
    clients[ids[0]].delete_bucket(Bucket=bucket)
    print(f"lifecycle: {len(ids)} objects expired once each by the cluster, "
          f"{len(ids)} others kept ({time.time()-t:.1f} s)", flush=True)


def versions_check(nodes, clients):
    """A versioned bucket written through every node: each node numbers
    versions alike (the version sequence is applied from the log), lists the
    same versions, and reads each one's bytes. Returns a function that checks
    it all again (after the collector has run: noncurrent versions keep their
    chunks)."""
    bucket = "vers-%d" % random.randrange(1 << 30)
    ids = [n["node"] for n in nodes]
    clients[ids[0]].create_bucket(Bucket=bucket)
    clients[ids[1]].put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    bodies = {}
    for i, node in enumerate(ids):
        for round_ in range(3):
            body = os.urandom(4096 + 1000 * i) if round_ != 1 else os.urandom(3 << 20)
            r = clients[node].put_object(Bucket=bucket, Key=f"v/{i % 3}", Body=body)
            bodies[(f"v/{i % 3}", r["VersionId"])] = hashlib.md5(body).hexdigest()
    marker = clients[ids[-1]].delete_object(Bucket=bucket, Key="v/0")["VersionId"]

    def listing(node):
        pages = clients[node].get_paginator("list_object_versions").paginate(Bucket=bucket)
        return sorted((v["Key"], v["VersionId"], v["IsLatest"], "Size" in v) for p in pages
                      for v in p.get("Versions", []) + p.get("DeleteMarkers", []))

    def verify(label, via=None):
        t = time.time()
        via = via or ids
        first = listing(via[0])
        if len(first) != len(bodies) + 1:
            sys.exit(f"FAIL: versions ({label}): {len(first)} listed, {len(bodies)} written + 1 marker")
        for node in via:
            if listing(node) != first:
                sys.exit(f"FAIL: versions ({label}): node {node} lists other versions than node {via[0]}")
        for j, ((k, v), md5) in enumerate(sorted(bodies.items())):
            node = via[j % len(via)]
            got = clients[node].get_object(Bucket=bucket, Key=k, VersionId=v)["Body"].read()
            if hashlib.md5(got).hexdigest() != md5:
                sys.exit(f"FAIL: versions ({label}): {k} version {v} through node {node}: wrong bytes")
        try:
            clients[via[-1]].get_object(Bucket=bucket, Key="v/0")
            sys.exit(f"FAIL: versions ({label}): v/0 readable under its delete marker {marker}")
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] != "NoSuchKey":
                raise
        print(f"versions ({label}): {len(bodies)} versions and a delete marker, listed alike on "
              f"{len(via)} nodes, each read bit-exact ({time.time()-t:.1f} s)", flush=True)

    verify("written")
    return verify


def snapshots_check(c, nodes, clients):
    """A bucket written through every node, snapshotted with nodectl, then
    overwritten and emptied through other nodes: every node reads the
    snapshot's old bytes under .snapshot/NAME/ and lists it alike (the
    snapshot, and what it keeps, are applied from the log). Returns a function
    that checks it all again (after the collector has run: kept versions keep
    their chunks)."""
    bucket = "snap-%d" % random.randrange(1 << 30)
    ids = [n["node"] for n in nodes]
    clients[ids[0]].create_bucket(Bucket=bucket)
    bodies = {}
    for i, node in enumerate(ids):
        body = os.urandom(3 << 20) if i % 2 else os.urandom(5000 + i)
        clients[node].put_object(Bucket=bucket, Key=f"s/{i}", Body=body)
        bodies[f"s/{i}"] = hashlib.md5(body).hexdigest()
    sh(c.nodectl, "snapshot", "create", "--data", c.data, "root", bucket, "before")
    for i in range(len(ids)):
        other = clients[ids[(i + 1) % len(ids)]]
        other.put_object(Bucket=bucket, Key=f"s/{i}", Body=b"after")
        other.delete_object(Bucket=bucket, Key=f"s/{i}")

    def listing(node):
        pages = clients[node].get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=".snapshot/before/")
        return sorted(o["Key"] for p in pages for o in p.get("Contents", []))

    def verify(label):
        t = time.time()
        want = sorted(f".snapshot/before/{k}" for k in bodies)
        for node in ids:
            if (got := listing(node)) != want:
                sys.exit(f"FAIL: snapshot ({label}): node {node} lists {got}, not {want}")
            if clients[node].list_objects_v2(Bucket=bucket).get("KeyCount") != 0:
                sys.exit(f"FAIL: snapshot ({label}): the emptied bucket lists keys through node {node}")
        for j, (k, md5) in enumerate(sorted(bodies.items())):
            node = ids[j % len(ids)]
            got = clients[node].get_object(Bucket=bucket, Key=f".snapshot/before/{k}")["Body"].read()
            if hashlib.md5(got).hexdigest() != md5:
                sys.exit(f"FAIL: snapshot ({label}): {k} through node {node}: wrong bytes")
        print(f"snapshot ({label}): {len(bodies)} objects overwritten and deleted since, read "
              f"bit-exact under .snapshot/before/ and listed alike through {len(ids)} nodes "
              f"({time.time()-t:.1f} s)", flush=True)

    verify("written")
    return verify


def replication_check(c, nodes, clients, key, secret, timeout):
    """The cluster replicates a bucket to another cluster (a single node started
    here); the leader, which ships, is killed with versions queued: the new
    leader ships the backlog, and the destination ends with every version of
    every key, in order, none twice."""
    import socket

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    work = tempfile.mkdtemp(prefix="cairn-repl-dest-")
    port = free_port()
    env = dict(os.environ, CAIRN_ROOT_ACCESS_KEY=key, CAIRN_ROOT_SECRET_KEY=secret)
    log = open(os.path.join(work, "node.log"), "ab")
    dest = subprocess.Popen(
        [c.nodectl, "dev", "up", "--data", os.path.join(work, "data"), "--drive-size", "1G",
         "--s3", f"127.0.0.1:{port}", "--resp", f"127.0.0.1:{free_port()}",
         "--nfs", f"127.0.0.1:{free_port()}"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        dst = client(f"127.0.0.1:{port}", key, secret)
        t = time.time()
        while True:
            try:
                dst.list_buckets()
                break
            except Exception:
                if time.time() - t > 60 or dest.poll() is not None:
                    sys.exit("FAIL: replication: the destination node did not start")
                time.sleep(0.2)
        ids = [n["node"] for n in nodes]
        src_bucket = "repl-%d" % random.randrange(1 << 30)
        for cl, b in ((dst, "replica"), (clients[ids[0]], src_bucket)):
            cl.create_bucket(Bucket=b)
            cl.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
        with open(os.path.join(work, "secret"), "w") as f:
            f.write(secret)
        sh(c.nodectl, "replication", "set", "root", src_bucket, "--endpoint",
           f"http://127.0.0.1:{port}", "--to-bucket", "replica", "--access-key", key,
           "--secret-key-file", os.path.join(work, "secret"), "--data", c.data,
           "--node", str(ids[0]))
        for i in range(10):
            clients[ids[i % len(ids)]].put_object(Bucket=src_bucket, Key=f"r/{i % 4}",
                                                   Body=os.urandom(2000 + i))
        by_id = {n["id"]: n["node"] for n in c.dev()["nodes"]}
        leader = by_id[c.status(ids[0])["leader"]]
        others = [n for n in ids if n != leader]
        c.stop(leader)
        print(f"replication: node {leader} (the leader, which ships) killed", flush=True)
        for i in range(10, 20):
            for _ in range(60):
                try:
                    clients[others[i % len(others)]].put_object(
                        Bucket=src_bucket, Key=f"r/{i % 4}", Body=os.urandom(2000 + i))
                    break
                except Exception:
                    time.sleep(0.5)  # until a new leader is elected
            else:
                sys.exit("FAIL: replication: no write taken after the leader was killed")
        clients[others[0]].delete_object(Bucket=src_bucket, Key="r/0")
        t = time.time()
        while True:
            st = json.loads(sh(c.nodectl, "replication", "status", "root", src_bucket, "--json",
                               "--data", c.data, "--node", str(others[0])))
            if st["backlog"] == 0:
                break
            if time.time() - t > timeout:
                sys.exit(f"FAIL: replication: backlog not shipped after the leader's death: {st}")
            time.sleep(0.5)

        def history(cl, b):
            out = []
            for page in cl.get_paginator("list_object_versions").paginate(Bucket=b):
                for v in page.get("Versions", []):
                    got = cl.get_object(Bucket=b, Key=v["Key"], VersionId=v["VersionId"])
                    out.append((v["Key"], v["VersionId"], hashlib.md5(got["Body"].read()).hexdigest()))
                for m in page.get("DeleteMarkers", []):
                    out.append((m["Key"], m["VersionId"], None))
            out.sort()
            return [(k, h) for k, _, h in out]

        want, got = history(clients[others[0]], src_bucket), history(dst, "replica")
        if want != got:
            sys.exit(f"FAIL: replication: the destination holds {got}, the source {want}")
        print(f"replication: {len(want)} versions shipped in order across the leader's death "
              f"({time.time()-t:.1f} s to drain)", flush=True)
        c.start(leader)
        wait_protected(c, others[0], timeout, "replication: the old leader back")
    finally:
        dest.send_signal(2)
        try:
            dest.wait(timeout=30)
        except subprocess.TimeoutExpired:
            dest.kill()
        shutil.rmtree(work, ignore_errors=True)


def node_status(c, node):
    return json.loads(sh(c.nodectl, "status", "--json", "--data", c.data, "--node", str(node)))


def scrub_check(c, nodes):
    """One scrub pass on every node: each reads back the fragments on its own
    drives against the manifests' checksums; none may be left bad."""
    checked = bad = 0
    for n in nodes:
        r = subprocess.run([c.nodectl, "scrub", "start", "--wait", "--json", "--data", c.data,
                            "--node", str(n["node"])], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: scrub on node {n['node']}: {r.stderr.strip()} {r.stdout.strip()}")
        last = json.loads(r.stdout)["last"]
        checked += last["fragments"]
        bad += last["bad"]
    if checked == 0:
        sys.exit("FAIL: the scrub passes checked no fragment")
    print(f"scrub: {checked} fragments checked on {len(nodes)} nodes, {bad} bad (all rebuilt)",
          flush=True)


def partition_check(a, c, nodes, clients, bucket):
    """A minority (the leader and one more node) is cut off under load. It must make
    no metadata decision: no write through it is acknowledged while cut off, and no
    read through it returns anything stale. After healing, every key has one latest
    version on every node, and no acknowledged write is lost."""
    hist = History()
    attempts = {}  # key -> list of (start, md5): every write tried, acked or not
    lock = threading.Lock()
    st = c.status(1)
    by_id = {n["id"]: n["node"] for n in c.dev()["nodes"]}
    leader = by_id[st["leader"]]
    minority = [leader, next(n["node"] for n in nodes if n["node"] != leader)]
    majority = [n["node"] for n in nodes if n["node"] not in minority]
    window = {"cut": None, "healed": None}
    stats = {"minority_tried": 0, "minority_acked": 0, "minority_refused": 0,
             "majority_acked": 0,
             "minority_reads_ok": 0, "minority_reads_refused": 0}
    stop = threading.Event()
    sizes = [1000, 300 << 10]

    def writer(wid, targets):
        v = 0
        while not stop.is_set():
            v += 1
            k = f"p{wid}-{v % 6}"
            data = body(random.choice(sizes), f"{k}-{v}")
            md5 = hashlib.md5(data).hexdigest()
            node = random.choice(targets)
            s = time.time()
            with lock:
                attempts.setdefault(k, []).append((s, md5))

            def tried():
                # Asked of the minority while it was cut off: started, or still
                # waiting for its answer, after the cut (a request through a
                # cut-off node can take longer than the cut lasts: the leader's
                # deadline, then the fence that settles an unknown outcome).
                with lock:
                    cut, healed = window["cut"], window["healed"]
                    if node in minority and cut and time.time() > cut + 1 and \
                            (not healed or s < healed):
                        stats["minority_tried"] += 1
            try:
                clients[node].put_object(Bucket=bucket, Key=k, Body=data)
            except Exception:
                tried()
                hist.wrote(k, s, None, md5)
                with lock:
                    cut = window["cut"]
                    if node in minority and cut and s > cut + 1 and \
                            (not window["healed"] or s < window["healed"]):
                        stats["minority_refused"] += 1
                continue
            tried()
            e = time.time()
            hist.wrote(k, s, e, md5)
            with lock:
                cut, healed = window["cut"], window["healed"]
                if node in minority and cut and s > cut + 1 and (not healed or e < healed):
                    stats["minority_acked"] += 1
                elif node in majority:
                    stats["majority_acked"] += 1

    def reader():
        while not stop.is_set():
            with lock:
                keys = list(attempts)
            if not keys:
                time.sleep(0.05)
                continue
            k = random.choice(keys)
            node = random.choice([n["node"] for n in nodes])
            s = time.time()
            try:
                got = clients[node].get_object(Bucket=bucket, Key=k)["Body"].read()
            except Exception:
                with lock:
                    cut = window["cut"]
                    if node in minority and cut and s > cut + 1 and \
                            (not window["healed"] or s < window["healed"]):
                        stats["minority_reads_refused"] += 1
                continue
            e = time.time()
            hist.read(k, s, e, hashlib.md5(got).hexdigest())
            with lock:
                cut, healed = window["cut"], window["healed"]
                if node in minority and cut and s > cut + 1 and (not healed or e < healed):
                    stats["minority_reads_ok"] += 1

    everyone = [n["node"] for n in nodes]
    # Three writers through any node; two more only through the minority, so the
    # cut-off side is asked for many decisions it must refuse.
    threads = [threading.Thread(target=writer, args=(i, everyone)) for i in range(3)]
    threads += [threading.Thread(target=writer, args=(3 + i, minority)) for i in range(2)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(3)
    print(f"partition: cutting nodes {minority} (node {leader} leads) off from {majority}",
          flush=True)
    c.partition(minority)
    window["cut"] = time.time()
    time.sleep(20)
    st = c.status(majority[0])
    new_leader = by_id.get(st["leader"] or "", None)
    print(f"during the partition: the majority elected node {new_leader}", flush=True)
    c.heal()
    window["healed"] = time.time()
    time.sleep(8)
    stop.set()
    for t in threads:
        t.join()
    print(f"load: {stats}", flush=True)
    if new_leader not in majority:
        sys.exit(f"FAIL: the majority side did not elect a leader of its own ({new_leader})")
    if stats["minority_acked"]:
        sys.exit(f"FAIL: {stats['minority_acked']} writes acknowledged through the cut-off "
                 "minority")
    if stats["majority_acked"] == 0:
        sys.exit("FAIL: the majority side acknowledged no write while partitioned")
    if stats["minority_tried"] == 0:
        sys.exit("FAIL: no write was even tried through the minority (test too short?)")
    bad = hist.check()
    if bad:
        for key, got, floor in bad[:3]:
            order = [(round(s_ - window["cut"], 2), m[:6]) for (s_, m) in attempts[key]]
            acks = [(round(w[0] - window["cut"], 2), w[1] and round(w[1] - window["cut"], 2),
                     w[2][:6]) for w in hist.writes.get(key, [])]
            reads = [(round(r[1] - window["cut"], 2), round(r[2] - window["cut"], 2), r[3][:6])
                     for r in hist.reads if r[0] == key and r[3] == got][:3]
            print(f"  {key}: got {got[:6]} floor {floor[:6] if floor else None}\n"
                  f"    attempts {order}\n    acked {acks}\n    bad reads {reads}")
        sys.exit(f"FAIL: history checker: {len(bad)} stale reads, e.g. {bad[:3]}")
    print(f"history checker: {len(hist.reads)} reads, none stale; "
          f"{stats['minority_reads_ok']} reads through the minority succeeded "
          f"(all current), {stats['minority_reads_refused']} were refused", flush=True)
    # No post-heal churn: the cut-off nodes never raised their terms (a voter
    # campaigns only after a quorum answers its pre-vote), so when the partition
    # heals they follow the majority's leader at once, and that leader keeps its
    # seat and its term. Ask at once, with only a short grace for the replies.
    settled = wait_settled(c, nodes, clients, bucket, sorted(attempts)[0], window["healed"],
                           timeout=12)
    after = c.status(majority[0])
    print(f"after healing: every node follows node {by_id.get(settled)} and serves reads "
          f"{time.time() - window['healed']:.1f} s after the heal; term {st['term']} -> "
          f"{after['term']}", flush=True)
    if settled != st["leader"] or after["term"] != st["term"]:
        sys.exit(f"FAIL: healing changed the leadership: node {by_id.get(st['leader'])} led "
                 f"in term {st['term']} during the partition, node {by_id.get(settled)} "
                 f"in term {after['term']} after it")
    # One latest version per key, the same on every node, never older than the
    # last acknowledged write.
    for k in sorted(attempts):
        seen = set()
        for n in nodes:
            got = clients[n["node"]].get_object(Bucket=bucket, Key=k)["Body"].read()
            seen.add(hashlib.md5(got).hexdigest())
        if len(seen) != 1:
            sys.exit(f"FAIL: {k}: nodes disagree on the latest version: {seen}")
        latest = seen.pop()
        acked = hist.acked(k)
        last_ack = max(acked, key=lambda w: w[0]) if acked else None
        allowed = {md5 for (st_, md5) in attempts[k] if last_ack is None or st_ >= last_ack[0]}
        if latest not in allowed:
            sys.exit(f"FAIL: {k}: latest version {latest} is older than the last "
                     f"acknowledged write {last_ack}")
    print(f"after healing: each of {len(attempts)} keys has one latest version on all "
          f"{len(nodes)} nodes, no acknowledged write lost", flush=True)
    print("partition check passed")


def rejoin_check(group, bound, c, clients, bucket, acked, survivors):
    """Voters down long enough to be replaced come back as learners and serve."""
    want = [int(x) for x in group.split(",")]
    ids = {n["id"]: n["node"] for n in c.dev()["nodes"]}
    via = [n for n in survivors if n not in want][0]
    st = c.status(via)
    voters = [n["id"] for n in st["nodes"] if n["voter"] and not n["leader"]
              and ids.get(n["id"]) != via]
    # The nodes asked for if they are voters, else other voters (a learner would not
    # be replaced as a voter at all).
    picked = [i for i in voters if ids[i] in want]
    picked += [i for i in voters if i not in picked][:len(want) - len(picked)]
    if len(picked) < len(want):
        sys.exit(f"FAIL: not {len(want)} voters to stop: {st}")
    rs = [ids[i] for i in picked]
    for r in rs:
        c.stop(r)
    t = time.time()
    while True:  # until the leader has replaced them as voters
        try:
            st = c.status(via)
            if not any(n["id"] in picked and n["voter"] for n in st["nodes"]):
                break
        except subprocess.CalledProcessError:
            pass
        if time.time() - t > 120:
            sys.exit(f"FAIL: nodes {rs} were not replaced as voters in 120 s: {st}")
        time.sleep(1)
    print(f"nodes {rs} down; replaced as voters after {time.time()-t:.1f} s", flush=True)
    for r in rs:
        c.start(r)
    t = time.time()
    key = next(iter(acked))
    last = None
    while True:
        try:
            st = c.status(via)
            ok = st["fully_protected"]
            for r, rid in zip(rs, picked):
                me = [n for n in st["nodes"] if n["id"] == rid][0]
                mine = c.status(r)
                s = time.time()
                clients[r].get_object(Bucket=bucket, Key=key)["Body"].read()
                took = time.time() - s
                if not (me["state"] == "up" and mine["leader"] == st["leader"] and took < 3):
                    ok = False
                    last = f"node {r}: state {me['state']}, its leader {mine['leader']} vs " \
                           f"{st['leader']}, GET {took:.1f} s"
            if ok:
                break
            last = last or f"fully protected {st['fully_protected']}: {st['objects']}"
        except Exception as e:  # noqa: BLE001 - a node catching up may refuse
            last = f"{type(e).__name__}: {e}"
        if time.time() - t > bound:
            sys.exit(f"FAIL: nodes {rs} did not rejoin within {bound:.0f} s: {last}")
        time.sleep(1)
    print(f"nodes {rs} rejoined (up, same leader, serving S3) and the cluster is fully "
          f"protected {time.time()-t:.1f} s after their restart", flush=True)


def wait_settled(c, nodes, clients, bucket, key, since, timeout=90):
    """Until every node reports the same leader and reads `key` through S3; returns the
    leader's id. Fails the check after `timeout` seconds from `since`."""
    last = None
    while True:
        try:
            leaders = {c.status(n["node"])["leader"] for n in nodes}
            if len(leaders) == 1 and None not in leaders and "" not in leaders:
                for n in nodes:
                    clients[n["node"]].get_object(Bucket=bucket, Key=key)["Body"].read()
                return leaders.pop()
            last = f"leaders named: {leaders}"
        except Exception as e:  # a node without a leader answers 503; status may fail
            last = f"{type(e).__name__}: {e}"
        if time.time() - since > timeout:
            sys.exit(f"FAIL: the cluster did not settle {timeout} s after healing: {last}")
        time.sleep(0.5)


if __name__ == "__main__":
    main()

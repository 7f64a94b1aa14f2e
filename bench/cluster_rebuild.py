#!/usr/bin/env python3
"""Times Cairn's rebuild of a lost node, on a running `nodectl dev up --nodes N`
started with a short `--repair-grace` and already filled with data.

It kills one node that does not lead (`nodectl dev stop K --kill`), wipes its drives
and state and starts it again, so it rejoins as a new, empty node (what
ci/cluster_check.py --wipe does). Once the old node has been down for the grace, its
fragments count as lost and every node rebuilds its share of them (rendezvous
hashing) onto the new node. It polls `nodectl cluster status --json` every
--interval seconds and prints one line:

  RESULT rebuild cairn mib=<MiB rebuilt> secs=<s> mibps=<MiB/s> secs_grace=<s>
         mibps_grace=<MiB/s> fragments=<n> objects=<n> complete=<0|1>
         node_mibps=<each node's own last-pass rate> load=<1-min load>

- mib: the bytes the old node held, as `objects.bytes_missing` reported them once it
  was down (every one of them must be rebuilt for full protection); checked against
  the sum of the nodes' own `repair.rebuilt_bytes` (printed to stderr).
- secs / mibps: from the repair's start to full protection. The start is the last
  poll before `bytes_missing` first fell after the grace expired (so the rate errs
  low by at most one poll interval plus the first object's repair).
- secs_grace / mibps_grace: from the moment the grace expired (the old node's
  down-since time + grace, as the cluster recorded it) to full protection: this
  adds the wait for the repairers' next pass (they scan every 5 s).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

MIB = 1 << 20


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def load1():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodectl", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--grace", type=float, required=True,
                    help="the --repair-grace the cluster was started with (s)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="give up this many seconds after the kill")
    ap.add_argument("--interval", type=float, default=0.5)
    a = ap.parse_args()

    def dev():
        return json.loads(sh(a.nodectl, "dev", "status", "--json", "--data", a.data))

    def status(node):
        return json.loads(sh(a.nodectl, "cluster", "status", "--json", "--data", a.data,
                             "--node", str(node)))

    def log(msg):
        print(f"[rebuild {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    nodes = dev()["nodes"]
    st = status(nodes[0]["node"])
    if not st["fully_protected"]:
        # The fill has just finished: let any straggling work settle first.
        t = time.time()
        while not st["fully_protected"] and time.time() - t < 60:
            time.sleep(1)
            st = status(nodes[0]["node"])
    if not st["fully_protected"]:
        sys.exit(f"cluster not fully protected before the kill: {st['objects']}")
    by_id = {n["id"]: n["node"] for n in nodes}
    leader = by_id.get(st["leader"] or "")
    # The highest-numbered node that does not lead: losing the leader would add an
    # election to what is measured here.
    victim = max(n["node"] for n in nodes if n["node"] != leader)
    survivor = min(n["node"] for n in nodes if n["node"] != victim)
    entry = next(n for n in nodes if n["node"] == victim)
    old = entry["id"]
    base = {n["node"]: status(n["node"])["repair"]["rebuilt_bytes"] for n in nodes
            if n["node"] != victim}
    log(f"{st['objects']['total']} objects, {st['protection']}; leader node {leader}; "
        f"killing node {victim} ({old}), polling node {survivor}")

    t_kill = time.time()
    sh(a.nodectl, "dev", "stop", str(victim), "--kill", "--data", a.data)
    for sub in ("drives", "state"):
        shutil.rmtree(os.path.join(entry["dir"], sub), ignore_errors=True)
    sh(a.nodectl, "dev", "start", str(victim), "--data", a.data)
    log(f"node {victim} killed, wiped and started again as a new node")

    peak = 0          # bytes_missing once the old node is down
    down_ms = None    # the cluster's down-since time of the old node
    t_before = None   # last poll before bytes_missing first fell
    t_prev = None
    t_full = None
    new = None
    last = None
    frags = 0
    while time.time() - t_kill < a.timeout:
        t_poll = time.time()
        try:
            st = status(survivor)
        except subprocess.CalledProcessError as e:
            log(f"status failed: {e.stderr.strip()[:200]}")
            time.sleep(a.interval)
            continue
        last = st
        o = st["objects"]
        old_view = next((n for n in st["nodes"] if n["id"] == old), None)
        if old_view and old_view["state"] == "down" and down_ms is None:
            down_ms = old_view["since_ms"]
            log(f"old node seen down (since {down_ms / 1e3 - t_kill:+.1f} s after the kill)")
        # Until the map says the old node is down, its drives may flap between
        # unhealthy and healthy (its address answers for the new node): count what is
        # missing only from then on, and look for progress only once the grace is over
        # (before that its fragments are "missing", never rebuilt).
        t_grace = down_ms / 1e3 + a.grace if down_ms else None
        if down_ms and t_before is None and o["bytes_missing"] > peak:
            peak = o["bytes_missing"]
            frags = o["fragments_missing"]
        if t_before is None and peak and t_grace and t_poll > t_grace \
                and o["bytes_missing"] < peak:
            t_before = max(t_prev, t_grace)
            log(f"repair started: {peak / MIB:.0f} MiB ({frags} fragments) to rebuild, "
                f"{t_poll - t_grace:.1f} s after the grace's end")
        news = [n for n in st["nodes"] if n["id"] not in by_id and n["state"] == "up"]
        if news:
            new = news[0]["id"]
        if (st["fully_protected"] and new and old_view and old_view["state"] == "down"
                and peak):
            t_full = t_poll
            break
        t_prev = t_poll
        time.sleep(a.interval)

    complete = t_full is not None
    end = t_full if complete else time.time()
    done = peak if complete else peak - (last["objects"]["bytes_missing"] if last else peak)
    secs = end - t_before if t_before else float("nan")
    t_grace = down_ms / 1e3 + a.grace if down_ms else None
    secs_grace = end - t_grace if t_grace else float("nan")
    node_rates = []
    rebuilt = 0
    for n in dev()["nodes"]:
        try:
            s = status(n["node"])
        except subprocess.CalledProcessError:
            continue
        node_rates.append(f"{s['repair']['rate_mib_s']:.1f}")
        rebuilt += s["repair"]["rebuilt_bytes"] - base.get(n["node"], 0) \
            if n["node"] != victim else s["repair"]["rebuilt_bytes"]
    log(f"{'full protection' if complete else 'TIMED OUT'}: {done / MIB:.0f} MiB in "
        f"{secs:.1f} s from the repair's start, {secs_grace:.1f} s from the grace's end; "
        f"nodes' own rebuilt_bytes total {rebuilt / MIB:.0f} MiB; new node {new}")
    print(f"RESULT rebuild cairn mib={done / MIB:.1f} secs={secs:.2f} "
          f"mibps={done / MIB / secs if secs > 0 else 0:.1f} secs_grace={secs_grace:.2f} "
          f"mibps_grace={done / MIB / secs_grace if secs_grace > 0 else 0:.1f} "
          f"fragments={frags} objects={last['objects']['total'] if last else 0} "
          f"complete={int(complete)} rebuilt_sum_mib={rebuilt / MIB:.1f} "
          f"node_mibps={','.join(node_rates)} load={load1()}", flush=True)
    if not complete:
        sys.exit(f"not fully protected {a.timeout:.0f} s after the kill: {last}")


if __name__ == "__main__":
    main()

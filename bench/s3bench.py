#!/usr/bin/env python3
"""s3bench: a small, bounded S3 load generator (boto3 + a thread pool).

For each object size (4 KiB, 1 MiB, 16 MiB by default) it PUTs new objects for
--duration seconds from --threads threads, then GETs uniformly random ones of the
objects it just wrote for --duration seconds, and prints one line per phase:

  RESULT s3 <label> <put|get> <size> ops=<ops/s> mbps=<MB/s, 10^6> n=<ops> secs=<s>
         p50ms=<ms> p99ms=<ms> errors=<n> load=<1-min load average at the end>

--endpoint may list several endpoints (a cluster's nodes, comma-separated): thread t
talks to endpoint t mod N. --put-bytes turns the PUT phase into a bounded fill.

Every object is unique: each 1 MiB block of each object starts with 16 bytes that
are never repeated (Garage deduplicates 1 MiB blocks by content hash, so a repeated
payload would measure its dedup path, not its write path). The rest of the bytes come
from a random pool, so nothing is compressible either.

boto3's default CRC checksums are off (`when_required`) so neither server pays for a
checksum the other does not get; SigV4 over plain HTTP still hashes the payload
(SHA-256) on both sides, for both servers alike.
"""

import argparse
import os
import random
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config

MIB = 1 << 20


def load1():
    """The 1-minute load average now (other users share the machine: say how busy)."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def parse_size(s):
    s = s.strip().upper()
    mult = 1
    for suf, m in (("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30), ("K", 1 << 10),
                   ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suf):
            s, mult = s[: -len(suf)], m
            break
    return int(s) * mult


def human(n):
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB}MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}KiB"
    return f"{n}B"


class Payloads:
    """Unique objects cut from a random pool: a copy plus a 16-byte stamp per MiB."""

    def __init__(self, pool_mib=48):
        self.pool = os.urandom(pool_mib * MIB)
        self.counter = 0
        self.lock = threading.Lock()
        self.nonce = os.urandom(8)

    def make(self, size):
        with self.lock:
            self.counter += 1
            c = self.counter
        off = random.randrange(0, len(self.pool) - size + 1) if size < len(self.pool) else 0
        buf = bytearray(self.pool[off : off + size])
        for blk, pos in enumerate(range(0, size, MIB)):
            stamp = self.nonce + struct.pack("<II", c, blk)
            n = min(16, size - pos)
            buf[pos : pos + n] = stamp[:n]
        return bytes(buf)


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int((len(v) - 1) * p))]


def run_phase(fn, threads, duration, budget=None):
    """Runs fn(thread_index, i) in `threads` threads until the deadline (or, with
    `budget`, until that many calls have been started). Returns
    (ops, bytes, secs, latencies, errors)."""
    deadline = time.monotonic() + duration
    started = [0]
    started_lock = threading.Lock()

    def take():
        if budget is None:
            return True
        with started_lock:
            if started[0] >= budget:
                return False
            started[0] += 1
            return True
    lock = threading.Lock()
    totals = {"ops": 0, "bytes": 0, "errors": 0, "lat": [], "first_error": None}

    def worker(t):
        ops = nbytes = errors = 0
        lat = []
        first = None
        i = 0
        while time.monotonic() < deadline and take():
            t0 = time.perf_counter()
            try:
                nbytes += fn(t, i)
                ops += 1
                lat.append(time.perf_counter() - t0)
            except Exception as e:  # counted, and the first one is shown
                errors += 1
                if first is None:
                    first = repr(e)
                time.sleep(0.05)
            i += 1
        with lock:
            totals["ops"] += ops
            totals["bytes"] += nbytes
            totals["errors"] += errors
            totals["lat"].extend(lat)
            if first and not totals["first_error"]:
                totals["first_error"] = first

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(worker, range(threads)))
    secs = time.monotonic() - start
    if totals["first_error"]:
        print(f"s3bench: first error: {totals['first_error']}", file=sys.stderr)
    return totals["ops"], totals["bytes"], secs, totals["lat"], totals["errors"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", required=True,
                    help="endpoint URL, or several separated by commas: thread t uses "
                         "endpoint t mod N (a cluster's nodes)")
    ap.add_argument("--access-key", required=True)
    ap.add_argument("--secret-key", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--bucket", default="bench")
    ap.add_argument("--create-bucket", action="store_true")
    ap.add_argument("--label", default="s3")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    ap.add_argument("--sizes", default="4KiB,1MiB,16MiB")
    ap.add_argument("--put-bytes", default=None,
                    help="PUT only this many bytes per size (e.g. 3GiB), then stop: a fill, "
                         "still bounded by --duration")
    ap.add_argument("--no-get", action="store_true", help="PUT phases only")
    ap.add_argument("--wait-ready", type=float, default=0,
                    help="seconds to retry creating/finding the bucket before starting")
    args = ap.parse_args()

    cfg = Config(
        region_name=args.region,
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": 1, "mode": "standard"},
        max_pool_connections=args.threads * 2,
        connect_timeout=10,
        read_timeout=120,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    endpoints = [e for e in args.endpoint.split(",") if e]
    # One client per endpoint (boto3 clients are thread-safe); each thread sticks to
    # one endpoint, so the load is spread evenly over a cluster's nodes.
    clients = [
        boto3.client(
            "s3",
            endpoint_url=e,
            aws_access_key_id=args.access_key,
            aws_secret_access_key=args.secret_key,
            config=cfg,
        )
        for e in endpoints
    ]
    s3 = clients[0]
    # A cluster that has just formed may refuse requests for a few seconds: with
    # --wait-ready, retry until the bucket exists and every endpoint sees it.
    deadline = time.monotonic() + args.wait_ready
    while True:
        try:
            if args.create_bucket:
                try:
                    s3.create_bucket(Bucket=args.bucket)
                except s3.exceptions.BucketAlreadyOwnedByYou:
                    pass
            for c in clients:
                c.head_bucket(Bucket=args.bucket)
            break
        except Exception as e:
            if time.monotonic() > deadline:
                raise
            print(f"s3bench: not ready yet ({e!r}); retrying", file=sys.stderr)
            time.sleep(1)

    payloads = Payloads()
    run_id = os.urandom(4).hex()
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        written = []  # keys, appended by PUT workers (list.append is atomic)
        prefix = f"{run_id}/{human(size)}"
        # Each PUT worker builds its next object before timing it, so payload
        # generation is outside the latency figure (it still uses the shared CPU).
        pending = {}

        def put(t, i, size=size, prefix=prefix, written=written, pending=pending):
            body = pending.pop(t, None) or payloads.make(size)
            key = f"{prefix}/{t}-{i}"
            clients[t % len(clients)].put_object(Bucket=args.bucket, Key=key, Body=body)
            written.append(key)
            pending[t] = payloads.make(size)
            return size

        budget = None
        if args.put_bytes:
            budget = -(-parse_size(args.put_bytes) // size)
        ops, nbytes, secs, lat, errs = run_phase(put, args.threads, args.duration, budget)
        report(args.label, "put", size, ops, nbytes, secs, lat, errs)
        if args.no_get:
            continue
        if not written:
            print(f"s3bench: no {human(size)} object written; skipping GET", file=sys.stderr)
            continue

        def get(t, i, size=size, written=written):
            key = random.choice(written)
            c = clients[t % len(clients)]
            body = c.get_object(Bucket=args.bucket, Key=key)["Body"].read()
            if len(body) != size:
                raise RuntimeError(f"{key}: got {len(body)} bytes, want {size}")
            return len(body)

        ops, nbytes, secs, lat, errs = run_phase(get, args.threads, args.duration)
        report(args.label, "get", size, ops, nbytes, secs, lat, errs)


def report(label, op, size, ops, nbytes, secs, lat, errs):
    print(
        f"RESULT s3 {label} {op} {human(size)} ops={ops / secs:.1f} mbps={nbytes / secs / 1e6:.1f} "
        f"n={ops} secs={secs:.2f} p50ms={pct(lat, 0.5) * 1e3:.1f} p99ms={pct(lat, 0.99) * 1e3:.1f} "
        f"errors={errs} load={load1()}",
        flush=True,
    )


if __name__ == "__main__":
    main()

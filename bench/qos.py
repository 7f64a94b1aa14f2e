#!/usr/bin/env python3
"""qos.py: one tenant's small-object latency, alone and beside another tenant's load.

Tenant B (the probe) runs --probe-threads threads, each alternating a PUT of a new
4 KiB object and a GET of one it wrote, back to back, and records each request's
latency. First B runs alone for --duration seconds; then tenant A's load starts in
its own process (bench/s3bench.py: --load-threads threads of 16 MiB PUTs for
--duration seconds, then 16 MiB GETs for --duration seconds) and B runs beside it
until A's load ends. Prints, for B alone and B beside A:

  RESULT qos <label> <alone|loaded> ops=<B's ops/s> p50ms=.. p99ms=.. n=.. errors=..

and passes A's own RESULT lines through (its MB/s with B beside it). The probe and
the load are separate processes so neither's Python holds up the other's requests.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

import boto3
from botocore.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))


def client(endpoint, ak, sk, region):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk,
        region_name=region,
        config=Config(retries={"max_attempts": 1}, max_pool_connections=32,
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def probe(s3, bucket, threads, stop, lat, errors):
    """B's threads: PUT a new 4 KiB object, GET it back; every latency kept."""
    body = os.urandom(4096)

    def worker(t):
        i = 0
        while not stop.is_set():
            key = f"probe/{t}/{i}"
            for op in ("put", "get"):
                t0 = time.perf_counter()
                try:
                    if op == "put":
                        s3.put_object(Bucket=bucket, Key=key, Body=body)
                    else:
                        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                        if got != body:
                            raise ValueError(f"{key}: wrong bytes")
                    lat.append(time.perf_counter() - t0)
                except Exception as e:  # counted and shown, the probe goes on
                    errors.append(f"{op} {key}: {e}")
            i += 1

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    return ts


def measure(s3, args, label, phase, until):
    lat, errors, stop = [], [], threading.Event()
    t0 = time.time()
    ts = probe(s3, args.probe_bucket, args.probe_threads, stop, lat, errors)
    until()
    stop.set()
    for t in ts:
        t.join()
    secs = time.time() - t0
    ms = [x * 1000 for x in lat]
    print(f"RESULT qos {label} {phase} ops={len(ms) / secs:.1f} p50ms={pct(ms, 50):.2f} "
          f"p99ms={pct(ms, 99):.2f} n={len(ms)} errors={len(errors)}", flush=True)
    for e in errors[:5]:
        print(f"  probe error: {e}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--label", default="cairn")
    ap.add_argument("--probe-keys", required=True, help="B's ACCESS:SECRET")
    ap.add_argument("--probe-bucket", default="probe")
    ap.add_argument("--probe-threads", type=int, default=2)
    ap.add_argument("--load-keys", required=True, help="A's ACCESS:SECRET")
    ap.add_argument("--load-bucket", default="load")
    ap.add_argument("--load-threads", type=int, default=4)
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--load-nice", type=int, default=0,
                    help="nice value of A's client process (to stand in for clients on "
                         "other machines; 0: as B's)")
    args = ap.parse_args()

    bak, bsk = args.probe_keys.split(":", 1)
    aak, ask = args.load_keys.split(":", 1)
    s3 = client(args.endpoint, bak, bsk, args.region)
    try:
        s3.create_bucket(Bucket=args.probe_bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass

    measure(s3, args, args.label, "alone", lambda: time.sleep(args.duration))

    load = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "s3bench.py"), "--endpoint", args.endpoint,
         "--access-key", aak, "--secret-key", ask, "--region", args.region,
         "--bucket", args.load_bucket, "--create-bucket", "--label", f"{args.label}-load",
         "--sizes", "16MiB", "--threads", str(args.load_threads),
         "--duration", str(args.duration)],
        stdout=subprocess.PIPE, text=True,
        # Niced, A's client takes the cores only when the node and B leave them
        # idle, as clients on other machines would.
        preexec_fn=(lambda: os.nice(args.load_nice)) if args.load_nice else None)
    # Let A's threads get going before B's latencies count.
    time.sleep(3)
    measure(s3, args, args.label, "loaded", load.wait)
    for line in load.stdout:
        print(line.rstrip(), flush=True)
    if load.returncode != 0:
        sys.exit(f"the load failed (exit {load.returncode})")


if __name__ == "__main__":
    main()

"""The host's side of hwtests/nfs-kernel/run.sh: what it puts over S3 before the
guest mounts, and the checks, over S3 with boto3, of what the guest says it wrote.

    s3.py setup BUCKET MD5FILE       the bucket and from-s3/object.bin
    s3.py phase1 BUCKET LOG MD5FILE N   the tree (renamed), big.bin, the guest's reads
    s3.py put BUCKET KEY             an object the guest waits for
    s3.py phase2 BUCKET LOG          what the guest read and wrote after the restart
"""
import hashlib
import os
import re
import sys

import boto3
from botocore.config import Config

s3 = boto3.client(
    "s3", endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
    aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
    aws_secret_access_key=os.environ["CAIRN_ROOT_SECRET_KEY"],
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5},
                  max_pool_connections=8))


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def md5(b):
    return hashlib.md5(b).hexdigest()


def get(bucket, key):
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def keys(bucket, prefix):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


def line(log, pattern):
    m = re.search(pattern, log, re.M)
    if not m:
        fail(f"the guest printed no line matching {pattern!r}")
    return m


def phase1(bucket, log_path, md5_path, n):
    log = open(log_path).read()
    want = open(md5_path).read().strip()
    got = line(log, r"^S3FILE (\w+)").group(1)
    if got != want:
        fail(f"the S3-written object read over NFS has md5 {got}, not {want}")
    for step in ["CP", "DD", "MV", "OVERWRITE"]:
        if line(log, rf"^{step} rc=(\d+)").group(1) != "0":
            fail(f"{step} failed in the guest")
    ls = line(log, r"^LS renamed=(\d+) old=(\d+)")
    if ls.groups() != (str(n), "0"):
        fail(f"the guest lists {ls.group(1)} files renamed and {ls.group(2)} under the old name")
    sums = dict((p, h) for h, p in re.findall(r"^SUM tree (\w+)  (\S+)$", log, re.M))
    if len(sums) != n:
        fail(f"the guest summed {len(sums)} files of {n}")
    listed = keys(bucket, "renamed/")
    files = sorted(k[len("renamed/"):] for k in listed if not k.endswith("/"))
    if files != sorted(sums):
        fail(f"S3 lists {len(files)} files under renamed/ (want {n}): "
             f"missing {sorted(set(sums) - set(files))[:5]}, extra {sorted(set(files) - set(sums))[:5]}")
    left = keys(bucket, "tree/")
    if left:
        fail(f"keys left under the old name: {left[:5]}")
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(8) as pool:
        bodies = dict(zip(files, pool.map(lambda f: md5(get(bucket, "renamed/" + f)), files)))
    bad = [f for f in files if bodies[f] != sums[f]]
    if bad:
        fail(f"{len(bad)} files differ over S3: {bad[:5]}")
    big = line(log, r"^SUM big (\w+)").group(1)
    if md5(get(bucket, "big.bin")) != big:
        fail("big.bin over S3 differs from what the guest wrote (with its overwrite)")
    print(f"  ok  over S3: {n} files under renamed/ byte-exact, none under tree/; big.bin "
          f"byte-exact with its in-place overwrite; the S3 object read over NFS")


def phase2(bucket, log_path):
    log = open(log_path).read()
    big = line(log, r"^SUM big (\w+)").group(1)
    if line(log, r"^AFTER big (\w+)").group(1) != big:
        fail("after the restart the guest read big.bin differently through its mount")
    a, b = line(log, r"^AFTER tree (\w+) (\w+)").groups()
    if a != b:
        fail("after the restart the guest read renamed/a/f0 differently")
    rc, secs, want = line(log, r"^DURING rc=(\d+) secs=(\S+) (\w+)").groups()
    if rc != "0":
        fail(f"the 64 MiB write across the kill failed in the guest (dd rc {rc})")
    got = md5(get(bucket, "during.bin"))
    if got != want:
        fail(f"the 64 MiB written across kill -9 of the node differs over S3 ({got}, not {want})")
    for step in ["WROTE", "UMOUNT"]:
        if line(log, rf"^{step} rc=(\d+)").group(1) != "0":
            fail(f"{step} failed in the guest after the restart")
    if get(bucket, "renamed/after.txt") != b"written after the restart\n":
        fail("the file written after the restart differs over S3")
    if md5(get(bucket, "big.bin")) != big:
        fail("big.bin differs over S3 after the restart")
    print(f"  ok  a 64 MiB dd conv=fsync across kill -9 of the node finished ({secs} s) "
          "and reads back whole over S3; the same mount then read big.bin back (caches "
          "dropped) and wrote a file S3 reads")


cmd, bucket = sys.argv[1], sys.argv[2]
if cmd == "setup":
    s3.create_bucket(Bucket=bucket)
    body = os.urandom(3_000_001)
    s3.put_object(Bucket=bucket, Key="from-s3/object.bin", Body=body)
    open(sys.argv[3], "w").write(md5(body))
elif cmd == "phase1":
    phase1(bucket, sys.argv[3], sys.argv[4], int(sys.argv[5]))
elif cmd == "put":
    s3.put_object(Bucket=bucket, Key=sys.argv[3], Body=b"")
elif cmd == "phase2":
    phase2(bucket, sys.argv[3])
else:
    fail(f"unknown command {cmd}")

#!/usr/bin/env python3
"""Bucket replication as an operator and a user meet it: a second local node
(another cluster) started with `nodectl dev up`, `nodectl replication set` on the
first, boto3 at its default settings writing (a multipart upload among them),
overwriting and deleting, every version and delete marker arriving in order,
`x-amz-replication-status` on both sides; then the destination stopped while
writes go on, the backlog and its errors shown by `nodectl replication status`,
the destination started again and nothing missing or reordered after catch-up.

    s3_replication.py ENDPOINT NODECTL DATA_DIR WORK_DIR

Credentials come from CAIRN_ROOT_ACCESS_KEY / CAIRN_ROOT_SECRET_KEY (both
nodes take them).
"""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import boto3

SRC, DST = "repl-source", "repl-dest"


def check(cond, what):
    if not cond:
        raise SystemExit(f"s3_replication: FAILED: {what}")
    print(f"  ok  {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dest(nodectl, data, port, log):
    p = subprocess.Popen(
        [nodectl, "dev", "up", "--data", data, "--drive-size", "1G",
         "--s3", f"127.0.0.1:{port}", "--resp", f"127.0.0.1:{free_port()}",
         "--nfs", f"127.0.0.1:{free_port()}"],
        stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        except urllib.error.HTTPError:
            return p
        except OSError:
            pass
        if p.poll() is not None:
            raise SystemExit("s3_replication: the destination node died at start")
        time.sleep(0.1)
    raise SystemExit("s3_replication: the destination node is not serving after 30 s")


def stop(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def history(s3, bucket):
    """Every version, per key oldest first: (key, sha of bytes or None for a marker)."""
    out = []
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket)
    for page in pages:
        for v in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])["Body"].read()
            out.append((v["Key"], v["VersionId"], hash(body)))
        for m in page.get("DeleteMarkers", []):
            out.append((m["Key"], m["VersionId"], None))
    out.sort()
    return [(k, h) for k, _, h in out]


def main(endpoint, nodectl, data, work):
    kw = dict(region_name="us-east-1",
              aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
              aws_secret_access_key=os.environ["CAIRN_ROOT_SECRET_KEY"])
    port = free_port()
    log = open(f"{work}/dest-node.log", "ab")
    dest = start_dest(nodectl, f"{work}/dest-data", port, log)
    try:
        run(endpoint, nodectl, data, work, kw, port, lambda: start_dest(
            nodectl, f"{work}/dest-data", port, log), dest)
    finally:
        for p in list(procs):
            if p.poll() is None:
                stop(p)


procs = []


def run(endpoint, nodectl, data, work, kw, port, restart, dest):
    procs.append(dest)
    src = boto3.client("s3", endpoint_url=endpoint, **kw)
    dst = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", **kw)
    for c, b in ((src, SRC), (dst, DST)):
        c.create_bucket(Bucket=b)
        c.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    secret = f"{work}/dest.secret"
    with open(secret, "w") as f:
        f.write(os.environ["CAIRN_ROOT_SECRET_KEY"])

    def ctl(*args):
        out = subprocess.run([nodectl, *args, "--data", data], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"s3_replication: nodectl {' '.join(args)}: {out.stderr}")
        return out.stdout

    ctl("replication", "set", "root", SRC, "--endpoint", f"http://127.0.0.1:{port}",
        "--to-bucket", DST, "--access-key", os.environ["CAIRN_ROOT_ACCESS_KEY"],
        "--secret-key-file", secret)
    print("  ok  nodectl replication set")
    conf = src.get_bucket_replication(Bucket=SRC)["ReplicationConfiguration"]
    check([r["Destination"]["Bucket"] for r in conf["Rules"]] == [f"arn:aws:s3:::{DST}"],
          "GetBucketReplication shows the rule")
    try:
        src.put_bucket_replication(Bucket=SRC, ReplicationConfiguration=conf)
        raise SystemExit("s3_replication: FAILED: PutBucketReplication was taken")
    except src.exceptions.ClientError as e:
        check(e.response["Error"]["Code"] == "NotImplemented", "PutBucketReplication: NotImplemented (nodectl sets rules)")

    def status():
        return json.loads(ctl("replication", "status", "root", SRC, "--json"))

    def drained(within=120):
        until = time.time() + within
        while time.time() < until:
            s = status()
            if s["backlog"] == 0:
                return s
            time.sleep(0.3)
        raise SystemExit(f"s3_replication: FAILED: backlog not shipped: {status()}")

    big = os.urandom(12 << 20)  # multipart at boto3's defaults (8 MiB threshold)
    with open(f"{work}/repl-big.in", "wb") as f:
        f.write(big)
    src.upload_file(f"{work}/repl-big.in", SRC, "dir/big")
    for i in range(20):
        src.put_object(Bucket=SRC, Key=f"obj {i}+ü", Body=os.urandom(random.randint(0, 70000)),
                       Metadata={"n": str(i)}, ContentType="text/x-cairn")
    for r in range(3):
        src.put_object(Bucket=SRC, Key="obj 0+ü", Body=f"round {r}".encode())
    src.delete_object(Bucket=SRC, Key="obj 1+ü")
    s = drained()
    check(s["shipped_versions"] >= 25, f"the backlog drains ({s['shipped_versions']} versions shipped)")
    check(history(dst, DST) == history(src, SRC),
          "every version and delete marker arrived, in order, byte for byte")
    head = dst.head_object(Bucket=DST, Key="obj 2+ü")
    check(head["Metadata"].get("n") == "2" and head["ContentType"] == "text/x-cairn",
          "metadata and content type travel with the version")
    check(src.head_object(Bucket=SRC, Key="dir/big").get("ReplicationStatus") == "COMPLETED"
          and dst.head_object(Bucket=DST, Key="dir/big").get("ReplicationStatus") == "REPLICA",
          "x-amz-replication-status: COMPLETED at the source, REPLICA at the destination")

    stop(dest)
    for i in range(10):
        src.put_object(Bucket=SRC, Key=f"late/{i}", Body=os.urandom(5000))
    for r in range(3):
        src.put_object(Bucket=SRC, Key="obj 3+ü", Body=f"outage round {r}".encode())
    time.sleep(2)
    s = status()
    check(s["backlog"] == 13 and s["failing"] > 0 and s["last_error"],
          f"destination down: 13 versions wait, the error is shown ({s['last_error']})")
    check(src.head_object(Bucket=SRC, Key="late/0").get("ReplicationStatus") in ("PENDING", "FAILED"),
          "a waiting version reads PENDING or FAILED")
    out = ctl("replication", "status", "root", SRC)
    check("backlog: 13 versions" in out and "failing" in out, "nodectl replication status")
    procs.append(restart())
    drained()
    check(history(dst, DST) == history(src, SRC),
          "after the outage: nothing missing, nothing reordered, nothing twice")
    ctl("replication", "remove", "root", SRC)
    print("  ok  nodectl replication remove")
    to_moto(src, ctl, work)
    # (The source's count of objects is checked later by s3-check.)
    boto3.resource("s3", endpoint_url=src.meta.endpoint_url, **kw).Bucket(SRC).object_versions.all().delete()
    src.delete_bucket(Bucket=SRC)


def to_moto(src, ctl, work):
    """The same to an S3 endpoint that is not Cairn: moto's server."""
    port = free_port()
    log = open(f"{work}/moto.log", "ab")
    moto = subprocess.Popen(["moto_server", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    procs.append(moto)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            time.sleep(0.1)
    dst = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    dst.create_bucket(Bucket="moto-dest")
    dst.put_bucket_versioning(Bucket="moto-dest", VersioningConfiguration={"Status": "Enabled"})
    b = "repl-to-moto"
    src.create_bucket(Bucket=b)
    src.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    with open(f"{work}/moto.secret", "w") as f:
        f.write("testing")
    ctl("replication", "set", "root", b, "--endpoint", f"http://127.0.0.1:{port}",
        "--to-bucket", "moto-dest", "--access-key", "testing", "--secret-key-file", f"{work}/moto.secret")
    for r in range(3):
        src.put_object(Bucket=b, Key="k ü+1", Body=f"round {r}".encode(), Tagging="a=b")
    src.put_object(Bucket=b, Key="gone", Body=b"x")
    src.delete_object(Bucket=b, Key="gone")
    until = time.time() + 60
    while json.loads(ctl("replication", "status", "root", b, "--json"))["backlog"] and time.time() < until:
        time.sleep(0.3)
    v = dst.list_object_versions(Bucket="moto-dest")
    bodies = [dst.get_object(Bucket="moto-dest", Key=x["Key"], VersionId=x["VersionId"])["Body"].read()
              for x in v.get("Versions", []) if x["Key"] == "k ü+1"]
    markers = [m["Key"] for m in v.get("DeleteMarkers", []) if m["IsLatest"]]
    tags = dst.get_object_tagging(Bucket="moto-dest", Key="k ü+1")["TagSet"]
    check(bodies == [b"round 2", b"round 1", b"round 0"] and markers == ["gone"]
          and tags == [{"Key": "a", "Value": "b"}],
          "to moto (an S3 endpoint that is not Cairn): versions in order, the marker, the tags")
    ctl("replication", "remove", "root", b)
    boto3.resource("s3", endpoint_url=src.meta.endpoint_url, region_name="us-east-1",
                   aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
                   aws_secret_access_key=os.environ["CAIRN_ROOT_SECRET_KEY"]
                   ).Bucket(b).object_versions.all().delete()
    src.delete_bucket(Bucket=b)


if __name__ == "__main__":
    main(*sys.argv[1:5])

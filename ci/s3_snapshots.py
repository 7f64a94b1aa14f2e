#!/usr/bin/env python3
"""Bucket snapshots as an operator and a user meet them: `nodectl snapshot
create`, then the bucket overwritten and emptied with boto3 at its default
settings, and the snapshot still read byte for byte (boto3 and the aws CLI)
under `.snapshot/NAME/`, listed, refused writes, restored by copy, and
deleted.

    s3_snapshots.py ENDPOINT NODECTL DATA_DIR

Credentials come from CAIRN_ROOT_ACCESS_KEY / CAIRN_ROOT_SECRET_KEY.
"""
import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import boto3
from botocore.exceptions import ClientError


def check(cond, what):
    if not cond:
        raise SystemExit(f"s3_snapshots: FAILED: {what}")
    print(f"  ok  {what}")


def error_code(fn):
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def form_post(post, body):
    """A browser's upload of `body` with a presigned POST (boto3's fields);
    the HTTP status."""
    b = "cairn-snapshot-check"
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in post["fields"].items()]
    parts.append(f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
                 'Content-Type: application/octet-stream\r\n\r\n'.encode() + body + b"\r\n")
    parts.append(f"--{b}--\r\n".encode())
    req = urllib.request.Request(post["url"], data=b"".join(parts), method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={b}"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main(endpoint, nodectl, data):
    def ctl(*args):
        out = subprocess.run([nodectl, *args, "--data", data], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"s3_snapshots: nodectl {' '.join(args)}: {out.stderr}")
        return out.stdout

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
        aws_secret_access_key=os.environ["CAIRN_ROOT_SECRET_KEY"],
    )
    b = "snapshot-check"
    s3.create_bucket(Bucket=b)
    big = os.urandom(9 << 20)  # multipart at boto3's defaults (8 MiB threshold)
    with open(f"{data}/../snap-big.in", "wb") as f:
        f.write(big)
    s3.upload_file(f"{data}/../snap-big.in", b, "dir/big")
    s3.put_object(Bucket=b, Key="a.txt", Body=b"before")
    snap = json.loads(ctl("snapshot", "create", "root", b, "nightly", "--json"))
    check(snap["prefix"] == ".snapshot/nightly/", "nodectl snapshot create")

    s3.put_object(Bucket=b, Key="a.txt", Body=b"after")
    for k in ("a.txt", "dir/big"):
        s3.delete_object(Bucket=b, Key=k)
    check(s3.list_objects_v2(Bucket=b).get("KeyCount") == 0, "bucket overwritten, then emptied")

    got = s3.get_object(Bucket=b, Key=".snapshot/nightly/a.txt")["Body"].read()
    check(got == b"before", "boto3 reads the snapshot's old bytes")
    s3.download_file(b, ".snapshot/nightly/dir/big", f"{data}/../snap-big.out")
    with open(f"{data}/../snap-big.out", "rb") as f:
        same = hashlib.sha256(f.read()).digest() == hashlib.sha256(big).digest()
    check(same, "boto3 download_file of a 9 MiB multipart object from the snapshot")
    cli = subprocess.run(
        ["aws", "--endpoint-url", endpoint, "s3", "cp", f"s3://{b}/.snapshot/nightly/a.txt", "-"],
        capture_output=True,
    )
    check(cli.returncode == 0 and cli.stdout == b"before", "aws s3 cp out of the snapshot")
    names = s3.list_objects_v2(Bucket=b, Prefix=".snapshot/", Delimiter="/")
    check(
        [p["Prefix"] for p in names.get("CommonPrefixes", [])] == [".snapshot/nightly/"],
        "ListObjectsV2 of .snapshot/ names the snapshots",
    )
    keys = s3.get_paginator("list_objects_v2").paginate(
        Bucket=b, Prefix=".snapshot/nightly/", PaginationConfig={"PageSize": 1}
    )
    listed = [o["Key"] for page in keys for o in page.get("Contents", [])]
    check(
        listed == [".snapshot/nightly/a.txt", ".snapshot/nightly/dir/big"],
        "the snapshot lists page by page",
    )
    code = error_code(lambda: s3.put_object(Bucket=b, Key=".snapshot/nightly/x", Body=b"x"))
    check(code == "AccessDenied", "a write into the snapshot is refused")
    status = form_post(s3.generate_presigned_post(b, ".snapshot/nightly/a.txt"), b"forged")
    got = s3.get_object(Bucket=b, Key=".snapshot/nightly/a.txt")["Body"].read()
    check(status == 403 and got == b"before", "a browser's POST upload into the snapshot is refused")
    s3.copy_object(Bucket=b, Key="a.txt", CopySource=f"{b}/.snapshot/nightly/a.txt")
    got = s3.get_object(Bucket=b, Key="a.txt")["Body"].read()
    check(got == b"before", "an object restored by copying it out of the snapshot")
    s3.delete_object(Bucket=b, Key="a.txt")
    check(error_code(lambda: s3.delete_bucket(Bucket=b)) == "BucketNotEmpty",
          "the bucket is not deleted under its snapshot")
    out = ctl("snapshot", "list", "root", b)
    check("nightly" in out and "kept for snapshots" in out, "nodectl snapshot list")
    ctl("snapshot", "delete", "root", b, "nightly")
    code = error_code(lambda: s3.get_object(Bucket=b, Key=".snapshot/nightly/a.txt"))
    check(code == "NoSuchKey", "nodectl snapshot delete: the snapshot is gone")
    s3.delete_bucket(Bucket=b)


if __name__ == "__main__":
    main(*sys.argv[1:4])

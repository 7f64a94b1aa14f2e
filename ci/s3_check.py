#!/usr/bin/env python3
"""Shell-level S3 check with boto3 against a running Cairn node.

    s3_check.py write  ENDPOINT MANIFEST   create objects, check the API, record hashes
    s3_check.py minio  ENDPOINT MANIFEST   the same with minio-py (compose_object)
    s3_check.py verify ENDPOINT MANIFEST   read every recorded object back by hash

Credentials come from CAIRN_ROOT_ACCESS_KEY / CAIRN_ROOT_SECRET_KEY.
"""
import base64
import hashlib
import io
import json
import os
import sys
import urllib.request
import zlib

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def client(endpoint, secret=None, sdk_defaults=False):
    if sdk_defaults:
        # boto3 as users run it: since 1.36 it sends a CRC32 with every upload
        # (in an aws-chunked trailer when it streams) and validates the checksum
        # a GET returns.
        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
            aws_secret_access_key=os.environ["CAIRN_ROOT_SECRET_KEY"],
        )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
        aws_secret_access_key=secret or os.environ["CAIRN_ROOT_SECRET_KEY"],
        config=Config(
            s3={"addressing_style": "path"},
            # A connection the server closed as idle just as a request was sent
            # on it is tried again, as every SDK does; a 5xx would be too, so
            # s3-check.sh asserts from /metrics that the node answered none.
            retries={"max_attempts": 3, "mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def sha(b):
    return hashlib.sha256(b).hexdigest()


def check(cond, what):
    if not cond:
        raise SystemExit(f"s3_check: FAILED: {what}")
    print(f"  ok  {what}")


def expect_error(code, fn, what):
    try:
        fn()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        status = e.response["ResponseMetadata"]["HTTPStatusCode"]
        check(got == code or str(status) == code, f"{what} -> {got} ({status})")
        return
    raise SystemExit(f"s3_check: FAILED: {what} succeeded")


def write(endpoint, manifest):
    s3 = client(endpoint)
    s3.create_bucket(Bucket="py-check")
    check("py-check" in [b["Name"] for b in s3.list_buckets()["Buckets"]], "bucket listed")
    objects = {}
    for key, size in [("small", 3000), ("big/8mib", 8 << 20), ("big/odd", (3 << 20) + 12345)]:
        data = os.urandom(size)
        s3.put_object(Bucket="py-check", Key=key, Body=data)
        objects[key] = sha(data)
        got = s3.get_object(Bucket="py-check", Key=key)["Body"].read()
        check(sha(got) == objects[key], f"{key} ({size} B) reads back by hash")
    # Multipart: two 5 MiB parts and a tail.
    parts_data = [os.urandom(5 << 20), os.urandom(5 << 20), os.urandom(777_777)]
    up = s3.create_multipart_upload(Bucket="py-check", Key="multi")["UploadId"]
    parts = []
    for i, d in enumerate(parts_data, 1):
        r = s3.upload_part(Bucket="py-check", Key="multi", UploadId=up, PartNumber=i, Body=d)
        parts.append({"PartNumber": i, "ETag": r["ETag"]})
    check(len(s3.list_parts(Bucket="py-check", Key="multi", UploadId=up)["Parts"]) == 3, "list parts")
    r = s3.complete_multipart_upload(
        Bucket="py-check", Key="multi", UploadId=up, MultipartUpload={"Parts": parts}
    )
    whole = b"".join(parts_data)
    md5s = b"".join(hashlib.md5(d).digest() for d in parts_data)
    check(r["ETag"].strip('"') == hashlib.md5(md5s).hexdigest() + "-3", "multipart ETag as S3 computes it")
    objects["multi"] = sha(whole)
    check(sha(s3.get_object(Bucket="py-check", Key="multi")["Body"].read()) == objects["multi"], "multipart reads back")
    # Ranges, including across parts and stripes.
    for a, b in [(0, 0), (1 << 20, (1 << 20) + 99), ((5 << 20) - 10, (5 << 20) + 10), (len(whole) - 5, len(whole) - 1)]:
        got = s3.get_object(Bucket="py-check", Key="multi", Range=f"bytes={a}-{b}")["Body"].read()
        check(got == whole[a : b + 1], f"range {a}-{b}")
    expect_error("InvalidRange", lambda: s3.get_object(Bucket="py-check", Key="small", Range="bytes=5000-6000"), "range past the end")
    # Listings.
    lst = s3.list_objects_v2(Bucket="py-check", Delimiter="/")
    check([p["Prefix"] for p in lst.get("CommonPrefixes", [])] == ["big/"], "delimiter rolls up big/")
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="py-check", PaginationConfig={"PageSize": 2}):
        keys += [o["Key"] for o in page.get("Contents", [])]
    check(keys == sorted(objects), f"paged listing {keys}")
    # Keys that URL encoding is about: botocore lists with encoding-type=url and
    # decodes what comes back, so the server must encode (a raw `a+b` would come
    # back as `a b`); a cleanup that deletes what it listed must empty the bucket.
    s3.create_bucket(Bucket="py-keys")
    odd = ["a+b", "a b", "a%20b", "x%2Fy", "dir/sub+1/f", "ünï cødé/日本", "ctl\x01char", "amp&lt<gt>"]
    for k in odd:
        s3.put_object(Bucket="py-keys", Key=k, Body=k.encode())
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="py-keys").get("Contents", [])]
    check(listed == sorted(odd), f"keys with + % space unicode and control chars listed exactly (v2) {listed}")
    listed = [o["Key"] for o in s3.list_objects(Bucket="py-keys").get("Contents", [])]
    check(listed == sorted(odd), f"the same through ListObjects v1 {listed}")
    pre = s3.list_objects_v2(Bucket="py-keys", Delimiter="/", Prefix="dir/")
    check([p["Prefix"] for p in pre.get("CommonPrefixes", [])] == ["dir/sub+1/"], "a common prefix with + rolls up exactly")
    for k in listed:
        check(s3.get_object(Bucket="py-keys", Key=k)["Body"].read() == k.encode(), f"listed key {k!r} reads its object")
        s3.delete_object(Bucket="py-keys", Key=k)
    left = s3.list_objects_v2(Bucket="py-keys").get("KeyCount", -1)
    check(left == 0, f"deleting every listed key emptied the bucket ({left} left)")
    s3.delete_bucket(Bucket="py-keys")
    # Security.
    bad = client(endpoint, secret="wrong-secret-0123456789")
    expect_error("SignatureDoesNotMatch", lambda: bad.list_buckets(), "wrong secret refused")
    try:
        urllib.request.urlopen(f"{endpoint}/py-check/small")
        raise SystemExit("s3_check: FAILED: anonymous GET succeeded")
    except urllib.error.HTTPError as e:
        check(e.code == 403, f"anonymous GET refused ({e.code})")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "py-check", "Key": "small"}, ExpiresIn=300)
    check(sha(urllib.request.urlopen(url).read()) == objects["small"], "presigned GET")
    expect_error("NoSuchKey", lambda: s3.get_object(Bucket="py-check", Key="nope"), "missing key")
    expect_error("BucketNotEmpty", lambda: s3.delete_bucket(Bucket="py-check"), "non-empty bucket kept")
    defaults(endpoint, objects)
    with open(manifest, "a") as f:
        for k, v in objects.items():
            f.write(json.dumps({"bucket": "py-check", "key": k, "sha256": v}) + "\n")


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def defaults(endpoint, objects):
    """Checksums as boto3 sends them by default: verified, kept, returned."""
    s3 = client(endpoint, sdk_defaults=True)
    for key, size in [("sums/small", 1000), ("sums/9mib", 9 << 20)]:
        data = os.urandom(size)
        r = s3.put_object(Bucket="py-check", Key=key, Body=data)
        check(r.get("ChecksumCRC32") == crc32_b64(data), f"{key}: boto3's default CRC32 verified and echoed")
        h = s3.head_object(Bucket="py-check", Key=key, ChecksumMode="ENABLED")
        check(h.get("ChecksumCRC32") == crc32_b64(data), f"{key}: HEAD returns the stored CRC32")
        # botocore validates the returned checksum of a GET by default.
        check(s3.get_object(Bucket="py-check", Key=key)["Body"].read() == data, f"{key}: GET passes boto3's checksum validation")
        objects[key] = sha(data)
    expect_error("BadDigest", lambda: s3.put_object(Bucket="py-check", Key="sums/bad", Body=b"x" * 100,
                                                    ChecksumCRC32=crc32_b64(b"y" * 100)), "a wrong CRC32 refused")
    expect_error("404", lambda: s3.head_object(Bucket="py-check", Key="sums/bad"), "nothing stored under it")
    # upload_fileobj at its defaults: multipart (8 MiB parts) with a CRC32 each.
    data = os.urandom((20 << 20) + 5)
    s3.upload_fileobj(io.BytesIO(data), "py-check", "sums/managed")
    h = s3.head_object(Bucket="py-check", Key="sums/managed", ChecksumMode="ENABLED")
    check(h.get("ChecksumCRC32", "").endswith("-3"), f"managed upload: composite CRC32 of 3 parts ({h.get('ChecksumCRC32')})")
    got = io.BytesIO()
    s3.download_fileobj("py-check", "sums/managed", got)
    check(got.getvalue() == data, "managed download reads it back")
    objects["sums/managed"] = sha(data)


def minio_client(endpoint, manifest):
    """minio-py at its defaults: put, stat, a server-side compose_object (an
    UploadPartCopy per source) and a ranged read."""
    from urllib.parse import urlparse

    from minio import Minio
    from minio.commonconfig import ComposeSource

    u = urlparse(endpoint)
    m = Minio(u.netloc, access_key=os.environ["CAIRN_ROOT_ACCESS_KEY"],
              secret_key=os.environ["CAIRN_ROOT_SECRET_KEY"], secure=False)
    m.make_bucket("minio-check")
    check(m.bucket_exists("minio-check"), "minio-py: bucket made and found")
    pieces = [os.urandom(6 << 20), os.urandom(5 << 20), os.urandom(1234)]
    for i, d in enumerate(pieces):
        m.put_object("minio-check", f"src/{i}", io.BytesIO(d), len(d))
    # compose_object copies every source server-side (UploadPartCopy); all but
    # the last source must be at least 5 MiB, as in S3.
    m.compose_object("minio-check", "composed", [ComposeSource("minio-check", f"src/{i}") for i in range(3)])
    whole = b"".join(pieces)
    st = m.stat_object("minio-check", "composed")
    check(st.size == len(whole), f"minio-py: compose_object made {st.size} bytes")
    got = m.get_object("minio-check", "composed").read()
    check(sha(got) == sha(whole), "minio-py: the composed object is its sources in order")
    got = m.get_object("minio-check", "composed", offset=(6 << 20) - 3, length=6).read()
    check(got == whole[(6 << 20) - 3:(6 << 20) + 3], "minio-py: a ranged read across the seam")
    names = sorted(o.object_name for o in m.list_objects("minio-check", recursive=True))
    check(names == ["composed", "src/0", "src/1", "src/2"], f"minio-py: listing {names}")
    with open(manifest, "a") as f:
        f.write(json.dumps({"bucket": "minio-check", "key": "composed", "sha256": sha(whole)}) + "\n")
        for i, d in enumerate(pieces):
            f.write(json.dumps({"bucket": "minio-check", "key": f"src/{i}", "sha256": sha(d)}) + "\n")


def verify(endpoint, manifest):
    s3 = client(endpoint)
    n = 0
    with open(manifest) as f:
        for line in f:
            o = json.loads(line)
            got = s3.get_object(Bucket=o["bucket"], Key=o["key"])["Body"].read()
            if sha(got) != o["sha256"]:
                raise SystemExit(f"s3_check: FAILED: {o['bucket']}/{o['key']} differs after restart")
            n += 1
    check(n > 0, f"all {n} recorded objects read back bit-exact")


if __name__ == "__main__":
    mode, endpoint, manifest = sys.argv[1:4]
    {"write": write, "verify": verify, "minio": minio_client}[mode](endpoint, manifest)

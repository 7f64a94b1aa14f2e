#!/usr/bin/env python3
"""S3's data services driven by boto3 at its default settings, as a user would:
object and bucket tagging, CORS (configured with boto3, then a browser's
preflight and a cross-origin GET), lifecycle rules carried out, the versions API that backup and cleanup
tools walk (GetBucketVersioning, ListObjectVersions, emptying a bucket through
its versions), and versioning enabled (versions, delete markers).

    s3_services.py ENDPOINT

Credentials come from CAIRN_ROOT_ACCESS_KEY / CAIRN_ROOT_SECRET_KEY.
"""
import os
import sys
import time
import urllib.error
import urllib.request

import boto3
from botocore.exceptions import ClientError


def check(cond, what):
    if not cond:
        raise SystemExit(f"s3_services: FAILED: {what}")
    print(f"  ok  {what}")


def error_code(fn):
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def preflight(endpoint, path, origin, method, headers=""):
    req = urllib.request.Request(f"{endpoint}{path}", method="OPTIONS")
    req.add_header("Origin", origin)
    req.add_header("Access-Control-Request-Method", method)
    if headers:
        req.add_header("Access-Control-Request-Headers", headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}


def main(endpoint):
    kw = dict(
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["CAIRN_ROOT_ACCESS_KEY"],
        aws_secret_access_key=os.environ["CAIRN_ROOT_SECRET_KEY"],
    )
    s3 = boto3.client("s3", **kw)
    bucket = "services-check"
    s3.create_bucket(Bucket=bucket)

    # Tagging.
    s3.put_object(Bucket=bucket, Key="report.csv", Body=b"a,b\n1,2\n", Tagging="class=internal&owner=data team")
    tags = {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key="report.csv")["TagSet"]}
    check(tags == {"class": "internal", "owner": "data team"}, "tags given with PutObject are kept")
    check(s3.get_object(Bucket=bucket, Key="report.csv")["TagCount"] == 2, "GetObject counts them")
    s3.put_object_tagging(Bucket=bucket, Key="report.csv", Tagging={"TagSet": [{"Key": "class", "Value": "public"}]})
    s3.copy_object(Bucket=bucket, Key="report-copy.csv", CopySource={"Bucket": bucket, "Key": "report.csv"})
    tags = s3.get_object_tagging(Bucket=bucket, Key="report-copy.csv")["TagSet"]
    check(tags == [{"Key": "class", "Value": "public"}], "tags replaced, and copied with the object")
    too_many = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
    code = error_code(lambda: s3.put_object_tagging(Bucket=bucket, Key="report.csv", Tagging=too_many))
    check(code == "InvalidTag", f"eleven tags refused (InvalidTag): {code}")
    s3.delete_object_tagging(Bucket=bucket, Key="report.csv")
    check(s3.get_object_tagging(Bucket=bucket, Key="report.csv")["TagSet"] == [], "tags deleted")
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "cost-center", "Value": "42"}]})
    check(s3.get_bucket_tagging(Bucket=bucket)["TagSet"][0]["Value"] == "42", "bucket tags kept")

    # CORS: a page on app.example.com may GET and PUT; a preflight and a
    # cross-origin GET as a browser sends them.
    code = error_code(lambda: s3.get_bucket_cors(Bucket=bucket))
    check(code == "NoSuchCORSConfiguration", f"no CORS configuration yet: {code}")
    s3.put_bucket_cors(
        Bucket=bucket,
        CORSConfiguration={
            "CORSRules": [
                {
                    "AllowedOrigins": ["https://app.example.com"],
                    "AllowedMethods": ["GET", "PUT"],
                    "AllowedHeaders": ["*"],
                    "ExposeHeaders": ["ETag"],
                    "MaxAgeSeconds": 3000,
                }
            ]
        },
    )
    rules = s3.get_bucket_cors(Bucket=bucket)["CORSRules"]
    check(rules[0]["AllowedMethods"] == ["GET", "PUT"], "CORS rules kept")
    status, h = preflight(endpoint, f"/{bucket}/report.csv", "https://app.example.com", "PUT", "content-type,x-amz-date")
    allowed = status == 200 and h.get("access-control-allow-origin") == "https://app.example.com"
    check(allowed, "a preflight from the allowed origin is allowed" + ("" if allowed else f": {status} {h}"))
    status, _ = preflight(endpoint, f"/{bucket}/report.csv", "https://evil.example.net", "GET")
    check(status == 403, f"a preflight from another origin is refused: {status}")
    seen = {}

    def add_origin(request, **_):
        request.headers["Origin"] = "https://app.example.com"

    def keep_headers(http_response, **_):
        seen.update({k.lower(): v for k, v in http_response.headers.items()})

    browser = boto3.client("s3", **kw)
    browser.meta.events.register("before-sign.s3.GetObject", add_origin)
    browser.meta.events.register("after-call.s3.GetObject", keep_headers)
    browser.get_object(Bucket=bucket, Key="report.csv")["Body"].read()
    check(
        seen.get("access-control-allow-origin") == "https://app.example.com"
        and seen.get("access-control-expose-headers") == "ETag",
        "a cross-origin GET carries the rule's headers",
    )

    # Lifecycle: the node under check counts a lifecycle day as a second
    # (CAIRN_LIFECYCLE_DAY=1 in s3-check.sh), so a 2-day rule acts within seconds.
    code = error_code(lambda: s3.get_bucket_lifecycle_configuration(Bucket=bucket))
    check(code == "NoSuchLifecycleConfiguration", f"no lifecycle configuration yet: {code}")
    bad = {"Rules": [{"ID": "zero", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 0}}]}
    code = error_code(lambda: s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=bad))
    check(code == "InvalidArgument", f"a rule of 0 days refused: {code}")
    for key in ("tmp/a", "tmp/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"scratch")
    s3.create_multipart_upload(Bucket=bucket, Key="tmp/upload")
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "scratch",
                    "Status": "Enabled",
                    "Filter": {"Prefix": "tmp/"},
                    "Expiration": {"Days": 2},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
                }
            ]
        },
    )
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    check(rules[0]["ID"] == "scratch" and rules[0]["Expiration"]["Days"] == 2, "lifecycle rules kept")
    deadline = time.time() + 30
    while True:
        left = s3.list_objects_v2(Bucket=bucket, Prefix="tmp/")["KeyCount"]
        uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        if left == 0 and not uploads:
            break
        if time.time() > deadline:
            raise SystemExit(f"s3_services: FAILED: lifecycle left {left} objects and {len(uploads)} uploads")
        time.sleep(0.5)
    check(s3.head_object(Bucket=bucket, Key="report.csv")["ContentLength"] == 8, "lifecycle expired tmp/ and its upload, nothing else")
    s3.delete_bucket_lifecycle(Bucket=bucket)

    # Versions, as tools walk them: never enabled, each key's one version listed
    # as `null`, and the bucket emptied through its versions.
    check("Status" not in s3.get_bucket_versioning(Bucket=bucket), "GetBucketVersioning: never enabled")
    versions = [
        (v["Key"], v["VersionId"])
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 1})
        for v in page.get("Versions", [])
    ]
    check(versions == [("report-copy.csv", "null"), ("report.csv", "null")], f"ListObjectVersions pages: {versions}")
    boto3.resource("s3", **kw).Bucket(bucket).object_versions.all().delete()
    check(s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0, "bucket emptied through its versions")
    s3.delete_bucket(Bucket=bucket)
    versioning(s3, kw)


def versioning(s3, kw):
    """Versioning enabled: versions kept and read by id, a delete marker, the
    object brought back by deleting the marker, versions listed and paged, and
    the bucket emptied through them."""
    bucket = "cairn-versioned"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    check(s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled", "GetBucketVersioning: Enabled")
    # An empty PUT first: boto3 asks for `100 Continue` even then, and must still
    # read the next answer on its connection right (its version id, at once).
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    t = time.time()
    after_empty = s3.put_object(Bucket=bucket, Key="after-empty", Body=b"x")
    check("VersionId" in after_empty and "ETag" in after_empty and time.time() - t < 5,
          f"the PUT after an empty PUT answered whole ({time.time() - t:.1f} s)")
    ids = [s3.put_object(Bucket=bucket, Key="doc.txt", Body=f"draft {i}".encode())["VersionId"] for i in range(3)]
    check(len(set(ids)) == 3 and "null" not in ids, f"three PUTs, three version ids: {ids}")
    body = s3.get_object(Bucket=bucket, Key="doc.txt", VersionId=ids[0])["Body"].read()
    check(body == b"draft 0", "the first version reads back by its id")
    marker = s3.delete_object(Bucket=bucket, Key="doc.txt")
    check(marker.get("DeleteMarker") is True, "DELETE made a delete marker")
    check(error_code(lambda: s3.get_object(Bucket=bucket, Key="doc.txt")) == "NoSuchKey", "GET after DELETE: NoSuchKey")
    check(error_code(lambda: s3.head_object(Bucket=bucket, Key="doc.txt", VersionId=marker["VersionId"])) == "405",
          "HEAD of the marker by id: 405")
    pages = list(s3.get_paginator("list_object_versions").paginate(
        Bucket=bucket, Prefix="doc", PaginationConfig={"PageSize": 1}))
    listed = [(v["VersionId"], v["IsLatest"]) for p in pages for v in p.get("Versions", [])]
    markers = [(m["VersionId"], m["IsLatest"]) for p in pages for m in p.get("DeleteMarkers", [])]
    check(listed == [(ids[2], False), (ids[1], False), (ids[0], False)] and markers == [(marker["VersionId"], True)],
          f"ListObjectVersions, one per page: {listed} {markers}")
    s3.delete_object(Bucket=bucket, Key="doc.txt", VersionId=marker["VersionId"])
    body = s3.get_object(Bucket=bucket, Key="doc.txt")["Body"].read()
    check(body == b"draft 2", "deleting the marker brought the latest version back")
    check(error_code(lambda: s3.delete_bucket(Bucket=bucket)) == "BucketNotEmpty", "a bucket with versions is not empty")
    # What Cairn does not keep is refused, never ignored (object lock: in a
    # bucket made without it; see s3_object_lock.py).
    check(error_code(lambda: s3.put_object(Bucket=bucket, Key="worm", Body=b"x", ObjectLockMode="COMPLIANCE",
                                           ObjectLockRetainUntilDate="2030-01-01T00:00:00Z")) == "InvalidRequest",
          "a PUT asking for object lock in a bucket without it: InvalidRequest")
    check(error_code(lambda: s3.put_object(Bucket=bucket, Key="cold", Body=b"x", StorageClass="GLACIER"))
          == "InvalidStorageClass", "a PUT to GLACIER: InvalidStorageClass")
    s3.put_object(Bucket=bucket, Key="standard", Body=b"x", StorageClass="STANDARD")
    boto3.resource("s3", **kw).Bucket(bucket).object_versions.all().delete()
    check(s3.list_object_versions(Bucket=bucket).get("Versions") is None, "every version deleted")
    s3.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    main(sys.argv[1])

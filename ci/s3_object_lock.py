#!/usr/bin/env python3
"""S3 object lock as a user meets it, with boto3 at its default settings and
the aws CLI: a bucket made with object lock, its default retention, a locked
version's delete refused (a read-write user may not bypass GOVERNANCE, the
tenant's admin may; COMPLIANCE and a legal hold refuse everyone), retention
only extended, a delete marker still allowed.

    s3_object_lock.py ENDPOINT NODECTL DATA_DIR
"""
import datetime
import json
import subprocess
import sys

import boto3
from botocore.exceptions import ClientError


def check(cond, what):
    if not cond:
        raise SystemExit(f"s3_object_lock: FAILED: {what}")
    print(f"  ok  {what}")


def error_code(fn):
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def main(endpoint, nodectl, data):
    def ctl(*args):
        out = subprocess.run([nodectl, *args, "--data", data, "--json"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"s3_object_lock: nodectl {' '.join(args)}: {out.stderr}")
        return json.loads(out.stdout)

    ctl("tenant", "create", "lockco")
    ctl("user", "create", "lockco", "boss", "--role", "admin")
    ctl("user", "create", "lockco", "clerk", "--role", "read-write")

    def client(user):
        k = ctl("key", "create", "lockco", user)
        return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                            aws_access_key_id=k["access_key"],
                            aws_secret_access_key=k["secret_key"])

    boss, clerk = client("boss"), client("clerk")
    b = "lock-check"
    clerk.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    check(clerk.get_bucket_versioning(Bucket=b).get("Status") == "Enabled",
          "a bucket made with object lock is versioned")
    code = error_code(lambda: clerk.put_bucket_versioning(
        Bucket=b, VersioningConfiguration={"Status": "Suspended"}))
    check(code == "InvalidBucketState", "its versioning cannot be suspended")

    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    v = clerk.put_object(Bucket=b, Key="gov", Body=b"kept", ObjectLockMode="GOVERNANCE",
                         ObjectLockRetainUntilDate=soon)["VersionId"]
    head = clerk.head_object(Bucket=b, Key="gov")
    check(head.get("ObjectLockMode") == "GOVERNANCE" and "ObjectLockRetainUntilDate" in head,
          "HEAD shows the retention")
    code = error_code(lambda: clerk.delete_object(Bucket=b, Key="gov", VersionId=v))
    check(code == "AccessDenied", "a GOVERNANCE version's delete is refused")
    code = error_code(lambda: clerk.delete_object(Bucket=b, Key="gov", VersionId=v,
                                                  BypassGovernanceRetention=True))
    check(code == "AccessDenied", "a read-write user may not bypass governance")
    boss.delete_object(Bucket=b, Key="gov", VersionId=v, BypassGovernanceRetention=True)
    check(error_code(lambda: clerk.head_object(Bucket=b, Key="gov", VersionId=v)) is not None,
          "the tenant admin deletes it, bypassing governance")

    v = clerk.put_object(Bucket=b, Key="comp", Body=b"kept", ObjectLockMode="COMPLIANCE",
                         ObjectLockRetainUntilDate=soon)["VersionId"]
    code = error_code(lambda: boss.delete_object(Bucket=b, Key="comp", VersionId=v,
                                                 BypassGovernanceRetention=True))
    check(code == "AccessDenied", "no one deletes a COMPLIANCE version")
    shorter = {"Mode": "COMPLIANCE",
               "RetainUntilDate": soon - datetime.timedelta(minutes=30)}
    code = error_code(lambda: boss.put_object_retention(
        Bucket=b, Key="comp", VersionId=v, Retention=shorter, BypassGovernanceRetention=True))
    check(code == "AccessDenied", "no one shortens COMPLIANCE retention")
    later = soon + datetime.timedelta(hours=1)
    clerk.put_object_retention(Bucket=b, Key="comp", VersionId=v,
                               Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later})
    got = clerk.get_object_retention(Bucket=b, Key="comp", VersionId=v)["Retention"]
    check(int(got["RetainUntilDate"].timestamp()) == int(later.timestamp()),
          "retention extended, and read back")
    marker = clerk.delete_object(Bucket=b, Key="comp")
    same = clerk.get_object(Bucket=b, Key="comp", VersionId=v)["Body"].read()
    check(marker.get("DeleteMarker") and same == b"kept",
          "a delete without a version makes a marker; the locked version stays")

    v = clerk.put_object(Bucket=b, Key="held", Body=b"x", ObjectLockLegalHoldStatus="ON")["VersionId"]
    code = error_code(lambda: boss.delete_object(Bucket=b, Key="held", VersionId=v,
                                                 BypassGovernanceRetention=True))
    check(code == "AccessDenied", "a legal hold refuses even a bypass")
    clerk.put_object_legal_hold(Bucket=b, Key="held", VersionId=v, LegalHold={"Status": "OFF"})
    clerk.delete_object(Bucket=b, Key="held", VersionId=v)
    print("  ok  the hold taken off, the version deleted")

    cli = subprocess.run(
        ["aws", "--endpoint-url", endpoint, "s3api", "put-object-lock-configuration",
         "--bucket", b, "--object-lock-configuration",
         '{"ObjectLockEnabled":"Enabled","Rule":{"DefaultRetention":{"Mode":"GOVERNANCE","Days":1}}}'],
        capture_output=True, text=True,
        env={**__import__("os").environ,
             "AWS_ACCESS_KEY_ID": clerk._request_signer._credentials.access_key,
             "AWS_SECRET_ACCESS_KEY": clerk._request_signer._credentials.secret_key})
    check(cli.returncode == 0, f"aws s3api put-object-lock-configuration {cli.stderr.strip()}")
    conf = clerk.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]
    check(conf["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 1},
          "the default retention reads back")
    v = clerk.put_object(Bucket=b, Key="plain", Body=b"x")["VersionId"]
    got = clerk.get_object_retention(Bucket=b, Key="plain")["Retention"]
    check(got["Mode"] == "GOVERNANCE", "a plain PUT gets the default retention")
    code = error_code(lambda: clerk.delete_object(Bucket=b, Key="plain", VersionId=v))
    check(code == "AccessDenied", "and its delete by version is refused")
    boss.delete_object(Bucket=b, Key="plain", VersionId=v, BypassGovernanceRetention=True)
    print("  ok  the tenant admin deletes it, bypassing the default GOVERNANCE retention")

    clerk.create_bucket(Bucket="unlocked-check")
    code = error_code(lambda: clerk.put_object(Bucket="unlocked-check", Key="k", Body=b"x",
                                               ObjectLockLegalHoldStatus="ON"))
    check(code == "InvalidRequest", "a lock asked of a bucket without object lock is refused")
    clerk.delete_bucket(Bucket="unlocked-check")


if __name__ == "__main__":
    main(*sys.argv[1:4])

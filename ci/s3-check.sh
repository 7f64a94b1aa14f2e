#!/usr/bin/env bash
# Shell-level check of a real node: `nodectl dev up` on file-backed drives, the aws
# CLI, s3cmd, boto3 (the core API, then tagging, CORS and versions; snapshots; object lock; replication to a second node) and minio-py against it, redis-cli against its RESP port,
# libnfs's nfs-cp, nfs-cat and nfs-ls against its NFS port (the same bucket over both), then kill -9 of every Cairn process, a restart on the
# same data directory, and every object read back by hash.
#
#   ci/s3-check.sh [BIN_DIR]     (default target/release)
set -Eeuo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release}
work=$(mktemp -d /tmp/cairn-s3check.XXXXXX)
port=$((19000 + RANDOM % 1000))
endpoint="http://127.0.0.1:$port"
rport=$((16000 + RANDOM % 1000))
nport=$((15000 + RANDOM % 1000))
export CAIRN_ROOT_ACCESS_KEY=CAIRNCHECK$RANDOM$RANDOM
export CAIRN_ROOT_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=')
export AWS_ACCESS_KEY_ID=$CAIRN_ROOT_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CAIRN_ROOT_SECRET_KEY
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
# A lifecycle day lasts a second on the node under check, so s3_services.py sees
# its rules act (no other bucket here has rules).
export CAIRN_LIFECYCLE_DAY=1 CAIRN_LIFECYCLE_EVERY=1
fail() { echo "s3-check: FAILED: $*" >&2; exit 1; }
aws_() { aws --endpoint-url "$endpoint" "$@"; }
sup=""

cleanup() {
  local rc=$?
  # A failed check says where, and shows what the node logged: a client's error
  # alone (a dropped connection) does not tell what the server did.
  if [[ $rc != 0 ]]; then
    echo "s3-check: failed with exit $rc at line $failed_at: $failed_cmd" >&2
    for f in "$work"/nodectl.log "$work"/data/logs/*.log; do
      [[ -f $f ]] || continue
      echo "---- last lines of $f" >&2
      tail -n 40 "$f" >&2
    done
  fi
  [[ -n "$sup" ]] && kill -9 "$sup" 2>/dev/null || true
  pkill -9 -f "$work" 2>/dev/null || true
  rm -rf "$work"
}
failed_at="" failed_cmd=""
trap 'failed_at="$LINENO (calls from lines ${BASH_LINENO[*]})" failed_cmd=$BASH_COMMAND' ERR
trap cleanup EXIT

start() {
  "$bin/nodectl" dev up --data "$work/data" --drive-size 2G --s3 "127.0.0.1:$port" --resp "127.0.0.1:$rport" --nfs "127.0.0.1:$nport" >>"$work/nodectl.log" 2>&1 &
  sup=$!
  for _ in $(seq 1 300); do
    curl -s -o /dev/null "$endpoint/" && return 0
    kill -0 "$sup" 2>/dev/null || { cat "$work/nodectl.log"; echo "s3-check: nodectl died" >&2; exit 1; }
    sleep 0.1
  done
  cat "$work/nodectl.log"; echo "s3-check: node not serving after 30 s" >&2; exit 1
}

echo "-- start node"
start
echo "-- aws CLI"
aws_ s3 mb s3://cli-check
head -c $((8 << 20)) /dev/urandom >"$work/8m"
head -c $((40 << 20)) /dev/urandom >"$work/40m"   # above the CLI's 8 MiB threshold: multipart
aws_ s3 cp --only-show-errors "$work/8m" s3://cli-check/8m
aws_ s3 cp --only-show-errors "$work/40m" s3://cli-check/dir/40m
aws_ s3 cp --only-show-errors s3://cli-check/8m "$work/8m.back"
aws_ s3 cp --only-show-errors s3://cli-check/dir/40m "$work/40m.back"
cmp "$work/8m" "$work/8m.back" && cmp "$work/40m" "$work/40m.back" || fail "objects differ"
echo "  ok  8 MiB and 40 MiB (multipart) objects by content"
aws_ s3api get-object --bucket cli-check --key dir/40m --range bytes=1000-2999 "$work/range" >/dev/null
cmp <(tail -c +1001 "$work/40m" | head -c 2000) "$work/range" || fail "range read differs"
echo "  ok  range read"
[[ $(aws_ s3 ls s3://cli-check --recursive | wc -l) == 2 ]] || fail "listing"
echo "  ok  listing"
if AWS_SECRET_ACCESS_KEY=wrong-secret-1234567890 aws_ s3 ls 2>"$work/err"; then
  echo "s3-check: wrong secret accepted" >&2; exit 1
fi
grep -q "SignatureDoesNotMatch" "$work/err" || fail "wrong secret: $(cat "$work/err")"
echo "  ok  wrong secret refused (403 SignatureDoesNotMatch)"
# `aws s3 presign` at its defaults signs with SigV2 query auth (Expires = the end);
# a week is the most any presigned URL may be valid, whatever its signature version.
url=$(aws_ s3 presign s3://cli-check/8m --expires-in 604800)
curl -fsS -o "$work/8m.presigned" "$url" && cmp "$work/8m" "$work/8m.presigned" || fail "presigned GET (a week)"
long=$(aws_ s3 presign s3://cli-check/8m --expires-in 315360000)
# The URL as signed, and rewritten by its holder (no key needed): SigV2 does not
# sign X-Amz-Expires, and s3s decodes encoded names and values before checking.
for u in "$long" "$long&X-Amz-Expires=1" "${long/Expires=/%45xpires=}" "${long/Signature=/%53ignature=}"; do
  code=$(curl -s -o "$work/err" -w '%{http_code}' "$u")
  [[ $code == 400 ]] && grep -q AuthorizationQueryParametersError "$work/err" || fail "a ten-year presigned URL answered $code: $u $(cat "$work/err")"
done
echo "  ok  presigned URL from the CLI's defaults: a week served, ten years refused (400), also when its query is rewritten"
for f in 8m dir/40m; do
  printf '{"bucket": "cli-check", "key": "%s", "sha256": "%s"}\n' "$f" "$(sha256sum "$work/${f#dir/}" | cut -d' ' -f1)" >>"$work/manifest"
done
# Between buckets, above the CLI's multipart threshold: UploadPartCopy, the bytes
# never through the client.
head -c $((200 << 20)) /dev/urandom >"$work/200m"
aws_ s3 cp --only-show-errors "$work/200m" s3://cli-check/200m
aws_ s3 mb s3://cli-other
aws_ s3 cp --only-show-errors s3://cli-check/200m s3://cli-other/200m-copy
aws_ s3 cp --only-show-errors s3://cli-other/200m-copy "$work/200m.back"
cmp "$work/200m" "$work/200m.back" || fail "200 MiB copy between buckets differs"
printf '{"bucket": "cli-other", "key": "200m-copy", "sha256": "%s"}\n' "$(sha256sum "$work/200m" | cut -d' ' -f1)" >>"$work/manifest"
rm -f "$work/200m" "$work/200m.back"
aws_ s3 rm --only-show-errors s3://cli-check/200m
echo "  ok  200 MiB object copied between buckets (multipart copy)"
echo "-- s3cmd"
s3c() {
  s3cmd --no-ssl --host="127.0.0.1:$port" --host-bucket="127.0.0.1:$port" \
    --access_key="$CAIRN_ROOT_ACCESS_KEY" --secret_key="$CAIRN_ROOT_SECRET_KEY" \
    --region=us-east-1 --config=/dev/null "$@"
}
head -c 300000 /dev/urandom >"$work/s3cmd.in"
s3c mb s3://s3cmd-check >/dev/null
s3c put --quiet "$work/s3cmd.in" s3://s3cmd-check/one
s3c setacl --acl-private s3://s3cmd-check/one >/dev/null || fail "s3cmd setacl --acl-private"
if s3c setacl --acl-public s3://s3cmd-check/one >"$work/err" 2>&1; then fail "s3cmd setacl --acl-public accepted"; fi
# Into a file, not a pipe: `grep -q` stops reading at its match, and under
# pipefail the SIGPIPE s3cmd then gets would fail the line.
s3c info s3://s3cmd-check/one >"$work/info"
grep -q "FULL_CONTROL" "$work/info" || fail "s3cmd info shows no owner ACL"
s3c get --quiet --force s3://s3cmd-check/one "$work/s3cmd.out"
cmp "$work/s3cmd.in" "$work/s3cmd.out" || fail "s3cmd get differs"
[[ $(s3c ls s3://s3cmd-check | wc -l) == 1 ]] || fail "s3cmd ls"
printf '{"bucket": "s3cmd-check", "key": "one", "sha256": "%s"}\n' "$(sha256sum "$work/s3cmd.in" | cut -d' ' -f1)" >>"$work/manifest"
echo "  ok  s3cmd put, setacl --acl-private (public refused), info, get, ls"
echo "-- boto3"
python3 ci/s3_check.py write "$endpoint" "$work/manifest"
echo "-- minio-py"
python3 ci/s3_check.py minio "$endpoint" "$work/manifest"
echo "-- data services with boto3 (tagging, CORS, lifecycle, versions)"
python3 ci/s3_services.py "$endpoint"
echo "-- bucket snapshots (nodectl, boto3, aws CLI)"
python3 ci/s3_snapshots.py "$endpoint" "$bin/nodectl" "$work/data"
echo "-- object lock (boto3, aws CLI, a tenant's admin and read-write users)"
python3 ci/s3_object_lock.py "$endpoint" "$bin/nodectl" "$work/data"
echo "-- bucket replication to a second node (nodectl, boto3, the destination stopped and started)"
python3 ci/s3_replication.py "$endpoint" "$bin/nodectl" "$work/data" "$work"
[[ -z "$(aws_ s3api get-bucket-versioning --bucket cli-check)" ]] || fail "aws s3api get-bucket-versioning"
echo "  ok  aws s3api get-bucket-versioning: never enabled"
echo "-- redis-cli (RESP)"
ci/resp-check.sh "127.0.0.1" "$rport" "$work"
echo "-- libnfs (NFSv3, a userspace client at its defaults): one bucket over NFS and S3"
aws_ s3 mb s3://nfs-check >/dev/null
"$bin/nodectl" export add --data "$work/data" root nfs-check --client 127.0.0.1/32 >/dev/null
sleep 2.2 # the node reads its exports at most every 2 s
nfs_url() { echo "nfs://127.0.0.1/root/nfs-check/$1?version=3&nfsport=$nport&mountport=$nport"; }
head -c 3000001 /dev/urandom >"$work/nfs.in"
nfs-cp "$work/nfs.in" "$(nfs_url from-nfs)" >/dev/null || fail "nfs-cp up"
aws_ s3 cp --only-show-errors s3://nfs-check/from-nfs "$work/nfs.s3" || fail "S3 GET of an NFS-written file"
cmp "$work/nfs.in" "$work/nfs.s3" || fail "the NFS-written file differs over S3"
aws_ s3 cp --only-show-errors "$work/nfs.in" s3://nfs-check/dir/from-s3
nfs-cat "$(nfs_url dir/from-s3)" >"$work/nfs.cat" || fail "nfs-cat"
cmp "$work/nfs.in" "$work/nfs.cat" || fail "the S3-written object differs over NFS"
nfs-cp "$(nfs_url dir/from-s3)" "$work/nfs.cp" >/dev/null && cmp "$work/nfs.in" "$work/nfs.cp" || fail "nfs-cp down"
listing=$(nfs-ls "$(nfs_url "")" | awk '{print $NF}' | sort | tr '\n' ' ')
[[ $listing == "dir from-nfs " ]] || fail "nfs-ls shows: $listing"
for k in from-nfs dir/from-s3; do
  printf '{"bucket": "nfs-check", "key": "%s", "sha256": "%s"}\n' "$k" "$(sha256sum "$work/nfs.in" | cut -d' ' -f1)" >>"$work/manifest"
done
echo "  ok  nfs-cp up, S3 GET; S3 PUT, nfs-cat, nfs-cp down; nfs-ls (byte-exact both ways)"
echo "-- nodectl status"
"$bin/nodectl" status --data "$work/data"
objects=$("$bin/nodectl" status --data "$work/data" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"])')
written=$(wc -l <"$work/manifest")
[[ "$objects" == "$written" ]] || fail "status counts $objects objects, $written written"
echo "  ok  status counts $objects objects"

echo "-- /metrics (the admin token; OpenMetrics, parsed strictly)"
admin=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][0]["admin"])' "$work/data/run/dev.json")
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$admin/metrics")
[[ $code == 401 ]] || fail "/metrics without the token answered $code"
curl -sf -H "Authorization: Bearer $(cat "$work/data/state/admin.token")" "http://$admin/metrics" >"$work/metrics.txt" ||
  fail "/metrics with the token"
python3 - "$work/metrics.txt" <<'PY' || fail "/metrics"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
puts = sum(s.value for s in fams["cairn_s3_requests"].samples
           if s.labels.get("op") == "PutObject" and s.labels.get("status") == "200")
assert puts >= 10, f"PutObject 200s counted: {puts}"
assert all(s.value == 1 for s in fams["cairn_drive_healthy"].samples)
# The clients retry what fails in transit; the server's own failures must be none
# (501 is a refusal of what Cairn does not do, which the clients here ask for).
server_errors = {(s.labels.get("op"), s.labels.get("status")): s.value
                 for s in fams["cairn_s3_requests"].samples
                 if s.labels.get("status", "").startswith("5") and s.labels.get("status") != "501"}
assert not server_errors, f"the node answered 5xx: {server_errors}"
print(f"/metrics: {len(fams)} families, {int(puts)} PutObject answered 200")
PY

echo "-- kill -9 of every Cairn process, restart on the same data"
pids=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); n=s["nodes"][0]; print(s["supervisor_pid"], n["datapathd_pid"], n["mgmtd_pid"])' "$work/data/run/dev.json")
kill -9 $pids
wait "$sup" 2>/dev/null || true
sup=""
start
python3 ci/s3_check.py verify "$endpoint" "$work/manifest"

echo "-- Ctrl-C stops cleanly"
kill -INT "$sup"
rc=0; wait "$sup" || rc=$?
sup=""
[[ $rc == 0 ]] || fail "nodectl exited $rc on Ctrl-C"
echo "  ok  clean stop"
echo "s3-check: 1 passed, 0 failed"

#!/usr/bin/env bash
# The test command: formatting, lints, the whole workspace's tests (unit, the real
# daemons under fault injection, aws-sdk-s3 end to end), then a shell-level check
# with the aws CLI and boto3 against `nodectl dev up`, cluster fault and partition
# checks against `nodectl dev up --nodes 7/6`, the KV tier with the real clients
# (redis-cli, redis-py, redis-benchmark, awscrt) on 3 nodes, a history check with failpoints on 5
# nodes, the userspace NVMe driver over VFIO in
# a QEMU guest, the Linux kernel's NFS client in a QEMU guest, and the firmware
# image built and booted by UEFI in QEMU.
#
#   ci/test.sh            everything (what CI runs)
#   ci/test.sh --quick    skip fmt/clippy
set -Eeuo pipefail
cd "$(dirname "$0")/.."
# Each stage is announced with the time so far; a failure names its stage last,
# where a truncated log still shows it.
STAGE="setup"
stage() {
  STAGE=$1
  echo "== $1 (at ${SECONDS} s)"
}
ROOTFS_PID=""
finish() {
  local rc=$?
  # Under `set -e` a failing command here would become the script's status: the
  # background job has usually ended (a passing run waited for it), so kill may fail.
  if [[ -n $ROOTFS_PID ]]; then kill "$ROOTFS_PID" 2>/dev/null || true; fi
  if [[ $rc != 0 ]]; then echo "== FAILED in stage \"$STAGE\" after ${SECONDS} s (exit $rc)" >&2; fi
  exit "$rc"
}
trap finish EXIT
export CARGO_TERM_COLOR=never
# A clean clone builds once: incremental state would only take disk (gigabytes).
export CARGO_INCREMENTAL=0
# The image's Debian root (mmdebstrap: mostly downloading and unpacking packages)
# fills its cache in the background while cargo compiles; the image step waits.
ROOTFS_LOG=$(mktemp /tmp/cairn-rootfs.XXXXXX)
image/build.sh --rootfs-only >"$ROOTFS_LOG" 2>&1 &
ROOTFS_PID=$!
if [[ "${1:-}" != "--quick" ]]; then
  stage "cargo fmt --check"
  cargo fmt --all -- --check
  stage "cargo clippy"
  cargo clippy --workspace --all-targets -- -D warnings
fi
stage "crate graph: the CLI reaches nodes through the admin-API crate, never by linking the daemon"
# Captured first: `grep -q` in a pipe under pipefail can fail on cargo's SIGPIPE.
tree=$(cargo tree -p cairn-nodectl -e normal --prefix none)
if grep -q '^cairn-mgmtd ' <<<"$tree"; then
  echo "nodectl depends on cairn-mgmtd: use cairn-adminapi's client and cairn-credentials" >&2
  exit 1
fi
# One build serves the whole run: the dev profile (optimised, see Cargo.toml),
# for the tests and for every stage after them. A second, release build of the
# same workspace took a quarter of the run on these 2 cores; the release
# profile's own figures are the benchmarks' business (bench/), not CI's.
stage "cargo build (the binaries every later stage runs, and every test)"
# Binaries, tests and examples in one invocation, so that they share one feature
# resolution: built apart, the dev-dependencies' features rebuilt mgmtd and the
# crates under it a second time for the tests.
cargo build --workspace --bins --tests --examples
# Kept apart: the failpoints build below replaces target/debug/mgmtd.
BIN=target/ci-bin
rm -rf "$BIN" && mkdir -p "$BIN"
cp target/debug/{mgmtd,datapathd,nodectl,nodeos} "$BIN"/
stage "cargo test"
# The end-to-end tests start real daemons; two test binaries at a time keeps
# them inside what 2 cores can serve without time-outs.
cargo test --workspace -- --test-threads=2
stage "shell-level S3 check (aws CLI, s3cmd, boto3, minio-py, redis-cli, libnfs)"
ci/s3-check.sh "$BIN"
stage "cluster checks: kill -9 of two nodes under load, repair, replacement, drain (7 nodes); partition (6 nodes)"
ci/cluster-check.sh "$BIN"
stage "KV tier with the real clients: redis-cli, LMCache-like resp:// / redis-py / awscrt, redis-benchmark, tenants, node loss (3 nodes)"
ci/kv-check.sh "$BIN"
stage "the KV tier under a memory cgroup: a write flood, no OOM kill, nothing acknowledged lost"
ci/kv-memory-check.sh "$BIN"
stage "history check: failpoints, kill -9 and a partition under a put/delete/get load (5 nodes)"
# mgmtd with its failpoints compiled in. Built as the whole workspace was (same
# targets, one feature more): only the crates the feature reaches are rebuilt,
# where `-p cairn-mgmtd` resolved features afresh and rebuilt most of the tree
# (6 min against 3 on these cores).
cargo build --workspace --bins --tests --examples --features cairn-mgmtd/failpoints
mkdir -p target/failpoints
cp target/debug/mgmtd target/failpoints/
cp "$BIN"/nodectl "$BIN"/datapathd target/failpoints/
ci/cluster-check.sh --only history target/failpoints
stage "NVMe over VFIO in a QEMU guest (userspace driver, hot unplug)"
NVME_SELFTEST=target/debug/examples/nvme-selftest DATAPATHD="$BIN/datapathd" hwtests/nvme-vfio/run.sh
stage "the Linux kernel's NFS client in a QEMU guest against a node: cp -r of 1000 files, a directory renamed, kill -9 under the mount"
hwtests/nfs-kernel/run.sh "$BIN"
stage "firmware image, booted by UEFI in QEMU, serving S3 from emulated NVMe (kernel driver, then userspace over VFIO)"
wait $ROOTFS_PID || { cat "$ROOTFS_LOG"; echo "image root filesystem: FAILED" >&2; exit 1; }
ROOTFS_PID=""
image/build.sh --bin "$BIN"
hwtests/run.sh --quick
stage "all checks passed"

#!/usr/bin/env bash
# Installs what building and testing Cairn needs on a fresh Debian 12 machine:
# ISA-L (erasure coding), a C toolchain, curl, the S3 clients the shell-level
# checks use (aws CLI, boto3, minio-py, s3cmd), redis-cli and redis-benchmark
# (redis-tools) for the RESP checks, the KV check's clients (redis-py, awscrt) and
# reference (redis-server), iproute2 (clusters in network namespaces), the image
# build's tools (mmdebstrap, erofs, GPT and FAT without loop mounts) and QEMU with
# OVMF, busybox and kmod (the VM tests in hwtests/), OpenIPMI's ipmi_sim and
# ipmitool (simulated BMCs: ci/bmc-sim.sh), chromium (the status page's test),
# libnfs-utils (nfs-cp, nfs-ls, nfs-cat: a userspace NFS client; the host kernel has none).
# Idempotent; run as root.
set -euo pipefail
need_apt=()
for p in build-essential pkg-config libisal-dev curl ca-certificates python3-pip \
    redis-tools redis-server iproute2 qemu-system-x86 ovmf busybox-static kmod binutils \
    mmdebstrap erofs-utils gdisk dosfstools mtools e2fsprogs openssh-client openipmi ipmitool chromium libnfs-utils; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if ((${#need_apt[@]})); then
  echo "ci/install-deps: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
py=python3
if ! $py -c 'import boto3, minio, redis, awscrt, prometheus_client, moto' 2>/dev/null || ! command -v aws >/dev/null 2>&1 ||
  ! command -v s3cmd >/dev/null 2>&1 || ! command -v moto_server >/dev/null 2>&1; then
  echo "ci/install-deps: pip install awscli boto3 minio s3cmd redis awscrt prometheus_client moto[server]"
  $py -m pip install -q awscli boto3 minio s3cmd redis awscrt prometheus_client 'moto[server]' 2>/dev/null ||
    $py -m pip install -q --break-system-packages awscli boto3 minio s3cmd redis awscrt prometheus_client 'moto[server]'
fi
# pyenv keeps console scripts behind shims that need a rehash.
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
command -v aws >/dev/null || { echo "ci/install-deps: aws CLI missing after install" >&2; exit 1; }
command -v s3cmd >/dev/null || { echo "ci/install-deps: s3cmd missing after install" >&2; exit 1; }
# (moto_server: an S3 endpoint that is not Cairn, as a replication destination.)
command -v moto_server >/dev/null || { echo "ci/install-deps: moto_server missing after install" >&2; exit 1; }
echo "ci/install-deps: ok"

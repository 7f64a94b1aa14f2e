#!/usr/bin/env bash
# Cairn's QEMU end-to-end tests (see hwtests/README.md).
#
#   hwtests/run.sh [--quick|--all] [--image DIR] [--workdir DIR] [--keep] [TEST...]
#
# --quick (the default, what CI runs): boot, vfio. --all: boot, update, cluster, vfio. Tests need the built
# image (image/build.sh), QEMU, OVMF, dosfstools, mtools, erofs-utils and boto3; a
# missing one fails the run. Every QEMU started is killed when the runner exits.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "hwtests: FAILED: python3 is missing" >&2; exit 1; }
exec python3 hwtests/hwtests.py "$@"

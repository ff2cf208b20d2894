#!/usr/bin/env bash
# make setup-runtime: the optional runtime that survives a lost Open MPI daemon (issue #47).
#
# PyPI's Open MPI 5.0.11 bundles PRRTE 3.0.x, whose job ends when a host's prted dies. Lost-daemon
# tolerance (openpmix/prrte PR 2443) is in PRRTE 5.0; Debian unstable packages it (libprrte-bin 5.0.0~rc1,
# PMIx 7, openmpi-bin 6.0.0~rc2 built on them), for glibc >= 2.38, so it lives in a chroot made from
# Debian's own repository. Only its launcher (mpirun/prterun, prted) is used: the ranks still run the
# venv's Python, mpi4py and Open MPI 5.0.11 libraries (their PMIx 5 client talks to PMIx 7), so Horovod
# needs no rebuild. Idempotent: a finished chroot (its .psbench-runtime stamp) is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${PSBENCH_RUNTIME_DIR:-$PWD/.runtime/prrte5}"
MIRROR="${PSBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STAMP="$DIR/.psbench-runtime"
PACKAGES=openmpi-bin,libprrte-bin,procps,util-linux,iproute2,openssh-client

if [ -f "$STAMP" ]; then
  echo "runtime: $DIR ($(cat "$STAMP"))"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "make setup-runtime needs root (it builds a chroot and psbench enters it with bind mounts)" >&2
  exit 2
fi
if ! command -v mmdebstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi
rm -rf "$DIR.partial"
mkdir -p "$(dirname "$DIR")"
# sid's Release file can be past its Valid-Until date between uploads: apt would refuse it
mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
  --include="$PACKAGES" sid "$DIR.partial" "$MIRROR"
VERSION="$(chroot "$DIR.partial" prte_info 2>/dev/null | sed -n "s/^ *PRR*TE: *//p" | head -1)"
case "$VERSION" in
  5.*|6.*|7.*) ;;
  *) echo "the chroot's prterun is not PRRTE >= 5: $VERSION" >&2; exit 1 ;;
esac
rm -rf "$DIR"
mv "$DIR.partial" "$DIR"
echo "$VERSION" > "$STAMP"
echo "runtime: $DIR ($VERSION)"

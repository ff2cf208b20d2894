#!/bin/sh
# Runs "$@" inside the PRRTE 5 runtime's chroot (make setup-runtime; launch/driver/runtime.py), in a
# private mount namespace that sees this machine's processes, devices, temporary folders, home and the
# folder tree of this checkout (the venv, the run directories), so the chroot's mpirun/prted start the
# venv's Python as on the host. The ssh route enters it the same way on the other hosts. The data the ranks
# read is bound in too: /usr/share/datasets (Debian's dataset packages) and the folders PSBENCH_RUNTIME_BINDS
# lists, colon-separated (launch/driver/runtime.py data_binds: --data-dir, PSBENCH_DATA).
set -e
HERE=$(cd "$(dirname "$0")/.." && pwd -P)
DIR=${PSBENCH_RUNTIME_DIR:-$HERE/.runtime/prrte5}
if [ ! -f "$DIR/.psbench-runtime" ]; then
  echo "psbench: no PRRTE 5 runtime at $DIR: run make setup-runtime" >&2
  exit 2
fi
PSBENCH_TOP=/$(echo "$HERE" | cut -d/ -f2)
PSBENCH_CWD=$(pwd -P)
export PSBENCH_TOP PSBENCH_CWD
exec unshare --mount --propagation private -- /bin/sh -c '
  R=$1; shift
  IFS=:
  for d in /proc /sys /dev /tmp /run /root /home /opt /usr/local /usr/share/datasets "$PSBENCH_TOP" \
           $PSBENCH_RUNTIME_BINDS; do
    [ -d "$d" ] || continue
    mkdir -p "$R$d"
    mount --rbind "$d" "$R$d"
  done
  unset IFS
  for f in /etc/hosts /etc/hostname /etc/passwd /etc/group /etc/resolv.conf; do
    [ -f "$f" ] || continue
    [ -e "$R$f" ] || touch "$R$f"
    mount --bind "$f" "$R$f"
  done
  exec chroot "$R" /bin/sh -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "${PSBENCH_CWD:-/}" "$@"
' sh "$DIR" "$@"

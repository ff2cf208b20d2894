#!/bin/bash
# PRRTE's ssh agent under --runtime prrte5 (--prtemca plm_ssh_agent): starts the daemon on the other host
# inside that host's view of the runtime (scripts/in_runtime.sh, on the file system the hosts share),
# as prterun runs inside this host's. PRRTE gives the host, then the daemon's command line in words.
host=$1
shift
# the data folders the ranks read (scripts/in_runtime.sh), bound there as here
exec ssh -x "$host" "$(printf '%q ' env "PSBENCH_RUNTIME_BINDS=${PSBENCH_RUNTIME_BINDS:-}" \
  "$(dirname "$(readlink -f "$0")")/in_runtime.sh" /bin/sh -c "$*")"

"""Ranks that died on a signal psbench did not send, read from Open MPI's report in mpirun.log.

A rank that crashes (SIGSEGV, SIGBUS, SIGABRT, ...) records nothing itself. Open MPI's
signal handler prints ``[host:pid] Signal: Segmentation fault (11)`` and a stack trace to
the job's output, which the launcher writes to ``mpirun.log``. The launcher scans that
file's new bytes as the run goes and records each crash at once as a ``crash`` event
with the rank's role (from ``pids/``). The job goes on: ULFM tells the survivors, who
repair it like any death. SIGKILL, which the fault injector sends, cannot be caught and
prints nothing, so injected kills never show up here.
"""
from __future__ import annotations

import re
import signal
from pathlib import Path

from psmodes.pidfiles import pid_files

SIGNAL_LINE = re.compile(rb"^\[([^\]:\s]+):(\d+)\] Signal: ([^\r\n]+)$", re.M)
MAX_READ = 4 << 20  # bytes per poll: Open MPI can print an error line millions of times


class CrashScan:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "mpirun.log"
        self.offset = 0
        self.seen: set[tuple[str, int]] = set()

    def new(self) -> list[dict]:
        """Crashes reported since the last call: host, pid, signal and role (None if unknown)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(MAX_READ)
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1  # a partial last line waits for the next read
        self.offset += end
        crashes = []
        for m in SIGNAL_LINE.finditer(chunk[:end]):
            host, pid = m.group(1).decode(errors="replace"), int(m.group(2))
            if (host, pid) in self.seen:
                continue
            self.seen.add((host, pid))
            crashes.append({"host": host, "pid": pid, "signal": m.group(3).decode(errors="replace").strip(),
                            "role": self._role_of(host, pid)})
        return crashes

    def _role_of(self, host: str, pid: int) -> str | None:
        for role, info in pid_files(self.run_dir):
            if info.get("pid") == pid and str(info.get("host", host)).split(".")[0] == host.split(".")[0]:
                return info.get("role", role)
        return None


def reason(crash: dict) -> str:
    who = crash["role"] or "a rank"
    return (f"{who} (pid {crash['pid']} on {crash['host']}) died of {crash['signal']}, a signal psbench did "
            "not send; the stack trace is in mpirun.log")


LOST_DAEMON = re.compile(rb"PRTE has lost communication with a remote daemon\..*?Remote daemon: \S+ on node (\S+)", re.S)


# mpirun's own failure in the spawn of a replacement (docs/openmpi.md item 15): the PMIx server's spawn
# handler reports an error; then it may die, or lose a daemon nobody killed
SPAWN_FAILURE = b"pmix_server_dyn.c"


def runtime_abort(log: bytes, node_lost: bool = True) -> tuple[str, bool] | None:
    """Why Open MPI's runtime ended the job, when it says so in ``mpirun.log``, and whether that was the
    runtime's own failure (a crash to record: nobody injected it). With the Open MPI 5.0.x this project
    installs (PRRTE 3.0.x), losing a host's daemon (``prted``: a node lost, ``--kill-node``) ends the whole
    job, ULFM or not; PRRTE tolerates lost daemons only from 5.0 (openpmix/prrte PR 2443; ``--runtime
    prrte5``; docs/openmpi.md). ``node_lost``: the launcher lost a node on purpose. A daemon lost when
    nobody killed one, after the runtime's error in a spawn, was the runtime's failure (chaos over two
    hosts, chain trials 011, 026 and 029 of seed 46: a hung replica's replacement spawned, then "PRTE has
    lost communication with a remote daemon" on the PS's host)."""
    m = LOST_DAEMON.search(log)
    if m is None:
        return None
    host = m.group(1).decode(errors="replace")
    if not node_lost and SPAWN_FAILURE in log:
        return (f"Open MPI's runtime failed in the spawn of a replacement (a PMIx error in pmix_server_dyn.c, "
                f"docs/openmpi.md item 15), then lost its daemon on {host} and ended the job; see mpirun.log"), True
    return (f"Open MPI's runtime lost the daemon on {host} and ended the job "
            "(PRRTE 3.0.x cannot run through a lost daemon; see mpirun.log)"), not node_lost


def launcher_signal(returncode: int | None) -> str | None:
    """Why a job ended whose ``mpirun`` (prterun) itself died of a signal psbench did not send (its
    returncode is minus the signal); None for any other end. Seen (two-host chaos at 83a058c, chain
    trial-013): PRRTE 3.0.x's prterun died of SIGSEGV 0.1 s after a hung replica's fence, writing nothing,
    and the run was recorded incomplete with no reason."""
    if returncode is None or -returncode not in CRASH_SIGNALS:  # SIGTERM, SIGKILL: the launcher's own stop
        return None
    name = signal.Signals(-returncode).name
    return f"Open MPI's launcher (mpirun) died of {name}, a signal psbench did not send: the runtime crashed"


CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}

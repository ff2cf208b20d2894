"""Where a running process stood when the launcher fenced it: every rank's Python stacks, on SIGUSR1.

A fenced process that was stopped (an injected hang) has nothing to tell. One that was running was
suspected because something in psbench stalled, and its events cannot say where: seen in psbench chaos
over two hosts (chain trial-002), a promoted head answered one Hello and then nothing for 3 s, with no
event after the Hello. Each rank registers :mod:`faulthandler` for :data:`SIGNAL` (a C-level handler: it
writes even while the main thread is blocked in an MPI call) into ``<run_dir>/pids/stacks/<host>-<pid>``;
the launcher sends the signal to a running suspect on its own host, waits :data:`DUMP_WAIT_S`, SIGKILLs
it and puts the dump in its ``fence`` event (launch/driver/injector.py).
"""
from __future__ import annotations

import faulthandler
import os
import signal
import socket
import time
from pathlib import Path

SIGNAL = signal.SIGUSR1
DUMP_WAIT_S = 0.2
_FILES: list = []  # the open dump files (faulthandler writes to their descriptors)


def path_of(run_dir: str | Path, host: str, pid: int) -> Path:
    return Path(run_dir) / "pids" / "stacks" / f"{host}-{int(pid)}"


def register(run_dir: str | Path) -> None:
    """This process dumps every thread's stack into its file on :data:`SIGNAL`."""
    path = path_of(run_dir, socket.gethostname(), os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "w")
    _FILES.append(fh)
    faulthandler.register(SIGNAL, file=fh, all_threads=True, chain=False)


def running(pid: int) -> bool:
    """Whether a local process is alive and not stopped (``/proc/<pid>/stat`` state)."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("T", "t", "Z", "X")


def dump_peers(run_dir: str | Path) -> list[str]:
    """Ask every other running rank of this host to dump its stacks (a rank whose wait timed out does this
    before the job is taken down: seen in psbench chaos, a promoted head waited 62 s for the evaluator to
    take its final snapshot and nothing said where the evaluator stood). Returns the roles asked."""
    from .pidfiles import pid_files

    host, asked = socket.gethostname(), []
    for role, info in pid_files(run_dir):
        pid = int(info["pid"])
        if info.get("host") == host and pid != os.getpid() and running(pid) and _of_this_run(pid, run_dir):
            try:
                os.kill(pid, SIGNAL)
                asked.append(role)
            except ProcessLookupError:
                continue
    if asked:
        time.sleep(DUMP_WAIT_S)
    return asked


def _of_this_run(pid: int, run_dir: str | Path) -> bool:
    """Whether ``pid`` is a rank of this run (a pid file outlives its process, and the pid may be reused: the
    signal's default action would kill a stranger)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "psmodes.main" in cmdline and (str(run_dir) in cmdline or str(Path(run_dir).resolve()) in cmdline)


def dump_of(run_dir: str | Path, host: str, pid: int, limit: int = 4000) -> str | None:
    """The dump a process wrote, if any (its first ``limit`` characters)."""
    try:
        text = path_of(run_dir, host, pid).read_text()[:limit]
    except OSError:
        return None
    return text or None

"""Liveness beacons: every rank touches a file of its own every :data:`BEAT_S`, from a daemon thread.

A wait on a peer that answers in milliseconds suspects it after ``--suspect-after``
(:mod:`psmodes.suspicion`). Some waits are long for a live peer, and some peers nobody waits on
until a collective: the PS's final snapshot waits for an evaluator busy scoring the previous one
(18 s for ResNet-18 on 2 busy cores), and a repair's ``MPI_Comm_shrink`` waits for every member,
the evaluator and the spares included, which nobody else waits on. A hung one of those was found
by nobody: every survivor sat in the shrink until the watchdog. A beacon tells a hung process
from a busy one: a stopped process stops every thread, its beacon too, while a busy one's beacon
goes on. The file is ``<run_dir>/pids/beats/<host>-<pid>`` (the run directory is shared, as the pid
files it sits beside are).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

BEAT_S = 0.5


def path_of(run_dir: str | Path, host: str, pid: int) -> Path:
    return Path(run_dir) / "pids" / "beats" / f"{host}-{int(pid)}"


def start(run_dir: str | Path) -> None:
    """Touch this process's beacon every BEAT_S until the process ends."""
    path = path_of(run_dir, socket.gethostname(), os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()

    def beat() -> None:
        while True:
            time.sleep(BEAT_S)
            try:
                os.utime(path)
            except OSError:
                path.touch()

    threading.Thread(target=beat, name="beacon", daemon=True).start()


def silent_for(run_dir: str | Path, host: str, pid: int) -> float | None:
    """Seconds since the process last beat (None: it has no beacon, e.g. it ran before beacons)."""
    try:
        return max(0.0, time.time() - path_of(run_dir, host, pid).stat().st_mtime)
    except OSError:
        return None

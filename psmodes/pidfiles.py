"""Pid files: ``<run_dir>/pids/<role>.json`` names the process that holds a role now.

The holder writes it when it takes the role (the PS, a promoted replica, a replica, a
worker); the launcher's fault injector reads it to find its target, and a rank that
suspects a peer (:mod:`psmodes.suspicion`) reads it to name the process to fence, and
:func:`alive` tells whether a holder on this host still runs.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from .atomic import write_text_atomic
from .events import Ev


def write_pid_file(ctx, role: str) -> None:
    """``role`` is held by this process from now on (``ctx``: a psmodes.context.Context)."""
    folder = Path(ctx.cfg.run_dir) / "pids"
    folder.mkdir(exist_ok=True)
    info = {"pid": os.getpid(), "host": socket.gethostname(), "rank": ctx.cluster.rank, "role": role,
            "generation": ctx.cluster.generation, "t": time.time()}
    write_text_atomic(folder / f"{role}.json", json.dumps(info) + "\n")
    ctx.log.emit(Ev.ROLE, **info)


def read_pid_file(run_dir: str | Path, role: str) -> dict | None:
    """The holder of ``role`` (pid, host, rank, generation), or None if none wrote it yet."""
    try:
        return json.loads((Path(run_dir) / "pids" / f"{role}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def pid_files(run_dir: str | Path) -> list[tuple[str, dict]]:
    """Every role's holder on record, as (role, pid file), in the roles' order."""
    out = []
    for path in sorted((Path(run_dir) / "pids").glob("*.json")):
        info = read_pid_file(run_dir, path.stem)
        if info is not None:
            out.append((path.stem, info))
    return out


def alive(pid: int) -> bool:
    """Whether process ``pid`` on this host is alive (a zombie is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:  # reaped since the signal test (seen: a zombie taken by init), or no /proc
        return not os.path.exists("/proc/self/stat")
    except OSError:
        return True

"""The fault injector: SIGKILLs the current PS (or a chain replica) on schedule.

A kill point is ``AT`` = a time since training started (``20s``, ``1.5m``), a
share of ``--duration`` (``33%``: a third of the way; lets one sweep file serve
any run length), or a PS step (``step:800``). The target is whichever process holds the role at
that moment, read from the pid file it writes when it takes the role
(``<run_dir>/pids/<role>.json``). Kills are taken in order; a kill waits for
a live target that it has not killed before (the replacement, for a second
kill), and a kill never reached before the run ends is recorded as such.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from psmodes.config import ConfigError, parse_duration


@dataclass
class KillPoint:
    target: str          # "ps" or "replica1", ...
    at_s: float | None   # seconds since train start
    at_step: int | None  # PS version
    spec: str

    def due(self, elapsed: float | None, step: int | None) -> bool:
        if self.at_s is not None:
            return elapsed is not None and elapsed >= self.at_s
        return step is not None and step >= self.at_step


_STEP = re.compile(r"^step:(\d+)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*%$")


def parse_kills(specs: list[str], target: str, duration_s: float | None = None) -> list[KillPoint]:
    """Kill points of ``--kill-ps``/``--kill-replica``; ``duration_s`` resolves ``N%``."""
    points = []
    for spec in specs:
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            m = _STEP.match(part)
            if m:
                points.append(KillPoint(target, None, int(m.group(1)), part))
            elif part.startswith("step:"):
                raise ConfigError(f"kill point {part!r}: write step:N with N a whole number")
            elif part.endswith("%"):
                pm = _PERCENT.match(part)
                if not pm or not 0 < float(pm.group(1)) < 100:
                    raise ConfigError(f"kill point {part!r}: write a share of the run between 0% and 100%, e.g. 33%")
                if duration_s is None:
                    raise ConfigError(f"kill point {part!r}: a share of the run needs --duration "
                                      "(a --steps run has no fixed length; use step:N)")
                points.append(KillPoint(target, round(duration_s * float(pm.group(1)) / 100, 3), None, part))
            else:
                points.append(KillPoint(target, parse_duration(part, f"kill point {part!r}"), None, part))
    return points


def read_pid_file(run_dir: Path, role: str) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "pids" / f"{role}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def alive(pid: int) -> bool:
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
    except OSError:
        return True


def sigkill(info: dict) -> str:
    """SIGKILL the process in a pid file; locally, or over ssh on another host."""
    if info["host"] in (socket.gethostname(), "localhost"):
        os.kill(int(info["pid"]), signal.SIGKILL)
        return "local"
    subprocess.run(["ssh", "-o", "BatchMode=yes", info["host"], "kill", "-9", str(int(info["pid"]))],
                   check=True, timeout=10)
    return "ssh"


class Injector:
    def __init__(self, run_dir: Path, points: list[KillPoint], log) -> None:
        self.run_dir = Path(run_dir)
        self.points = points
        self.log = log
        self.killed: set[tuple[int, str]] = set()
        self.done: list[dict] = []

    def poll(self, elapsed: float | None, step: int | None) -> None:
        """Called by the launcher's loop; fires at most the next due kill."""
        if not self.points or not self.points[0].due(elapsed, step):
            return
        point = self.points[0]
        info = read_pid_file(self.run_dir, point.target)
        if info is None or (info["pid"], info["host"]) in self.killed or not alive(int(info["pid"])):
            return  # no live target yet (e.g. the replacement is still starting): try again next poll
        self.points.pop(0)
        t = time.time()
        how = sigkill(info)
        self.killed.add((info["pid"], info["host"]))
        rec = self.log.emit("kill", t_kill=t, pid=info["pid"], host=info["host"], role=point.target,
                            rank=info.get("rank"), generation=info.get("generation"), at=point.spec,
                            elapsed_s=elapsed, step=step, how=how, signal="SIGKILL")
        self.done.append(rec)

    def finish(self) -> None:
        for point in self.points:
            self.log.emit("kill_not_reached", role=point.target, at=point.spec,
                          reason="the run ended before this kill point")
        self.points = []

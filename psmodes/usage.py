"""This process's CPU and wall time, for ``psbench perf``'s per-rank CPU figures: from the
interpreter's start (``usage`` events), from the role's start event on (without the
interpreter's, torch's and MPI's start-up), and the PS's share over its training alone.

Its own module, not :mod:`psmodes.main`'s: a rank runs ``python -m psmodes.main``, so that
module is ``__main__``, and a ``from .main import`` elsewhere would load a second copy whose
start mark was never set."""
from __future__ import annotations

import resource
import time

from .events import Ev

T_START = time.time()
# CPU and wall time when the role's start event was written: a rank's share of a core while it
# works or waits, apart from the interpreter's, torch's and MPI's start-up (about 3 s of CPU in
# 4 s, which made a PS that waits most of its 20 s run look like a quarter of a core); a spare that
# takes a role writes a second start event, and its wait stays in
_STARTED: dict[str, float] = {}


def cpu_s() -> float:
    """CPU seconds of this process so far, all threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def mark_started() -> None:
    """The role's start event is being written (the first one counts)."""
    _STARTED.setdefault("cpu_s", cpu_s())
    _STARTED.setdefault("t", time.time())


def since_started() -> tuple[float, float] | None:
    """(CPU seconds, wall seconds) from the role's start event on; None before it."""
    if not _STARTED:
        return None
    return round(cpu_s() - _STARTED["cpu_s"], 3), round(time.time() - _STARTED["t"], 3)


def emit_usage(log) -> None:
    """This process's CPU time (all threads), wall time and peak RSS: ``psbench perf``
    shows per-rank CPU time to catch ranks that spin while they wait; ``run_cpu_s`` and
    ``run_wall_s`` count from its start event on (without the start-up)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    since = since_started()
    log.emit(Ev.USAGE, cpu_s=round(ru.ru_utime + ru.ru_stime, 3), wall_s=round(time.time() - T_START, 3),
             maxrss_mb=round(ru.ru_maxrss / 1024, 1),
             **({"run_cpu_s": since[0], "run_wall_s": since[1]} if since else {}))

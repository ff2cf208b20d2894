"""No process of a run outlives its launcher: the children the launcher starts (mpirun, the
fault injector's hang and slow scripts) get SIGKILL when it dies, even by SIGKILL
(PR_SET_PDEATHSIG, Linux). SIGKILL because a stopped process defers every other
signal until it is continued, and a hung PS is exactly that.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

try:  # loaded before any fork: the child of Popen only calls prctl
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None
PR_SET_PDEATHSIG = 1


def die_with(parent_pid: int):
    """preexec_fn for a child of the launcher: SIGKILL it when the launcher dies (Linux)."""

    def preexec() -> None:
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
            if os.getppid() != parent_pid:  # the launcher died before prctl took effect
                os._exit(1)

    return preexec

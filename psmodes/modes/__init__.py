"""The recovery modes, one module each, behind one interface (:mod:`.base`).

To add a mode: write ``psmodes/modes/<name>.py`` with a :class:`~.base.RecoveryMode`
subclass, and register it below. Nothing else in the runtime, the launcher or the
reports branches on a mode's name: they call its hooks and read its promise.
This package imports no torch or MPI (the launcher reads the promises too).
"""
from __future__ import annotations

from .base import RecoveryMode
from .chain import ChainReplication
from .checkpoint import CheckpointRecovery
from .hybrid import Hybrid
from .none import NoRecovery
from .stateless import Stateless

REGISTRY: dict[str, RecoveryMode] = {m.name: m for m in (
    NoRecovery(),
    CheckpointRecovery(),
    ChainReplication(),
    Stateless(),
    Hybrid(),
)}
NAMES = tuple(REGISTRY)


def get(name: str) -> RecoveryMode:
    """The mode called ``name``; KeyError for an unknown one (RunConfig.validate says so first)."""
    return REGISTRY[name]

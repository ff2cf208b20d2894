"""The one registry of fault kinds: every list of kinds in psbench is read from here."""
from __future__ import annotations

from . import hang, kill, node, outside, partition, slow
from .base import FaultKind, Option

# the one list of kinds, in the order psbench chaos draws them (a seed draws what it drew before)
KINDS: dict[str, FaultKind] = {k.KIND.name: k.KIND for k in (kill, hang, slow, outside, node, partition)}
# every option that schedules a fault by hand, in the order the reports and a sweep's names list them
OPTIONS: tuple[Option, ...] = tuple(o for k in KINDS.values() for o in k.options)
CHAOS_KINDS: dict[str, FaultKind] = {name: k for k in KINDS.values() for name in k.chaos}  # kill, hang, pause, ...
CHAOS_DEFAULT = tuple(name for name, k in CHAOS_KINDS.items() if k.chaos_default)
PERF_KINDS: dict[str, FaultKind] = {n: k for n, k in KINDS.items() if k.perf_repairs}
EVENTS = tuple(dict.fromkeys(k.emits for k in KINDS.values() if k.emits))  # the launcher's events of faults sent


def takes_down(kind: str) -> bool:
    """Whether a fault record of ``kind`` (a name here, or ``unplanned``: a death nobody injected)
    ended its target's process at the fault (a hang's only once fenced: its record says when)."""
    return kind == "unplanned" or (kind in KINDS and KINDS[kind].takes_down)

"""The kinds of fault psbench injects, one module each, and the one registry of them.

A kind (:class:`~launch.faultkinds.base.FaultKind`) declares its options, syntax, targets, whether it
ends the target (a replacement slot), how it is injected, recorded, drawn and weighted in chaos; the
CLI, the placement, the mpirun line, the injector, the analysis, the reports, ``psbench chaos`` and
``psbench perf`` read them here. A run's faults are parsed once into a :class:`FaultPlan`
(:func:`plan_of`).

Adding a kind: a module here with ``KIND = MyKind(...)`` (its injection, its event and its records),
its name in :data:`~launch.faultkinds.registry.KINDS`, its option in psmodes/config.py (options are declared once, in the
RunConfig the ranks read too) when ``psbench run`` schedules it by hand, its tests and its row in the README's and docs/faults.md's tables.
"""
from __future__ import annotations

from .base import FaultKind, Option, Point
from .plan import FaultPlan, parse_points, plan_of
from .registry import CHAOS_DEFAULT, CHAOS_KINDS, EVENTS, KINDS, OPTIONS, PERF_KINDS, takes_down

__all__ = ["KINDS", "OPTIONS", "CHAOS_KINDS", "CHAOS_DEFAULT", "PERF_KINDS", "EVENTS", "FaultKind", "FaultPlan", "Option", "Point",
           "parse_points", "plan_of", "takes_down"]

"""What a kind of fault is: :class:`FaultKind`, the interface every kind's module fills in, and
:class:`Point`, one fault of a run's schedule (the kind, its target, when it is due).

A kind declares, as data where it can:

- ``options``: the ``psbench run`` options (:class:`Option`: the RunConfig field declared in
  psmodes/config.py, the role it aims at, its label in a sweep's names and in the reports);
- ``length``: whether ``AT~DUR`` is refused, allowed or required;
- ``needs_replacement``: a fault after which the target's role needs another process (a kill; a hang,
  which is fenced): a replacement slot in the placement; ``takes_down``: the fault itself ends the
  target (its outage counts against ETTR from the fault; a hang's only once it is fenced);
- ``fenceable``: a fence of its target during it belongs to it (a hung, slowed or cut-off process);
- ``failure_process``: whether ``--failures TARGET:DIST:PARAMS:KIND`` may draw it;
- ``chaos``: the names ``psbench chaos --kinds`` draws it as (``chaos_default``: among the default
  kinds), ``perf_repairs``: how ``psbench perf``'s
  failure section repairs it (none: not measured there);
- how it is drawn (``plot_lines``, ``timeline``) and named (``perf_name``);

and implements how it is injected (:meth:`inject`: a signal, a script on the target's host, a cut
link, a node) and recorded (:meth:`event`, and :meth:`records` from a run's event streams).
"""
from __future__ import annotations

from dataclasses import dataclass, field

NONE, OPTIONAL, REQUIRED = "none", "optional", "required"  # AT~DUR: a length refused, allowed, required


@dataclass(frozen=True)
class Option:
    field: str    # the RunConfig field (psmodes/config.py declares the option once)
    target: str   # the role it aims at: ps, replica (the tail; AT@replicaN) or worker (the last one)
    label: str    # in a sweep's names: kills2, replica-hangs1 (launch/analysis/naming.py)
    what: str     # in the reports' fault schedule: "PS killed at 15s"


@dataclass
class Point:
    """One fault of a run: due at a time (``at_s``), a PS step (``at_step``), a test's kill point
    (``point``) or a delay after the previous kill (``after_s``)."""
    target: str          # "ps" or "replica1", ...
    at_s: float | None   # seconds since train start
    at_step: int | None  # PS version
    spec: str
    point: str | None = None      # point:NAME, a test-only kill point (psmodes/killpoints.py)
    after_s: float | None = None  # +DUR: this long after the previous kill (the target's next live holder)
    kind: str = "kill"            # a name in launch.faultkinds.KINDS
    for_s: float | None = None    # ~DUR: how long a hang or a slow phase lasts (a hang: None = until fenced)

    def due(self, elapsed: float | None, step: int | None) -> bool:
        if self.point is not None or self.after_s is not None:
            return False  # reached through the rank's killpoint event / the previous kill
        if self.at_s is not None:
            return elapsed is not None and elapsed >= self.at_s
        return step is not None and step >= self.at_step


@dataclass(frozen=True)
class FaultKind:
    name: str
    summary: str                        # one line: what it does to the target
    emits: str = ""                     # the launcher's event of a fault sent (a node loss is a "kill")
    options: tuple[Option, ...] = ()
    length: str = NONE
    needs_replacement: bool = False
    takes_down: bool = False
    fenceable: bool = False
    failure_process: bool = False
    chaos: tuple[str, ...] = ()
    chaos_default: bool = True          # drawn unless --kinds says otherwise (a partition needs hosts: asked for)
    perf_repairs: tuple[str, ...] = ()  # spawn, spare
    perf_name: str = ""
    plot_lines: dict = field(default_factory=dict)  # target (ps, replica) -> (matplotlib dash, label)
    timeline: dict = field(default_factory=dict)    # a run's timeline: color, linestyle, label

    def option_name(self, target: str) -> str:
        """The option a point of this kind at ``target`` came from, for messages."""
        role = "ps" if target == "ps" else "worker" if target.startswith("worker") else "replica"
        return next((f"--{o.field.replace('_', '-')}" for o in self.options if o.target == role),
                    f"--failures ...:{self.name}")

    # ---- the launcher's side (launch/driver/injector.py calls these)
    def inject(self, injector, info: dict, point: Point) -> dict:
        """Carry the fault out on the process of pid file ``info``; returns how (``how``: local,
        ssh, srun, and what the route measured). Raises KillFailed or OSError when it could not."""
        raise NotImplementedError

    def event(self, injector, t: float, point: Point, common: dict, how: dict) -> dict:
        """Record the fault sent (the launcher's event); returns the record."""
        raise NotImplementedError(f"{self.name} is not sent by psbench's injector")

    # ---- the analysis's side (launch/analysis/faults.py calls these)
    def records(self, events: list[dict], out: list[dict], kill_time) -> list[dict]:
        """This kind's fault records from the launcher's events (``out``: the records so far)."""
        return []

    # ---- psbench chaos and perf
    def chaos_apply(self, drawn_as: str, cfg, spec: str, rng, pause_s: float) -> float | None:
        """Make the drawn fault time ``spec`` (``12.5s``) this kind in ``cfg``; returns a time for
        chaos's own killer (a kill from outside), else None."""
        raise NotImplementedError(f"{self.name} is not drawn by psbench chaos")

    def perf_schedule(self, times: list[float], slow_s: float) -> dict:
        """The RunConfig fields that schedule this kind at ``times`` (psbench perf's failure section):
        its PS option at each time (none for a kind without one: perf sends it itself)."""
        return {o.field: [f"{t}s" for t in times] for o in self.options if o.target == "ps"}


def record(kind: str, planned: bool, t: float, e: dict, evidence: str) -> dict:
    """A fault record of ``summary.json``'s ``faults`` (``_t``: the launcher's clock, dropped later)."""
    return {"_t": t, "kind": kind, "planned": planned, "role": e.get("role"), "pid": e.get("pid"),
            "host": e.get("host"), "evidence": evidence}


def launcher_events(events: list[dict], ev: str) -> list[dict]:
    return [e for e in events if e["ev"] == ev and e["who"] == "launcher"]

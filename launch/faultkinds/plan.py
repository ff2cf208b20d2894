"""A run's faults, parsed once: :class:`FaultPlan` (:func:`plan_of`), which the placement (replacement
slots), the mpirun line (the kill points the ranks stop at), the injector, chaos and the CLI receive.

A point is ``AT`` = a time since training started (``20s``, ``1.5m``), a share of ``--duration``
(``33%``), or a PS step (``step:800``); a replica's may name its place in the chain (``30%@replica1``;
by default the tail); test hooks: ``point:NAME`` and ``+DUR``. A kind with a length takes
``AT~DUR`` (a hang may, a slow phase and a partition must). ``--failures`` adds the points its
process drew when the config was validated (psmodes/failure_process.py).
"""
from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass

from psmodes.config import ConfigError, parse_duration
from psmodes.killpoints import POINTS, REPLICA_POINTS, WORKER_POINTS

from .base import NONE, REQUIRED, Point
from .registry import KINDS, OPTIONS

_STEP = re.compile(r"^step:(\d+)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*%$")
_AT_ROLE = re.compile(r"^(.*)@(replica|worker)(\d+)$")
PARSES = 0  # plans parsed in this process: a run parses its plan once (tests/test_fault_kinds.py)


@dataclass(frozen=True)
class FaultPlan:
    points: tuple[Point, ...]  # in the order they are due: by time, then by PS step; point:NAME and +DUR last

    @property
    def point_names(self) -> list[str]:
        """The test kill points (``point:NAME``) the ranks are told to stop at, in order."""
        return [p.point for p in self.points if p.point]

    def replacements(self) -> int:
        """PS and replica faults that need another process for the role (a kill; a hang, fenced; a node
        loss at least one: the PS), each a replacement's slot; a worker's ends the run."""
        return sum(1 for p in self.points if KINDS[p.kind].needs_replacement and not p.target.startswith("worker"))

    def fresh_points(self) -> list[Point]:
        """The points as new objects: the injector consumes its list."""
        return [Point(**vars(p)) for p in self.points]


@dataclass(frozen=True)
class _Inputs:
    """What a fault plan is parsed from: the run's fault options and what resolves them."""
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (RunConfig field, its specs)
    duration_s: float | None
    workers: int
    n_replicas: int
    failure_schedule: tuple[tuple[tuple[str, object], ...], ...]


def plan_of(cfg) -> FaultPlan:
    """The fault plan of ``cfg`` (checked: ConfigError), parsed once per setting of its fault options:
    the validation, the placement, the mpirun line and the injector of one run share it."""
    return _plan(_Inputs(tuple((o.field, tuple(map(str, getattr(cfg, o.field)))) for o in OPTIONS), cfg.duration_s,
                         cfg.workers, cfg.n_replicas,
                         tuple(tuple(sorted(f.items())) for f in cfg.failure_schedule)))


@functools.lru_cache(maxsize=64)
def _plan(inputs: _Inputs) -> FaultPlan:
    global PARSES
    PARSES += 1
    d = inputs.duration_s
    specs = dict(inputs.options)
    points = []
    for o in OPTIONS:
        kind = next(k for k in KINDS.values() if o in k.options)
        option = f"--{o.field.replace('_', '-')}"
        if o.target == "replica":
            points += _role_points("replica", range(1, inputs.n_replicas + 1), specs[o.field], d, kind.name, option)
        elif o.target == "worker":
            points += _role_points("worker", range(inputs.workers), specs[o.field], d, kind.name, option)
        else:
            points += parse_points(specs[o.field], o.target, d, kind.name)
    points += _failure_points([dict(f) for f in inputs.failure_schedule], inputs.n_replicas)
    points.sort(key=lambda p: (p.at_s if p.at_s is not None else float("inf"), p.at_step or 0))
    return FaultPlan(tuple(points))


def parse_points(specs: list[str], target: str, duration_s: float | None = None, kind: str = "kill") -> list[Point]:
    """Fault points of one option (``kind`` at ``target``); ``duration_s`` resolves ``N%``.

    Test hooks: ``point:NAME`` faults the process that stops at the named point
    (psmodes/killpoints.py; a hang leaves it stopped there); ``+DUR`` (``+10ms``, ``+0``)
    kills the target's live holder DUR after the previous kill, at once if it is up, else
    as soon as it registers (a replacement)."""
    fault = KINDS[kind]
    named = POINTS if target == "ps" else WORKER_POINTS if target.startswith("worker") else REPLICA_POINTS
    option = fault.option_name(target)
    points = []
    for spec in specs:
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            part, for_s = _split_length(part, fault.length, option)
            m = _STEP.match(part)
            if part.startswith("point:"):
                name, _, from_version = part[len("point:"):].partition("@")
                if _ and not from_version.isdigit():
                    raise ConfigError(f"kill point {part!r}: write point:NAME@N with N a PS version (a whole number)")
                if name in (REPLICA_POINTS if target == "ps" else POINTS):
                    who, other = ("a chain replica", "--kill-replica") if target == "ps" else ("the PS", "--kill-ps")
                    raise ConfigError(f"kill point {part!r} is reached by {who}; give it to {other}")
                if name not in named:
                    close = difflib.get_close_matches(name, named, n=1)
                    hint = f" (did you mean point:{close[0]}?)" if close else ""
                    raise ConfigError(f"kill point {part!r}: unknown point for {option}{hint}; choose one of: "
                                      + ", ".join(f"point:{p}" for p in named))
                points.append(Point(target, None, None, part, point=part[len("point:"):]))
            elif part.startswith("+"):
                rest = part[1:].strip()
                after = 0.0 if rest in ("0", "0s", "0ms") else parse_duration(rest, f"kill point {part!r}")
                points.append(Point(target, None, None, part, after_s=after))
            elif m:
                points.append(Point(target, None, int(m.group(1)), part))
            elif part.startswith("step:"):
                raise ConfigError(f"kill point {part!r}: write step:N with N a whole number")
            elif part.endswith("%"):
                pm = _PERCENT.match(part)
                if not pm or not 0 < float(pm.group(1)) < 100:
                    raise ConfigError(f"kill point {part!r}: write a share of the run between 0% and 100%, e.g. 33%")
                if duration_s is None:
                    raise ConfigError(f"kill point {part!r}: a share of the run needs --duration "
                                      "(a --steps run has no fixed length; use step:N)")
                points.append(Point(target, round(duration_s * float(pm.group(1)) / 100, 3), None, part))
            else:
                points.append(Point(target, parse_duration(part, f"kill point {part!r}"), None, part))
            points[-1].kind, points[-1].for_s = kind, for_s
            if for_s is not None:
                points[-1].spec = f"{part}~{for_s:g}s"
    return points


def _split_length(part: str, length: str, option: str) -> tuple[str, float | None]:
    """``30%~2s`` -> ("30%", 2.0): the length of a hang or slow phase; a kill has none."""
    at, tilde, dur = part.partition("~")
    if not tilde:
        if length == REQUIRED:
            raise ConfigError(f"{option} {part!r}: write AT~DUR, e.g. 30%~10s (how long it lasts)")
        return part, None
    if length == NONE:
        raise ConfigError(f"kill point {part!r}: a kill has no length (~DUR is for --hang-ps and --slow-ps)")
    if at.strip().startswith("+"):
        raise ConfigError(f"{option} {part!r}: +DUR points are for kills; write AT~DUR with AT a time, share or step")
    return at.strip(), parse_duration(dur.strip(), f"{option} {part!r}: the length")


def _role_points(kind_of_role: str, indices: range, specs, duration_s, kind: str, option: str) -> list[Point]:
    """``--kill-replica`` / ``--hang-replica`` points: at the tail, or ``AT@replicaN`` at replica N of the
    chain (1 = the head's successor), whoever holds that place when the point is due. ``--kill-worker`` /
    ``--hang-worker``: the last worker, or ``AT@workerN`` (worker0: the leader)."""
    by_target: dict[str, list[str]] = {}
    for spec in specs:
        for part in str(spec).split(","):
            m = _AT_ROLE.match(part.strip())
            if m and (m.group(2) != kind_of_role or int(m.group(3)) not in indices):
                raise ConfigError(f"{option} {part.strip()!r}: the run has {kind_of_role}{indices[0]} to "
                                  f"{kind_of_role}{indices[-1]}")
            at, target = (m.group(1), f"{kind_of_role}{m.group(3)}") if m else (part, f"{kind_of_role}{indices[-1]}")
            by_target.setdefault(target, []).append(at)
    return [p for target, parts in by_target.items() for p in parse_points(parts, target, duration_s, kind)]


def _failure_points(schedule: list[dict], n_replicas: int) -> list[Point]:
    """The ``--failures`` of a run as points at their times: the schedule the config's validation drew
    once and recorded. A replica's is the tail's; a spare's is whichever spare still waits when it is
    due (``spare``), a worker's the last worker alive then but the leader (``worker``). A kind the registry does not let a failure process draw: one line."""
    role = {"replica": f"replica{n_replicas}"}
    points = []
    for f in schedule:
        kind = KINDS.get(f["kind"])
        if kind is None or not kind.failure_process:
            allowed = ", ".join(n for n, k in KINDS.items() if k.failure_process)
            raise ConfigError(f"--failures {f['spec']}: unknown kind {f['kind']!r}; choose one of: {allowed}")
        if f["target"] == "worker" and not any(o.target == "worker" for o in kind.options):
            allowed = ", ".join(n for n, k in KINDS.items() if any(o.target == "worker" for o in k.options))
            raise ConfigError(f"--failures {f['spec']}: a worker cannot fail by {f['kind']}; choose one of: {allowed}")
        points.append(Point(role.get(f["target"], f["target"]), f["t_s"], None, f"{f['t_s']:g}s ({f['spec']})",
                            kind=f["kind"]))
    return points

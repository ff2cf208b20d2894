"""Fault points: the ``--kill-ps``, ``--kill-node``, ``--kill-replica``, ``--kill-worker``, ``--hang-ps``,
``--hang-replica`` and ``--slow-ps`` schedules parsed and checked (:func:`parse_kills`).
A point is ``AT`` = a time since training started (``20s``, ``1.5m``), a share of
``--duration`` (``33%``), or a PS step (``step:800``); a replica's may name its place in the
chain (``30%@replica1``; by default the tail); test hooks: ``point:NAME`` and
``+DUR``. A hang or a slow phase may end: ``AT~DUR`` (a slow phase must). The fault
injector (:mod:`launch.driver.faults`) carries them out; the placement
(:mod:`launch.driver.hosts`) counts the kills to leave slots for replacements.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from psmodes.config import ConfigError, parse_duration
from psmodes.killpoints import POINTS, REPLICA_POINTS


# SIGKILL; SIGSTOP (SIGCONT after for_s); a duty cycle of both for for_s; the host's link down for for_s;
# SIGKILL of every rank on the target's host and of its Open MPI daemon (a node lost)
KINDS = ("kill", "hang", "slow", "partition", "node")


@dataclass
class KillPoint:
    target: str          # "ps" or "replica1", ...
    at_s: float | None   # seconds since train start
    at_step: int | None  # PS version
    spec: str
    point: str | None = None      # point:NAME, a test-only kill point (psmodes/killpoints.py)
    after_s: float | None = None  # +DUR: this long after the previous kill (the target's next live holder)
    kind: str = "kill"            # one of KINDS
    for_s: float | None = None    # ~DUR: how long a hang or a slow phase lasts (a hang: None = until fenced)

    def due(self, elapsed: float | None, step: int | None) -> bool:
        if self.point is not None or self.after_s is not None:
            return False  # reached through the rank's killpoint event / the previous kill
        if self.at_s is not None:
            return elapsed is not None and elapsed >= self.at_s
        return step is not None and step >= self.at_step


_STEP = re.compile(r"^step:(\d+)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*%$")


def parse_kills(specs: list[str], target: str, duration_s: float | None = None,
                kind: str = "kill") -> list[KillPoint]:
    """Fault points of ``--kill-ps``/``--kill-replica`` (``kind``: ``--hang-*``, ``--slow-ps``);
    ``duration_s`` resolves ``N%``.

    Test hooks: ``point:NAME`` kills the process that stops at the named point
    (psmodes/killpoints.py; a hang leaves it stopped there); ``+DUR`` (``+10ms``, ``+0``)
    kills the target's live holder DUR after the previous kill, at once if it is up, else
    as soon as it registers (a replacement)."""
    named, option = (POINTS, "--kill-ps") if target == "ps" else (REPLICA_POINTS, "--kill-replica")
    if kind == "node":
        option = "--kill-node"
    elif kind != "kill":
        option = f"--{kind}-{'ps' if target == 'ps' else 'replica'}"
    points = []
    for spec in specs:
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            part, for_s = _split_length(part, kind, option)
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
                points.append(KillPoint(target, None, None, part, point=part[len("point:"):]))
            elif part.startswith("+"):
                rest = part[1:].strip()
                after = 0.0 if rest in ("0", "0s", "0ms") else parse_duration(rest, f"kill point {part!r}")
                points.append(KillPoint(target, None, None, part, after_s=after))
            elif m:
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
            points[-1].kind, points[-1].for_s = kind, for_s
            if for_s is not None:
                points[-1].spec = f"{part}~{for_s:g}s"
    return points


def _split_length(part: str, kind: str, option: str) -> tuple[str, float | None]:
    """``30%~2s`` -> ("30%", 2.0): the length of a hang or slow phase; a kill has none."""
    at, tilde, length = part.partition("~")
    if not tilde:
        if kind in ("slow", "partition"):
            raise ConfigError(f"{option} {part!r}: write AT~DUR, e.g. 30%~10s (how long it lasts)")
        return part, None
    if kind in ("kill", "node"):
        raise ConfigError(f"kill point {part!r}: a kill has no length (~DUR is for --hang-ps and --slow-ps)")
    if at.strip().startswith("+"):
        raise ConfigError(f"{option} {part!r}: +DUR points are for kills; write AT~DUR with AT a time, share or step")
    return at.strip(), parse_duration(length.strip(), f"{option} {part!r}: the length")


def schedule(cfg) -> list[KillPoint]:
    """Every fault point of a run (checked: ConfigError), in the order they are due: by time,
    then by PS step; ``point:NAME`` and ``+DUR`` points come last, in the order given."""
    d = cfg.duration_s
    points = (parse_kills(cfg.kill_ps, "ps", d) + parse_kills(cfg.kill_node, "ps", d, "node")
              + replica_points(cfg, cfg.kill_replica, "kill")
              + parse_kills(cfg.kill_worker, f"worker{cfg.workers - 1}", d)
              + parse_kills(cfg.hang_ps, "ps", d, "hang") + replica_points(cfg, cfg.hang_replica, "hang")
              + parse_kills(cfg.slow_ps, "ps", d, "slow") + parse_kills(cfg.partition_ps, "ps", d, "partition"))
    points += failure_points(cfg)
    points.sort(key=lambda p: (p.at_s if p.at_s is not None else float("inf"), p.at_step or 0))
    return points


def failure_points(cfg) -> list[KillPoint]:
    """The ``--failures`` of a run as points at their times: the schedule the config's validation drew
    once and recorded (psmodes/failure_process.py). A replica's is the tail's; a spare's is whichever
    spare still waits when it is due (``spare``)."""
    role = {"replica": f"replica{cfg.n_replicas}"}
    return [KillPoint(role.get(f["target"], f["target"]), f["t_s"], None, f"{f['t_s']:g}s ({f['spec']})",
                      kind=f["kind"]) for f in cfg.failure_schedule]


_REPLICA = re.compile(r"^(.*)@replica(\d+)$")


def replica_points(cfg, specs: list[str], kind: str) -> list[KillPoint]:
    """``--kill-replica`` / ``--hang-replica`` points: at the tail, or ``AT@replicaN`` at replica N of the
    chain (1 = the head's successor), whoever holds that place when the point is due."""
    option = f"--{kind}-replica"
    by_target: dict[str, list[str]] = {}
    for spec in specs:
        for part in str(spec).split(","):
            m = _REPLICA.match(part.strip())
            if m and not 1 <= int(m.group(2)) <= cfg.n_replicas:
                raise ConfigError(f"{option} {part.strip()!r}: the chain has replica1 to replica{cfg.n_replicas}")
            at, target = (m.group(1), f"replica{m.group(2)}") if m else (part, f"replica{cfg.n_replicas}")
            by_target.setdefault(target, []).append(at)
    return [p for target, parts in by_target.items() for p in parse_kills(parts, target, cfg.duration_s, kind)]


def replacements(cfg) -> int:
    """PS and replica faults that end a process (kills, and hangs, which are fenced): each needs a replacement
    (a node loss at least one: the PS; what else was placed on its host too)."""
    return sum(1 for p in schedule(cfg) if p.kind in ("kill", "hang", "node") and not p.target.startswith("worker"))

"""Kill points: the ``--kill-ps``, ``--kill-replica`` and ``--kill-worker`` schedules
parsed and checked (:func:`parse_kills`). A kill point is ``AT`` = a time since
training started (``20s``, ``1.5m``), a share of ``--duration`` (``33%``), or a
PS step (``step:800``); test hooks: ``point:NAME`` and ``+DUR``. The fault
injector (:mod:`launch.driver.faults`) carries them out; the placement
(:mod:`launch.driver.hosts`) counts them to leave slots for replacements.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from psmodes.config import ConfigError, parse_duration
from psmodes.killpoints import POINTS, REPLICA_POINTS


@dataclass
class KillPoint:
    target: str          # "ps" or "replica1", ...
    at_s: float | None   # seconds since train start
    at_step: int | None  # PS version
    spec: str
    point: str | None = None      # point:NAME, a test-only kill point (psmodes/killpoints.py)
    after_s: float | None = None  # +DUR: this long after the previous kill (the target's next live holder)

    def due(self, elapsed: float | None, step: int | None) -> bool:
        if self.point is not None or self.after_s is not None:
            return False  # reached through the rank's killpoint event / the previous kill
        if self.at_s is not None:
            return elapsed is not None and elapsed >= self.at_s
        return step is not None and step >= self.at_step


_STEP = re.compile(r"^step:(\d+)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*%$")


def parse_kills(specs: list[str], target: str, duration_s: float | None = None) -> list[KillPoint]:
    """Kill points of ``--kill-ps``/``--kill-replica``; ``duration_s`` resolves ``N%``.

    Test hooks: ``point:NAME`` kills the process that stops at the named point
    (psmodes/killpoints.py); ``+DUR`` (``+10ms``, ``+0``) kills the target's live
    holder DUR after the previous kill, at once if it is up, else as soon as it
    registers (a replacement)."""
    named, option = (POINTS, "--kill-ps") if target == "ps" else (REPLICA_POINTS, "--kill-replica")
    points = []
    for spec in specs:
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
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
    return points

"""Setbacks: what each failure cost the model, read off the evaluated metric around it.

The study's claim is about setbacks (arXiv 2406.05546: checkpointing and chain replication
"suffer setbacks in accuracy due to restarting from old checkpoints"), and a stateless
replacement that replays hundreds of buffered gradients can set the model back further
than any of them (seen in ``make demo``: 0.72 to 0.32). Final accuracy and time to target
hide both, so every failure gets a record:

- ``before``: the last evaluation before the failure (``before_t_s``);
- ``worst``: the worst evaluation after it and before the next failure (``worst_t_s``), and
  ``dip``, how far that is below ``before`` (0 when the metric never got worse; in the
  metric's own units, positive = worse, whatever its direction);
- ``regained_s``: from the failure to the first evaluation at or past ``before`` again (0 with
  no dip; None if the run ended first);
- ``lost_steps`` and ``lost_samples`` (lost steps x the samples of one PS update);
- ``outage_s``: from the failure to the first update of the new PS (the plots shade it);
- ``diverged``: True when the metric went non-finite after the failure (``worst`` and ``dip``
  are then None: a NaN is worse than any number, and never counts as regained);
- ``cause``: what the recovery did that can set the model back: a restore of an older state
  (``lost_steps`` > 0) or a replay of N buffered updates with policy P.
"""
from __future__ import annotations

import math


def setbacks(timeline: list, faults: list[dict], recoveries: list[dict], samples_per_update: int | None,
             replay: str | None = None, higher_is_better: bool = True) -> list[dict]:
    """One record per failure (see the module docstring); ``timeline``: ``[[t_s, step, metric], ...]``."""
    evals = sorted((float(t), float(v)) for t, _step, v in timeline if v is not None)
    below = (lambda a, b: a < b) if higher_is_better else (lambda a, b: a > b)  # noqa: E731

    def worse(a: float, b: float) -> bool:
        """``a`` is worse than ``b``: a non-finite value (a diverged model) is worse than any number,
        and nothing is worse than it (a NaN compares false both ways: it had counted as regained)."""
        if not math.isfinite(a):
            return math.isfinite(b)
        return math.isfinite(b) and below(a, b)

    by_fault = {r.get("fault"): r for r in recoveries}
    out = []
    for i, f in enumerate(faults):
        t = float(f["t_s"])
        t_next = float(faults[i + 1]["t_s"]) if i + 1 < len(faults) else math.inf
        rec = by_fault.get(i) or {}
        lost = rec.get("lost_steps")
        row = {"fault": i, "kind": f.get("kind", "kill") if f.get("planned", True) else "unplanned",
               "t_s": round(t, 3), "before": None, "before_t_s": None, "worst": None, "worst_t_s": None,
               "dip": None, "regained_s": None, "lost_steps": lost,
               "lost_samples": lost * samples_per_update if lost is not None and samples_per_update else None,
               "outage_s": rec.get("recovery_s"), "cause": cause(rec, replay)}
        prior = [e for e in evals if e[0] < t]
        window = [e for e in evals if t <= e[0] < t_next]
        if prior:
            row["before_t_s"], row["before"] = prior[-1]
        if prior and window:
            before = prior[-1][1]
            worst_t, worst = window[0]
            for e in window[1:]:
                if worse(e[1], worst):
                    worst_t, worst = e
            row["worst"], row["worst_t_s"] = (worst if math.isfinite(worst) else None), round(worst_t, 3)
            if not math.isfinite(worst):  # diverged: no dip to measure, never regained by a NaN
                row["diverged"] = True
                back = next((e for e in evals if e[0] > worst_t and not worse(e[1], before)), None)
                row["regained_s"] = round(back[0] - t, 3) if back and math.isfinite(before) else None
                out.append(row)
                continue
            row["dip"] = round(max(0.0, (before - worst) if higher_is_better else (worst - before)), 4)
            if row["dip"] == 0:
                row["regained_s"] = 0.0
            else:
                back = next((e for e in evals if e[0] > worst_t and not worse(e[1], before)), None)
                row["regained_s"] = round(back[0] - t, 3) if back else None
        out.append(row)
    return out


def cause(recovery: dict, replay: str | None) -> str | None:
    """What the recovery did that can set the model back, in words (None: nothing recorded)."""
    if not recovery:
        return None
    parts = []
    if recovery.get("lost_steps"):
        parts.append(f"restart from a state {recovery['lost_steps']} steps old")
    if recovery.get("buffered_updates"):
        parts.append(f"replay of {recovery['buffered_updates']} buffered updates"
                     + (f" (policy {replay})" if replay else ""))
    return "; ".join(parts) or "no step lost, nothing replayed"

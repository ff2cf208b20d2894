"""ETTR and goodput: what share of a run's wall time was productive, and how many samples per second
ended up in the model that survived (``summary.json``: ``ettr``, ``goodput``, ``ettr_parts``).

Definitions (the effective training time ratio of "Revisiting Reliability in Large-Scale Machine
Learning Research Clusters", arXiv 2410.21680, measured on one run):

- the **wall time of training** is ``train_s``: from the PS's first contact to the last step;
- the **outages** are the intervals from each failure to the first update applied after it (to
  the end of training for a death never recovered; a pause ridden out or a slow phase is none:
  the PS went on answering), merged where they overlap. A replay or a catch-up happens inside
  its outage (the replacement answers after it), so the time spent replaying is counted there;
- the **lost compute** is the work whose updates a recovery lost: lost steps x the wall time of
  one update outside the outages;
- the **short group**: while an elastic run goes on with s of its W workers (psmodes/elastic.py,
  the ``regrouped`` events), (1 - s/W) of each second outside the outages is capacity lost;
- **ETTR** = (wall time - outages - lost compute - short group) / wall time, in [0, 1];
- **goodput** = the samples whose updates are in the final model, per wall second of training:
  for each version up to the PS's final one (a restore rewinds it, so lost updates are not in it;
  a stateless replay adds one per buffered gradient), the samples of the update that made it last
  (a short group's updates hold fewer; a replayed one counts as the run's first update did), over
  ``train_s``.

A stateless run trains through its outages, and its buffered updates count in its goodput, not in
its ETTR: ETTR says how much of the time the PS was making progress the workers could build on
at once; goodput says how much of the work survived.
"""
from __future__ import annotations

from ..faultkinds import takes_down


def outage_windows(t0: float, span: float, faults: list[dict], recoveries: list[dict]) -> list[list[float]]:
    """The outages of a run as merged ``[start, end]`` intervals on the events' clock, within
    [t0, t0 + span]: each recovered failure to its first update after it, each death never
    recovered to the end (``faults``: the analysis records with ``_t``)."""
    end = t0 + span
    recovered_at = {r["fault"]: faults[r["fault"]]["_t"] + r["recovery_s"] for r in recoveries}
    lost = [i for i, f in enumerate(faults)
            if i not in recovered_at and (takes_down(f["kind"]) or "_t_fence" in f)]
    windows = [(faults[i]["_t"], min(end, t)) for i, t in recovered_at.items()]
    # a death without a recovery of its own lasts until the next recovery after it: a replacement killed
    # before it took over merges two kills into one outage, recovered after the second (summary.py gives
    # the recovery to that one). Counted to the end of training, two PS failures 0.2 s apart in an MTBF
    # study run (checkpoint, mean 10 s) made its ETTR 0.11 for a run that lost 10 s in all
    windows += [(faults[i]["_t"], min([t for j, t in recovered_at.items() if j > i] + [end])) for i in lost]
    merged: list[list[float]] = []
    for a, b in sorted(w for w in windows if w[1] > w[0]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([max(a, t0), b])
    return merged


def down_seconds(windows: list[list[float]], t0: float, span: float) -> float:
    return sum(max(0.0, min(b, t0 + span) - max(a, t0)) for a, b in windows)


def short_group_seconds(t0: float, span: float, regroups: list[tuple[float, int]], workers: int,
                        windows: list[list[float]]) -> float:
    """The capacity lost while the workers' group was short: from each regroup (``(t, size)``, on the
    events' clock) to the next or the end of training, (1 - size / ``workers``) of the time outside
    the outage ``windows`` (counted whole already)."""
    end, total = t0 + span, 0.0
    marks = sorted(regroups)
    for i, (t, size) in enumerate(marks):
        a, b = max(t, t0), min(marks[i + 1][0] if i + 1 < len(marks) else end, end)
        if b > a:
            inside = sum(max(0.0, min(b, w1) - max(a, w0)) for w0, w1 in windows)
            total += (1 - size / workers) * (b - a - inside)
    return total


def ettr(train_s: float | None, outage_s: float, lost_steps: int, update_s: float | None,
         short_group_s: float = 0.0) -> dict | None:
    """ETTR and its parts (see the module docstring); None without a training time."""
    if not train_s or train_s <= 0:
        return None
    lost_compute = lost_steps * update_s if update_s else 0.0
    productive = max(0.0, train_s - outage_s - lost_compute - short_group_s)
    return {"ettr": round(productive / train_s, 4), "train_s": round(train_s, 3), "outage_s": round(outage_s, 3),
            "lost_compute_s": round(lost_compute, 3), "short_group_s": round(short_group_s, 3),
            "productive_s": round(productive, 3)}


def samples_in_model(applied: list[dict], final_version: int, per_update: int | None) -> int:
    """The samples of the updates that made versions 1 to ``final_version``: each version's last maker
    among the applied ``step`` events (async: ``applied_as``), else ``per_update`` (a replayed update)."""
    made: dict[int, int] = {}
    for e in sorted(applied, key=lambda e: e["t"]):
        made[e.get("applied_as", e["version"])] = e.get("samples") or per_update or 0
    return sum(made.get(v, per_update or 0) for v in range(1, final_version + 1))


def goodput(samples_kept: int, train_s: float | None) -> float | None:
    """Samples whose updates are in the final model, per wall second of training."""
    if not train_s or train_s <= 0 or not samples_kept:
        return None
    return round(samples_kept / train_s, 2)

"""The failures of one run, from its event streams: the faults the launcher injected and
the failures nobody injected, each one record that the run's detections and recoveries
are measured from (``summary.json``: ``faults``).

Kinds: each kind the launcher sends reads its own records from the launcher's events
(launch/faultkinds/: ``kill``, ``node``, ``hang``, with ``ended_s`` when it was continued and
``fenced_s`` when a rank suspected it and the launcher SIGKILLed it, ``slow``, ``partition``); and

- ``unplanned`` (``planned: false``): a failure no injector event explains. Five kinds
  of evidence: a PS replaced while alive that tried to write a checkpoint (``stale_writer``), a fence of a process nobody hung (a hang that happened by itself; its time
  is when the wait that suspected it began), a crash report in ``mpirun.log``, a
  process that died with no word (no ``usage`` event, its last act, and no kill of ours)
  that the survivors saw dead (a ``detect`` naming its role), and a spawned replacement
  that died before it joined (a ``spawn_failed`` naming it: it wrote no event). The time
  of a silent death is the process's last recorded event (for a replacement, when a
  survivor saw it dead): the latest moment it was surely alive, so its detection latency
  is an upper bound.

Every record has ``t_s`` (seconds since training started), ``kind``, ``planned``, ``role``,
``pid``, ``host`` and ``evidence``; the summary adds ``detection`` and ``recovery``.
"""
from __future__ import annotations

from ..faultkinds import KINDS
from ..faultkinds.base import record


def fault_records(events: list[dict], kill_time, to_launcher) -> list[dict]:
    """The run's failures in time order; ``t`` is on the launcher's clock (not in the summary).

    ``kill_time(kill event)``: when a kill happened; ``to_launcher(t, who)``: a rank's
    time on the launcher's clock (see launch/analysis/summary.py, ``Clocks``)."""
    by = lambda kind, who=None: [e for e in events if e["ev"] == kind and (who is None or e["who"] == who)]  # noqa: E731
    out = []
    for kind in KINDS.values():  # the faults the launcher sent: each kind reads its own events
        out += kind.records(events, out, kill_time)
    fences = by("fence")
    for f in fences:  # a fence of a process we hung, slowed or cut off belongs to that fault
        landed = kill_time({**f, "t_kill": f.get("t_fence", f["t"])})  # a remote one: when it was carried out
        mine = [r for r in out if r["kind"] in KINDS and KINDS[r["kind"]].fenceable and (r["pid"], r["host"]) ==
                (f["pid"], f["host"]) and r["_t"] <= landed]
        if mine:  # the latest of them (found by psbench chaos: a hang during a slow phase was fenced, and the
            fault = max(mine, key=lambda r: r["_t"])  # fence went to the slow phase, listed after it)
            # carried out (fenced_s), and sent: the launcher's decision, before the route's round trip
            fault["_t_fence"], fault["_t_fence_sent"] = landed, f.get("t_fence", f["t"])
            continue
        began = to_launcher(f.get("t_suspect", f["t"]), f.get("by") or "launcher") - (f.get("waited_s") or 0)
        rec = record("unplanned", False, began, f, f"suspected by {f.get('by')} ({f.get('what')}) and fenced"
                     + ("; where it stood: the fence event's stacks" if f.get("stacks") else ""))
        rec["_t_fence"] = kill_time({**f, "t_kill": f.get("t_fence", f["t"])})
        out.append(rec)
    ours = {(e["pid"], _short(e["host"])) for e in by("kill", "launcher") + fences}
    ours |= {(o["pid"], _short(e["host"])) for e in by("kill", "launcher") for o in e.get("node", [])}
    crashed = set()
    for c in by("crash", "launcher"):
        crashed.add((c.get("pid"), _short(c.get("host"))))
        out.append(record("unplanned", False, c["t"], c, f"crash report in mpirun.log: {c.get('reason')}"))
    for e in by("stale_writer"):  # a PS declared dead while alive wrote on: it had never died
        out.append(record("unplanned", False, to_launcher(e["t"], e["who"]), e,
                          f"stale writer: {e['who']} (checkpoint generation {e.get('generation')}) wrote after "
                          f"generation {e.get('current')} took over; its write was refused"))
    out += silent_deaths(events, ours | crashed, to_launcher)
    out += deaths_in_spawn(events, ours | crashed, to_launcher)
    out.sort(key=lambda r: r["_t"])
    return out


def silent_deaths(events: list[dict], explained: set, to_launcher) -> list[dict]:
    """Processes that died with no word and no kill of ours, which the survivors saw dead."""
    started, last, role, left = {}, {}, {}, set()
    for e in events:
        who = e["who"]
        if who == "launcher":
            continue
        last[who] = e
        if e["ev"] == "start" and "pid" in e:
            started[who], role[who] = e, e.get("role")
            left.discard(who)
        elif e["ev"] == "role":
            role[who] = e.get("role")
        elif e["ev"] in ("usage", "failed", "done"):
            left.add(who)  # an orderly exit (done), a rank that gave up (failed: a failure of its own)
    out = []
    for who, start in started.items():
        if who in left or (start["pid"], _short(start.get("host"))) in explained:
            continue
        t_last = to_launcher(last[who]["t"], who)
        seen = [e for e in events if e["ev"] == "detect" and role[who] in (e.get("dead") or [])
                and to_launcher(e.get("t_detect", e["t"]), e["who"]) >= t_last]
        if not seen:
            continue  # never seen dead: ended with the job (stopped by the launcher), not a failure in the run
        rec = record("unplanned", False, t_last, {**start, "role": role[who]},
                      f"{who} died without a word (no exit recorded, no kill sent); last event {last[who]['ev']}")
        out.append(rec)
    return out


def deaths_in_spawn(events: list[dict], explained: set, to_launcher) -> list[dict]:
    """Spawned replacements that died before they joined, with no kill of ours and no crash
    report: the survivors' ``spawn_failed`` names them (psmodes.pidfiles.spawned_dead)."""
    out, seen = [], set(explained)
    for e in (e for e in events if e["ev"] == "spawn_failed"):
        for d in e.get("died_before_joining") or []:
            key = (d["pid"], _short(d["host"]))
            if key not in seen:
                seen.add(key)
                out.append(record("unplanned", False, to_launcher(d["t_seen"], e["who"]),
                                   {**d, "role": d["name"].partition("-gen")[0]},
                                   f"{d['name']} died before it joined the survivors (their spawn waited for it)"))
    return out


def _short(host) -> str:
    return str(host or "").split(".")[0]


def fault_list(summary: dict) -> list[dict]:
    """The run's failures; a summary written before faults were recorded has only its kills."""
    if "faults" in summary:
        return summary["faults"]
    return [{"kind": "kill", "planned": True, **k} for k in summary.get("kills") or []]

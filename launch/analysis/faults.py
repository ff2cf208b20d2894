"""The failures of one run, from its event streams: the faults the launcher injected and
the failures nobody injected, each one record that the run's detections and recoveries
are measured from (``summary.json``: ``faults``).

Kinds:

- ``kill``: a scheduled SIGKILL (``--kill-ps`` ...);
- ``hang``: a SIGSTOP (``--hang-ps``); ``ended_s`` when it was continued, ``fenced_s``
  when a rank suspected it and the launcher SIGKILLed it (:mod:`psmodes.suspicion`);
- ``slow``: a slow phase (``--slow-ps``), which the ranks should ride out;
- ``partition``: the PS's host cut off the network for a while (``--partition-ps``);
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


def fault_records(events: list[dict], kill_time, to_launcher) -> list[dict]:
    """The run's failures in time order; ``t`` is on the launcher's clock (not in the summary).

    ``kill_time(kill event)``: when a kill happened; ``to_launcher(t, who)``: a rank's
    time on the launcher's clock (see launch/analysis/summary.py, ``Clocks``)."""
    by = lambda kind, who=None: [e for e in events if e["ev"] == kind and (who is None or e["who"] == who)]  # noqa: E731
    out = []
    for e in by("kill", "launcher"):
        if "node" in e:  # --kill-node: the PS's host lost, every rank there and its daemon at once
            others = ", ".join(o["role"] for o in e["node"])
            out.append(_record("node", True, kill_time(e), e, f"the PS's host lost at {e.get('at')}"
                               + (f" ({others} with it)" if others else "")))
        else:
            out.append(_record("kill", True, kill_time(e), e, f"SIGKILL at {e.get('at')}"))
    fences = by("fence")
    hangs = by("hang", "launcher")
    for e in hangs:
        rec = _record("hang", True, e["t_hang"], e, f"SIGSTOP at {e.get('at')}")
        rec["for_s"] = e.get("for_s")
        cont = next((c for c in by("continued", "launcher") if (c["pid"], c["host"]) == (e["pid"], e["host"])
                     and c["t"] >= e["t"] and c.get("kind") == "hang"), None)
        if cont is not None:
            rec["_t_ended"] = cont["t_continued"]
        out.append(rec)
    for e in by("slow", "launcher"):
        rec = _record("slow", True, e["t_slow"], e, f"slowed x{e.get('factor')} at {e.get('at')}")
        rec["for_s"] = e.get("for_s")
        out.append(rec)
        # a hang of the same process within the slow phase lasts one duty cycle: the phase's next SIGCONT
        # ends it (found by psbench chaos: a hang at 5.4 s inside a slow phase from 4.5 s to 7.4 s)
        for h in out:
            if (h["kind"] == "hang" and (h["pid"], h["host"]) == (e["pid"], e["host"]) and "_t_ended" not in h
                    and e["t_slow"] <= h["_t"] < e["t_slow"] + (e.get("for_s") or 0)):
                cycle = e.get("period_s", 0.2)  # the phase's stop-and-continue period, recorded by the injector
                h["_t_ended"] = h["_t"] + cycle
                h["evidence"] += f"; continued by the slow phase at {e.get('at')} within {cycle} s"
    for e in by("partition", "launcher"):
        rec = _record("partition", True, e["t_partition"], e, f"{e['host']} cut off from {e.get('peer')} "
                      f"at {e.get('at')}")
        rec["for_s"] = e.get("for_s")
        out.append(rec)
    for f in fences:  # a fence of a process we hung, slowed or cut off belongs to that fault
        landed = kill_time({**f, "t_kill": f.get("t_fence", f["t"])})  # a remote one: when it was carried out
        mine = [r for r in out if r["kind"] in ("hang", "slow", "partition") and (r["pid"], r["host"]) ==
                (f["pid"], f["host"]) and r["_t"] <= landed]
        if mine:  # the latest of them (found by psbench chaos: a hang during a slow phase was fenced, and the
            max(mine, key=lambda r: r["_t"])["_t_fence"] = landed  # fence went to the slow phase, listed after it)
            continue
        began = to_launcher(f.get("t_suspect", f["t"]), f.get("by") or "launcher") - (f.get("waited_s") or 0)
        rec = _record("unplanned", False, began, f, f"suspected by {f.get('by')} ({f.get('what')}) and fenced")
        rec["_t_fence"] = kill_time({**f, "t_kill": f.get("t_fence", f["t"])})
        out.append(rec)
    ours = {(e["pid"], _short(e["host"])) for e in by("kill", "launcher") + fences}
    ours |= {(o["pid"], _short(e["host"])) for e in by("kill", "launcher") for o in e.get("node", [])}
    crashed = set()
    for c in by("crash", "launcher"):
        crashed.add((c.get("pid"), _short(c.get("host"))))
        out.append(_record("unplanned", False, c["t"], c, f"crash report in mpirun.log: {c.get('reason')}"))
    for e in by("stale_writer"):  # a PS declared dead while alive wrote on: it had never died
        out.append(_record("unplanned", False, to_launcher(e["t"], e["who"]), e,
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
        rec = _record("unplanned", False, t_last, {**start, "role": role[who]},
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
                out.append(_record("unplanned", False, to_launcher(d["t_seen"], e["who"]),
                                   {**d, "role": d["name"].partition("-gen")[0]},
                                   f"{d['name']} died before it joined the survivors (their spawn waited for it)"))
    return out


def _record(kind: str, planned: bool, t: float, e: dict, evidence: str) -> dict:
    return {"_t": t, "kind": kind, "planned": planned, "role": e.get("role"), "pid": e.get("pid"),
            "host": e.get("host"), "evidence": evidence}


def _short(host) -> str:
    return str(host or "").split(".")[0]


def fault_list(summary: dict) -> list[dict]:
    """The run's failures; a summary written before faults were recorded has only its kills."""
    if "faults" in summary:
        return summary["faults"]
    return [{"kind": "kill", "planned": True, **k} for k in summary.get("kills") or []]

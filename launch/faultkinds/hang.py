"""``hang``: SIGSTOP of the target (``--hang-ps``, ``--hang-replica``, ``--hang-worker``,
``--failures ...:hang``): a hung process, which the ranks that wait for it must suspect and the launcher fences. ``AT~DUR``: SIGCONT
DUR later, a pause that ends (chaos draws it as ``pause``, shorter than ``--suspect-after``). The
signals run as a small script, here or on the target's host, so that their timing does not depend on
the launcher's loop; a hang without an end still stopped when training is over is continued then
(launch/driver/injector.py ``release_hangs``)."""
from __future__ import annotations

from .base import OPTIONAL, FaultKind, Option, launcher_events, record

# $1 pid, $2 seconds (a hang: empty = until fenced): SIGSTOP, and SIGCONT when the hang ends
HANG_SCRIPT = 'date +%s.%N && kill -STOP "$1" && { [ -z "$2" ] || { sleep "$2" && kill -CONT "$1"; }; }'
CONT_SCRIPT = 'kill -CONT "$1"'  # $1 pid: a rank stopped for good, continued once training is over


class Hang(FaultKind):
    def inject(self, injector, info, point):
        return injector.start_script(info, point, HANG_SCRIPT,
                                     [str(int(info["pid"])), f"{point.for_s:g}" if point.for_s else ""])

    def event(self, injector, t, point, common, how):
        return injector.log.emit("hang", t_hang=t, signal="SIGSTOP", for_s=point.for_s, **common, **how)

    def records(self, events, out, kill_time):
        recs = []
        continued, landed = launcher_events(events, "continued"), launcher_events(events, "landed")
        for e in launcher_events(events, "hang"):
            # when the SIGSTOP was carried out, as a remote kill's time is: over ssh it lands a round trip
            # after it was sent (0.6 s seen over two hosts in psbench chaos, chain trial-021 of the ninth run,
            # which counted against the fence's bound)
            land = next((x for x in landed if (x["pid"], x["host"]) == (e["pid"], e["host"]) and x["t"] >= e["t"]
                         and x.get("kind") == "hang"), None)
            t = e["t_hang"] if land is None else kill_time({**e, "t_kill": e["t_hang"], "t_remote": land["t_remote"]})
            rec = record("hang", True, t, e, f"SIGSTOP at {e.get('at')}")
            rec["for_s"] = e.get("for_s")
            cont = next((c for c in continued if (c["pid"], c["host"]) == (e["pid"], e["host"])
                         and c["t"] >= e["t"] and c.get("kind") == "hang"), None)
            if cont is not None:
                rec["_t_ended"] = cont["t_continued"]
            recs.append(rec)
        return recs

    def chaos_apply(self, drawn_as, cfg, spec, rng, pause_s):
        cfg.hang_ps.append(spec if drawn_as == "hang" else f"{spec}~{pause_s:.2f}s")
        return None


KIND = Hang(
    name="hang", summary="SIGSTOP of the target (until fenced; ~DUR: continued DUR later)",
    emits="hang",
    options=(Option("hang_ps", "ps", "hangs", "PS hung"),
             Option("hang_replica", "replica", "replica-hangs", "replica hung"),
             Option("hang_worker", "worker", "worker-hangs", "worker hung")),
    length=OPTIONAL, needs_replacement=True, fenceable=True, failure_process=True, chaos=("hang", "pause"),
    perf_repairs=("spawn",), perf_name="hang (SIGSTOP, fenced)",
    plot_lines={"ps": ((0, (1, 1.5)), "PS hung (SIGSTOP)"), "replica": ((0, (1, 3)), "replica hung")},
    timeline=dict(color="darkorange", linestyle="-.", label="hang"))

"""``slow``: a degraded server (``--slow-ps AT~DUR``): for DUR the PS is stopped and continued on a
duty cycle so that it runs 1/``--slow-factor`` of the time. The ranks should ride it out: a slow
phase is not a death, and a fence during it is recorded as the phase's."""
from __future__ import annotations

from .base import REQUIRED, FaultKind, Option, launcher_events, record

# $1 pid, $2 cycles, $3 stopped and $4 running seconds of each: a PS that runs a share of the time
SLOW_SCRIPT = ('date +%s.%N; i=0; while [ "$i" -lt "$2" ] && kill -STOP "$1" 2>/dev/null; do '
               'sleep "$3"; kill -CONT "$1" || exit 1; sleep "$4"; i=$((i + 1)); done; exit 0')
SLOW_PERIOD_S = 0.2  # one stop-and-continue cycle: far below any --suspect-after


class Slow(FaultKind):
    def inject(self, injector, info, point):
        stop = SLOW_PERIOD_S * (1 - 1 / injector.slow_factor)
        cycles = max(1, round(point.for_s / SLOW_PERIOD_S))
        return injector.start_script(info, point, SLOW_SCRIPT, [str(int(info["pid"])), str(cycles), f"{stop:.3f}",
                                                                f"{SLOW_PERIOD_S - stop:.3f}"])

    def event(self, injector, t, point, common, how):
        return injector.log.emit("slow", t_slow=t, for_s=point.for_s, factor=injector.slow_factor,
                                 period_s=SLOW_PERIOD_S, **common, **how)

    def records(self, events, out, kill_time):
        recs = []
        for e in launcher_events(events, "slow"):
            rec = record("slow", True, e["t_slow"], e, f"slowed x{e.get('factor')} at {e.get('at')}")
            rec["for_s"] = e.get("for_s")
            recs.append(rec)
            # a hang of the same process within the slow phase lasts one duty cycle: the phase's next SIGCONT
            # ends it (found by psbench chaos: a hang at 5.4 s inside a slow phase from 4.5 s to 7.4 s)
            for h in out:
                if (h["kind"] == "hang" and (h["pid"], h["host"]) == (e["pid"], e["host"]) and "_t_ended" not in h
                        and e["t_slow"] <= h["_t"] < e["t_slow"] + (e.get("for_s") or 0)):
                    cycle = e.get("period_s", SLOW_PERIOD_S)  # the phase's period, recorded by the injector
                    h["_t_ended"] = h["_t"] + cycle
                    h["evidence"] += f"; continued by the slow phase at {e.get('at')} within {cycle} s"
        return recs

    def chaos_apply(self, drawn_as, cfg, spec, rng, pause_s):
        cfg.slow_ps.append(f"{spec}~{rng.uniform(1.0, 3.0):.1f}s")
        cfg.slow_factor = rng.choice([2.0, 4.0])
        return None

    def perf_schedule(self, times, slow_s):
        return {"slow_ps": [f"{t}s~{slow_s:g}s" for t in times]}


KIND = Slow(
    name="slow", summary="the target runs 1/--slow-factor of the time for DUR (stopped and continued)",
    emits="slow",
    options=(Option("slow_ps", "ps", "slows", "PS slowed"),),
    length=REQUIRED, fenceable=True, chaos=("slow",), perf_repairs=("spawn",), perf_name="slow phase",
    plot_lines={"ps": ((0, (6, 2, 1, 2, 1, 2)), "PS slowed")},
    timeline=dict(color="goldenrod", linestyle=":", label="slow phase"))

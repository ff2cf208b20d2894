"""``summary.json``: the figures of one run, computed from its event streams.

The contract (later tools and the reports read it): ``benchmark``, ``mode``,
``workers``, ``seed``, ``completed``, ``exit_reason``, ``metric`` (the workload's: ``name``,
``higher_is_better``; benchmarks/metrics.py), ``final_metric`` (on the whole test set),
``metric_timeline`` (``[t_seconds, ps_step, value]``), ``samples_per_s``
(training throughput: the outages taken out, see :func:`training_throughput`; evaluation runs
on its own rank and is excluded; ``samples_per_s_with_outages`` keeps them in),
``steps``, ``ettr`` (the share of the training time that was productive: outages and the compute of
lost updates taken out) with its ``ettr_parts``, ``goodput`` (samples whose updates are in the final
model per second of training; launch/analysis/ettr.py), ``consistency``, ``staleness_hist`` (updates per staleness value; sync
updates have staleness 0), ``staleness_mean``, ``staleness_p99``,
``per_worker_samples_per_s``, ``failure_schedule`` (``--failures`` as drawn: ``t_s``, ``target``, ``kind``,
``spec``), ``kills`` (the scheduled SIGKILLs: ``t_s``, ``pid``, ``host``,
``role``), ``faults`` (every failure the run had, injected or not: ``kind`` kill, hang, slow or
unplanned, ``planned``, ``t_s``, ``role``, ``pid``, ``evidence``, a hang's ``fenced_s`` (carried out) and
``fence_sent_s`` (the launcher's decision) / ``ended_s``; a remote hang's ``t_s`` is when its SIGSTOP was
carried out; launch/analysis/faults.py), ``detections`` (per fault: ``fault``, its index,
``kind``, ``latency_s`` from the fault to the first rank that noticed, ``rank``, ``via``; a hang
is noticed by a rank's suspicion), ``ps_heads`` (each process that applied updates as the PS:
``first_s``, ``last_s``), ``slowest_answer_s`` (the longest a live PS took to answer a worker),
``recoveries`` (``fault``, ``kind``, ``mode``, ``recovery_s``,
``lost_steps``, ``idle_s``, ``buffered_updates``; under async every worker
recovers on its own: recovery_s to the first worker's applied step, the
largest lost_steps, the mean idle_s, the sum of buffered updates), ``setbacks`` (per fault: the
metric ``before`` it, the ``worst`` after it and its ``dip``, ``regained_s``, ``lost_samples``,
``outage_s``, ``cause``; launch/analysis/setbacks.py), ``stale_messages`` (``dropped``, ``by_kind``:
messages of an older world generation the ranks dropped, psmodes/transport.py), ``diverged`` (None, or the first non-finite value a
process saw: ``who``, ``t_s``, ``where``, ``version``, ``preceded_by``, ``text``; such a run is never
``completed`` and its ``final_metric`` is None: psmodes/divergence.py), plus a few
extras: ``usage`` (per process: CPU seconds, wall seconds, their ratio
``cpu_frac``, peak RSS in MiB; ``run_cpu_frac`` and its seconds from the process's start event on,
without its start-up), ``ps_timing`` (the PS's median seconds per
update: receive, apply, after (replicate/checkpoint), send), ``recovery``, ``failures`` (``who``, ``reason``: a rank gave up),
``crashes`` (``who``, ``reason``: a rank died of a signal psbench did not send,
found in mpirun.log, launch/driver/crashes.py), ``restarts`` (``--recovery job-restart``: the launcher's
restarts; a recovery then runs from the kill to the new job's first step and
also has ``restart_s``), ``start_failures`` (Open MPI failed to start the job before any rank
started, for a reason a new start cures; the launcher started it again), ``hosts`` and ``clock_offsets`` (other hosts' clocks
against the launcher's; detection times are moved to the launcher's clock).
Times are seconds since training started (the PS's first contact).
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks import metrics
from benchmarks.registry import WorkloadError, get as get_workload
from psmodes.atomic import write_text_atomic
from psmodes import divergence
from psmodes.config import RunConfig
from psmodes.events import read_run_events

from .ettr import down_seconds, ettr, goodput, outage_windows, samples_in_model, short_group_seconds
from .faults import fault_records
from .setbacks import setbacks

SUMMARY_VERSION = 1


def metric_timeline(summary: dict) -> list:
    """``[[t_s, step, value], ...]`` of a summary (``accuracy_timeline`` in one from before metrics)."""
    return summary.get("metric_timeline", summary.get("accuracy_timeline")) or []


def final_metric(summary: dict):
    return summary.get("final_metric", summary.get("final_accuracy"))


def run_metric(cfg: RunConfig, evals: list[dict]) -> metrics.Metric:
    """The metric the run's workload declares; for a workload that no longer loads, the evaluations' name."""
    try:
        return get_workload(cfg.benchmark).metric
    except WorkloadError:
        named = next((e["metric"] for e in evals if e.get("metric")), "accuracy")
        return metrics.of_summary({"metric": {"name": named}})


def summarize(run_dir: str | Path, exit_reason: str | None = None, wall_s: float | None = None) -> dict:
    run_dir = Path(run_dir)
    cfg = RunConfig.load(run_dir / "config.json")
    events = read_run_events(run_dir)
    by = lambda kind: [e for e in events if e["ev"] == kind]  # noqa: E731
    starts = by("train_start")
    t0 = starts[0]["t0_ms"] / 1000.0 if starts else (events[0]["t"] if events else 0.0)
    rel = lambda t: round(t - t0, 3)  # noqa: E731

    evals = by("eval")
    metric = run_metric(cfg, evals)
    timeline = [[round(e["t_snapshot"] - t0, 3), e["ps_step"], e.get("value", e.get("accuracy"))] for e in evals]
    finals = [e for e in evals if e.get("final")]
    # sync: the leader logs each step for all workers; async: every worker logs its own
    steps = [e for e in events if e["ev"] == "step" and e["who"].startswith("worker")]
    applied = [e for e in steps if e.get("applied")]
    span = (max(e["t"] for e in steps) - t0) if steps else 0.0
    samples_per_s = sum(e.get("samples", 0) for e in steps) / span if span > 0 else None  # outages included
    if cfg.consistency == "sync":
        per_worker = [samples_per_s / cfg.workers if samples_per_s else None] * cfg.workers
    else:
        per_worker = [sum(e.get("samples", 0) for e in steps if e["who"] == f"worker{w}") / span if span > 0
                      else None for w in range(cfg.workers)]
    staleness = [e["staleness"] for e in applied if e.get("staleness") is not None]
    staleness += [s for e in by("replayed") for s in e.get("staleness", [])]

    clock = Clocks(events)
    kills = [{"t_s": rel(e["t_kill"]), "pid": e["pid"], "host": e["host"], "role": e["role"], "at": e["at"],
              "rank": e.get("rank"), "generation": e.get("generation"), "how": e.get("how", "local")}
             for e in by("kill")]
    for k, e in zip(kills, by("kill")):
        if e.get("how", "local") != "local":  # a remote kill: sent at t_s, carried out at t_exec_s
            k["t_exec_s"] = rel(clock.kill_time(e))
    faults = fault_records(events, clock.kill_time, clock.to_launcher)
    fault_times = [f["_t"] for f in faults]
    detections, recoveries = [], []
    # detection times on the detecting rank's host, moved to the launcher's clock; a hang is
    # detected when a rank suspects it (psmodes.suspicion), before ULFM sees the fenced process die
    detects = [{**d, "t_detect": clock.to_launcher(d.get("t_detect", d["t"]), d["who"])} for d in by("detect")]
    detects += [{**d, "t_detect": clock.to_launcher(d["t_suspect"], d["who"]), "via": f"suspect ({d['what']})"}
                for d in by("suspect")]
    recovered = by("recovered")
    used: set[int] = set()
    for i, tk in enumerate(fault_times):
        t_next = fault_times[i + 1] if i + 1 < len(fault_times) else float("inf")
        seen = [d for d in detects if tk <= d["t_detect"] < t_next]
        if seen:
            first = min(seen, key=lambda d: d["t_detect"])
            detections.append({"fault": i, "kind": faults[i]["kind"], "latency_s": round(first["t_detect"] - tk, 3),
                               "rank": first.get("rank"), "who": first["who"], "via": first.get("via")})
        if cfg.recovery == "job-restart":
            rec, det = job_restart_recovery(events, cfg, i, faults[i]["kind"], tk, t_next, bool(seen))
            if det is not None:
                detections.append(det)
            if rec is not None:
                recoveries.append(rec)
            continue
        # each worker's first recovery after this kill (sync: only the leader's)
        mine = {}
        for j, r in enumerate(recovered):
            # a recovery belongs to the last kill before it (a replacement killed before it took
            # over merges two kills into one outage, recovered after the second)
            if j not in used and tk <= r["t"] < t_next and r["who"] not in mine:
                used.add(j)
                mine[r["who"]] = r
        if mine:
            rs = list(mine.values())
            recoveries.append({"fault": i, "kind": faults[i]["kind"], "mode": rs[0]["mode"],
                               "recovery_s": round(min(r["t"] for r in rs) - tk, 3),
                               "lost_steps": max(r["lost_steps"] for r in rs),
                               "idle_s": round(sum(r["idle_s"] for r in rs) / len(rs), 3),
                               "buffered_updates": sum(r["buffered_updates"] for r in rs),
                               "dropped_updates": sum(r.get("dropped_updates", 0) for r in rs),
                               "workers": len(rs)})

    training_samples_per_s = training_throughput(steps, t0, span, faults, recoveries)
    per_update = applied[0].get("samples") if applied else None
    final_version = max(e["version"] for e in applied) if applied else 0
    windows = outage_windows(t0, span, faults, recoveries)
    regroups = [(e["t"], e["size"]) for e in by("regrouped")]  # an elastic group made again without the dead
    productive = ettr(span, down_seconds(windows, t0, span), sum(r["lost_steps"] for r in recoveries),
                      per_update / training_samples_per_s if per_update and training_samples_per_s else None,
                      short_group_seconds(t0, span, regroups, cfg.workers, windows))

    restarts = [e for e in by("restart") if e["who"] == "launcher"]
    # a job that ended for a whole-job restart failed on purpose: only the last job's failures count
    failed = [e for e in by("failed") if not restarts or e["t"] > restarts[-1]["t_restart"]]
    # any worker's: in an elastic async run the leader may have died (psmodes/elastic.py)
    done = [e for e in by("done") if e["who"].startswith("worker") and e.get("completed")]
    # the first non-finite value any process saw (psmodes/divergence.py): never a completed run
    diverged = next(iter(by("diverged")), None)
    completed = bool(done) and bool(finals) and not failed and diverged is None
    crashes = by("crash")  # recorded by the launcher for a rank that died of a signal it did not send
    if diverged is not None and exit_reason is None:
        exit_reason = f"diverged: {divergence.describe(diverged)}"
    elif exit_reason is None:
        exit_reason = "completed" if completed else next((e["reason"] for e in failed + crashes), "incomplete")
    elif completed and exit_reason != "completed":
        exit_reason = f"completed ({exit_reason})"
    checkpoints = by("checkpoint")
    replays = by("replayed")
    handovers = by("handover")
    taken = [replay_taken(r, replays, handovers) for r in replays]
    replay = cfg.replay if "replay" in cfg.recovery_mode.options else None
    public_faults = [public(f, rel) for f in faults]
    return strict_json({
        "summary_version": SUMMARY_VERSION,
        "benchmark": cfg.benchmark,
        "mode": cfg.mode,
        "consistency": cfg.consistency,
        "workers": cfg.workers,
        "seed": cfg.seed,
        "replay": replay,
        "completed": completed,
        "exit_reason": exit_reason,
        "diverged": diverged_record(diverged, rel, final_value(evals, finals)),
        "metric": metric.as_dict(),
        "final_metric": final_value(evals, finals),
        "metric_timeline": timeline,
        "samples_per_s": round(training_samples_per_s, 2) if training_samples_per_s else None,
        "samples_per_s_with_outages": round(samples_per_s, 2) if samples_per_s else None,
        # the share of the training time that was productive, and the samples that survived per second
        # (launch/analysis/ettr.py)
        "ettr": productive["ettr"] if productive else None,
        "ettr_parts": productive,
        "goodput": goodput(samples_in_model(applied, final_version, per_update), span),
        "steps": max(e["version"] for e in applied) if applied else 0,
        "per_worker_samples_per_s": [round(x, 2) if x else None for x in per_worker],
        "staleness_hist": {str(k): v for k, v in sorted(Counter(staleness).items())},
        "staleness_mean": round(float(np.mean(staleness)), 4) if staleness else None,
        "staleness_p99": round(float(np.percentile(staleness, 99)), 2) if staleness else None,
        "staleness_max": max(staleness) if staleness else None,
        "worker_steps": len(steps),
        "train_s": round(steps[-1]["t"] - t0, 3) if steps else None,
        "wall_s": round(wall_s, 3) if wall_s else None,
        "kills": kills,
        "failure_schedule": cfg.failure_schedule,  # --failures, as drawn (psmodes/failure_process.py)
        # elastic workers' regroups (psmodes/elastic.py): who was lost or joined (a replacement, and the seconds
        # since the group fell short), the group now, its batch and learning rate factor, and (sync) the data
        # epoch it cut short
        "regroups": [{"t_s": rel(e["t"]), **{k: e.get(k) for k in ("lost", "joined", "size", "batch", "lr_factor",
                                                                  "seconds", "since_loss_s", "epoch_samples",
                                                                  "epoch_seen", "epoch_skipped")}}
                     for e in by("regrouped")],
        "faults": public_faults,
        "ps_heads": ps_heads(by("update"), rel),
        "kills_not_reached": [e["at"] for e in by("kill_not_reached")],
        "detections": detections,
        "recoveries": recoveries,
        # what each failure cost the model (launch/analysis/setbacks.py); one PS update is one step's samples
        "setbacks": setbacks(timeline, public_faults, recoveries, applied[0].get("samples") if applied else None,
                             replay, metric.higher_is_better),
        "checkpoints": {"count": len(checkpoints),
                        "mean_write_s": round(sum(c["write_s"] for c in checkpoints) / len(checkpoints), 4)
                        if checkpoints else None},
        "buffered_sent": sum(h["buffered"] for h in handovers),
        "buffered_applied": sum(r["applied"] for r, ok in zip(replays, taken) if ok),
        # replayed by a replacement that died before its answer reached the leader: that state died with it
        "buffered_replays_lost": sum(r["applied"] for r, ok in zip(replays, taken) if not ok),
        # messages of an older world generation that a rank dropped (psmodes.transport.Generations)
        "stale_messages": {"dropped": len(by("stale_dropped")),
                           "by_kind": dict(Counter(e.get("kind") for e in by("stale_dropped")))},
        # bug: a rank stopped on an exception psbench did not expect (psmodes/main.py records its traceback)
        "failures": [{"who": e["who"], "reason": e["reason"], **({"bug": True} if e.get("traceback") else {})}
                     for e in failed],
        "crashes": [{"who": e.get("role") or "?", "reason": e["reason"]} for e in crashes],
        "recovery": cfg.recovery,
        "restarts": [{"attempt": e["attempt"], "t_s": rel(e["t_restart"])} for e in restarts],
        # Open MPI failed before any rank started, for a reason that a new start cures (launch/driver/mpirun.py)
        "start_failures": [{"attempt": e["attempt"], "reason": e["reason"]} for e in by("start_failed")],
        "usage": usage(by("usage"), by("spare_waited"), by("ps_timing")),
        # --refill-spares and lost workers' replacements, once training ran again (training waited `seconds`):
        # the roles spawned and those spares took in place
        # (each once, as a worker recorded it: every member does, under the generation it made; not only
        # worker0's, since the leader may have died)
        "refills": [{"t_s": rel(e["t"]), "spawned": e["spawned"], "from_spares": e.get("from_spares", []),
                     "seconds": round(e["seconds"], 3)}
                    for e in _per_generation([r for r in by("respawned") if r.get("refill")
                                              and str(r.get("role", "")).startswith("worker")])],
        # the longest a live PS took to answer a worker: what --suspect-after must stay above
        "slowest_answer_s": max((e["slowest_answer_s"] for e in by("done") if "slowest_answer_s" in e), default=None),
        "ps_timing": next(({k: v for k, v in e.items() if k not in ("t", "ev")} for e in by("ps_timing")), None),
        "hosts": sorted(set(clock.hosts.values())),
        "clock_offsets": clock.offsets,
    })


def final_value(evals: list[dict], finals: list[dict]):
    """The final evaluation's value; None when there was none or it was not a finite number (a
    diverged model: the summary says so under ``diverged``, and no mean is ever taken over a NaN)."""
    if not finals:
        return None
    value = finals[-1].get("value", finals[-1].get("accuracy"))
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def diverged_record(event: dict | None, rel, final) -> dict | None:
    """``diverged`` in summary.json: who saw the first non-finite value, where, at which version
    and after what (psmodes/divergence.py), in words too; None for a run that did not diverge."""
    if event is None:
        return None
    return {"who": event["who"], "t_s": rel(event["t"]), "where": event.get("where"), "version": event.get("version"),
            "preceded_by": event.get("preceded_by") or {}, "policy": event.get("policy"),
            "text": divergence.describe(event), "final_metric_finite": final is not None}


class Clocks:
    """Every process's host (its ``start`` event) and the hosts' clock offsets against the
    launcher's clock (the launcher's ``clock_offsets`` event): times recorded on another
    host are moved to the launcher's clock before kill-to-detection latencies are taken."""

    def __init__(self, events: list[dict]) -> None:
        self.hosts = {e["who"]: e.get("host") for e in events if e["ev"] == "start" and e.get("host")}
        self.offsets = {o["host"]: {k: o.get(k) for k in ("offset_s", "error_s", "route")}
                        for e in events if e["ev"] == "clock_offsets" for o in e["offsets"]
                        if o.get("offset_s") is not None}

    def offset(self, host: str | None) -> float:
        return (self.offsets.get(host) or {}).get("offset_s") or 0.0

    def to_launcher(self, t: float, who: str) -> float:
        return t - self.offset(self.hosts.get(who))

    def kill_time(self, kill: dict) -> float:
        """When the kill happened, on the launcher's clock: a remote kill printed its host's
        clock at the kill (``t_remote``); with that host's offset known, that is more exact
        than the time the kill was sent."""
        if kill.get("t_remote") is not None and kill.get("host") in self.offsets:
            return kill["t_remote"] - self.offset(kill["host"])
        return kill["t_kill"]


def replay_taken(replay: dict, replays: list[dict], handovers: list[dict]) -> bool:
    """Whether a stateless replacement's replay took effect: the leader's ``handover`` event (its
    answer arrived) follows it before the next replay. A replacement killed between replaying and
    its answer (say between the answer's header and its weights) replayed into a state that died
    with it; the leader kept its buffer and the next replacement replayed all of it again."""
    later = [r["t"] for r in replays if r["t"] > replay["t"]]
    until = min(later) if later else float("inf")
    return any(replay["t"] <= h["t"] < until for h in handovers)


def usage(ends: list[dict], waits: list[dict], trained: list[dict]) -> dict:
    """Per process: CPU and wall seconds, their ratio, peak RSS; a spare's wait for a role also
    on its own (``wait_s``, ``wait_cpu_frac``), which a spare that spun would show near 1.0; a PS's
    from its start event to the end of its training (``train_cpu_s``, ``train_wall_s``: without
    the final evaluation of the test set that it runs where there is no evaluator)."""
    out = {e["who"]: {"cpu_s": e["cpu_s"], "wall_s": e["wall_s"], "maxrss_mb": e["maxrss_mb"],
                      "cpu_frac": round(e["cpu_s"] / e["wall_s"], 3) if e["wall_s"] else None} for e in ends}
    for e in ends:  # from the process's start event on, without its start-up (newer runs)
        if e.get("run_wall_s"):
            out[e["who"]].update(run_cpu_s=e["run_cpu_s"], run_wall_s=e["run_wall_s"],
                                 run_cpu_frac=round(e["run_cpu_s"] / e["run_wall_s"], 3))
    for e in trained:
        if e["who"] in out and e.get("train_wall_s"):
            out[e["who"]].update(train_cpu_s=e["train_cpu_s"], train_wall_s=e["train_wall_s"])
    for w in waits:
        if w["who"] in out:
            out[w["who"]].update(wait_s=w["wait_s"],
                                 wait_cpu_frac=round(w["cpu_s"] / w["wait_s"], 3) if w["wait_s"] else None)
    return out


def job_restart_recovery(events: list[dict], cfg: RunConfig, i: int, kind: str, tk: float, t_next: float,
                         detected: bool) -> tuple[dict | None, dict | None]:
    """Failure ``i`` (of ``kind``) of a ``--recovery job-restart`` run: the job ended, the launcher restarted it,
    the new PS resumed from a checkpoint. Recovery and idle time run from the kill to the first
    step the new job applied: the whole job was down meanwhile."""
    window = [e for e in events if tk <= e["t"] < t_next]
    exits = [e for e in window if e["ev"] == "job_exit" and e["who"] == "launcher"]
    restart = next((e for e in window if e["ev"] == "restart" and e["who"] == "launcher"), None)
    det = None
    if not detected and exits:  # no rank noticed (no ULFM: the job was taken down): the launcher did
        det = {"fault": i, "kind": kind, "latency_s": round(exits[0]["t_exit"] - tk, 3), "rank": None, "who": "launcher",
               "via": "job exit"}
    if restart is None:
        return None, det
    after = [e for e in window if e["t"] > restart["t_restart"]]
    resume = next((e for e in after if e["ev"] == "resume" and e["who"].startswith("ps")), None)
    first = next((e for e in after if e["ev"] == "step" and e["who"] == "worker0" and e.get("applied")), None)
    before = [e["version"] for e in events if e["ev"] == "step" and e["who"] == "worker0" and e.get("applied")
              and e["t"] < tk]
    if resume is None or first is None:
        return None, det
    down = round(first["t"] - tk, 3)
    return {"fault": i, "kind": kind, "mode": f"{cfg.mode}/job-restart", "recovery_s": down,
            "lost_steps": max(0, (max(before) if before else 0) - resume["from_version"]),
            "idle_s": down, "buffered_updates": 0, "dropped_updates": 0, "workers": cfg.workers,
            "restart_s": round(restart["t_restart"] - exits[0]["t_exit"], 3) if exits else None,
            "resumed_from": resume["from_version"], "attempt": restart["attempt"]}, det


def training_throughput(steps: list[dict], t0: float, span: float, faults: list[dict],
                        recoveries: list[dict]) -> float | None:
    """Samples per second of training only: the outages (from each failure to the first update
    after it, or to the end of the run when a death was never recovered) are taken out of the time, and the steps
    computed in them (stateless trains through them) out of the samples. With the outages in, a
    sweep's samples/s measured how long its kills took as much as how fast it trained (#18)."""
    if span <= 0:
        return None
    # a pause ridden out or a slow phase is no outage: the PS went on answering (slowly)
    merged = outage_windows(t0, span, faults, recoveries)
    down = down_seconds(merged, t0, span)
    inside = lambda t: any(a <= t < b for a, b in merged)  # noqa: E731
    samples = sum(e.get("samples", 0) for e in steps if not inside(e["t"]))
    return samples / (span - down) if span - down > 0 else None


def ps_heads(updates: list[dict], rel) -> list[dict]:
    """Each process that applied updates as the PS, with the first and last it recorded (every
    10th update): two heads whose spans overlap applied updates at the same time (a split brain)."""
    spans: dict[str, list[float]] = {}
    for e in updates:
        spans.setdefault(e["who"], [e["t"], e["t"]])[1] = e["t"]
    return [{"who": who, "first_s": rel(a), "last_s": rel(b)} for who, (a, b) in sorted(spans.items(),
                                                                                       key=lambda kv: kv[1][0])]


def public(fault: dict, rel) -> dict:
    """A fault record as summary.json has it: times in seconds since training started."""
    out = {k: v for k, v in fault.items() if not k.startswith("_")}
    out["t_s"] = rel(fault["_t"])
    if "_t_fence" in fault:
        out["fenced_s"] = rel(fault["_t_fence"])
    if "_t_fence_sent" in fault:
        out["fence_sent_s"] = rel(fault["_t_fence_sent"])
    if "_t_ended" in fault:
        out["ended_s"] = rel(fault["_t_ended"])
    return out


def write_summary(run_dir: str | Path, summary: dict) -> Path:
    path = Path(run_dir) / "summary.json"
    write_text_atomic(path, json.dumps(strict_json(summary), indent=2) + "\n")
    return path


def strict_json(value):
    """``value`` with every non-finite float as None: summary.json stays JSON that any reader takes
    (a diverged run's timeline had ``NaN`` in it); ``diverged`` says what the None stands for."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _per_generation(events: list[dict]) -> list[dict]:
    """The first of ``events`` of each world generation, in time order."""
    first: dict = {}
    for e in sorted(events, key=lambda e: e["t"]):
        first.setdefault(e.get("generation"), e)
    return list(first.values())

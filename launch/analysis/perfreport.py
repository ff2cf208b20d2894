"""The Markdown report of ``psbench perf`` (``reports/perf/report.md``) and its
two plots, rendered from ``perf.json`` alone (so ``psbench perf --from``
re-renders a finished or cut measurement). Tables are pandas + tabulate.

Every figure is a median over its repetitions (or kills) with its range or
95th percentile; each target of the issue is checked, and a miss is given
with its size and the measured breakdown that explains it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.registry import get as get_workload
from psmodes.atomic import write_text_atomic
from psmodes.config import RunConfig
from psmodes.modes.hybrid import EXTRA_KEPT

from .records import records_json
from ..faultkinds import PERF_KINDS
from .lazy import frame, pyplot

# the issues' targets: (what, variant, over which variant, bound), higher is better; raised by issue #18
# with the pipelined exchange (from 0.90, 0.98, 0.97, 0.97, 0.85, 0.85). The PS overhead is checked twice:
# at the default priority, and with the PS in the idle scheduling class (--ps-priority idle,
# psmodes/priority.py), the setting that takes the PS off the workers' cores; the modes are compared
# with each other at the default, where the strict chain's replication does not wait for an idle core
PS_OVERHEAD = "PS overhead (none / Horovod)"
PS_OVERHEAD_IDLE = "PS overhead, PS in the idle class (none, PS idle-class / Horovod)"
IDLE_VARIANT = "none, PS idle-class"
RATIO_TARGETS = [(PS_OVERHEAD, "none", "reference", 0.95),
                 (PS_OVERHEAD_IDLE, IDLE_VARIANT, "reference", 0.95),
                 ("checkpoint K=100 / none", "checkpoint K=100", "none", 0.98),
                 ("chain K=100 R=1 / none", "chain K=100 R=1", "none", 0.98),
                 ("chain K=100 R=2 / none", "chain K=100 R=2", "none", 0.98),
                 ("chain K=1 R=1 / none", "chain K=1 R=1", "none", 0.95),
                 ("chain K=1 R=2 / none", "chain K=1 R=2", "none", 0.90)]
FLOOR_TARGET = 3.0
DETECTION_P50 = 1.5
HANG_MARGIN = 0.5  # a hung PS is detected within --suspect-after plus this
SLOW_PHASE_S = 3.0  # launch/experiments/perf.py SLOW_S (the analysis layer does not import experiments)
FAILOVER_P50 = 2.0
IDLE_MARGIN = 0.5

MiB = 1 << 20
def batch_of(results: dict) -> int:
    """The throughput runs' batch per worker: their workload's default (perf --benchmark)."""
    return get_workload(results.get("plan", {}).get("benchmark") or "fmnist-cnn").batch_size
# CPU / wall of a rank that mostly waits (a busy-polling one is at about 1.0); issue #18 lowered it from
# 0.9: a waiting rank must leave the workers their cores
SPIN_LIMIT = 0.25
SPARE_RECOVERY_P50 = 0.3  # s, kill to the first update of a spare that took the PS's place (issue: spawned 3.9 s)
SPARE_SPIN_LIMIT = 0.05  # CPU / wall of a spare while it waits
NOISE_AFTER_MS = 0.1  # a variant doing less than this after each update costs nothing measurable per step
SPARE_TARGET_MODES = ("checkpoint", "stateless")  # the modes whose spawned replacement starts cold


def _med(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def _pct(xs, q: float) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.percentile(xs, q)) if xs else None


def _med_ms(xs) -> str:
    """The median of seconds, in milliseconds."""
    m = _med(xs)
    return "n/a" if m is None else f"{m * 1000:.2f}"


def _spread(xs, fmt: str = "{:.3f}") -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(np.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def _table(rows: list[dict]) -> str:
    return frame(rows).to_markdown(index=False, disable_numparse=True) if rows else "_no data_"


# ---- derived figures
def throughput_ratios(results: dict) -> dict[str, list[float]]:
    """The throughput section's ratios (:func:`paired_ratios`)."""
    return paired_ratios(results.get("throughput", []))


def _by_rep(runs: list[dict]) -> dict[int, dict[str, float]]:
    """repetition -> variant -> samples/s, of the runs that completed."""
    by_rep: dict[int, dict[str, float]] = {}
    for r in runs:
        if r.get("samples_per_s") and r.get("completed", True):
            by_rep.setdefault(r["rep"], {})[r["variant"]] = r["samples_per_s"]
    return dict(sorted(by_rep.items()))


def paired_ratios(runs: list[dict]) -> dict[str, list[float]]:
    """Per repetition: each variant's samples/s over none's (paired), and none over the reference."""
    ratios: dict[str, list[float]] = {}
    for row in _by_rep(runs).values():
        none = row.get("none")
        if not none:
            continue
        for variant, sps in row.items():
            if variant == "reference":
                ratios.setdefault("reference", []).append(none / sps)
            elif variant != "none":
                ratios.setdefault(variant, []).append(sps / none)
    return ratios


def paired_ratio(runs: list[dict], variant: str, baseline: str) -> list[float]:
    """Per repetition that ran both: ``variant``'s samples/s over ``baseline``'s."""
    return [row[variant] / row[baseline] for row in _by_rep(runs).values() if row.get(variant) and row.get(baseline)]


STATE_VECTORS = {"sgd": 0, "momentum": 1, "adamw": 2}  # the optimizer's float32 vectors beside the weights


def floor_seconds(numel: int, bandwidth: float, sends_weights: bool = True, optimizer: str = "sgd",
                  receives: bool = True) -> dict[str, float]:
    """Memory-traffic floor of one update (float32): receiving the gradient copies it once (read +
    write), unless (``receives=False``) the PS reads it in place from the leader's mailbox; the step
    reads weights and gradient and writes the weights, and reads and writes each vector of the
    optimizer's state (momentum: one; AdamW: its two moments), so 3, 5 or 7 times the model's bytes;
    sending copies the weights once - when the PS sends them (with plain sync SGD the workers apply
    the update themselves and the PS answers with a 96-byte header)."""
    s = numel * 4
    apply = (3 + 2 * STATE_VECTORS.get(optimizer or "sgd", 0)) * s
    return {"recv": 2 * s / bandwidth if receives else 0.0, "apply": apply / bandwidth, "send": 2 * s / bandwidth if sends_weights else 0.0}


def scaling_rows(results: dict) -> list[dict]:
    bw = results.get("memory_bandwidth_Bps")
    disk = results.get("disk_bandwidth_Bps")
    rows = []
    for r in results.get("scaling", []):
        t = r.get("ps_timing") or {}
        if not bw or not t or t.get("recv_s") is None:
            continue
        receives = t.get("from_mailbox", 0) < t.get("updates", 1)  # psmodes/mailbox.py: no receive at all
        fl = floor_seconds(t["numel"], bw, t.get("sends_weights", True), r.get("optimizer") or "sgd", receives)
        total = t["recv_s"] + t["apply_s"] + t["send_s"]
        floor = sum(fl.values())
        ck = r.get("checkpoint_write_s")
        nbytes = r.get("checkpoint_bytes") or t["numel"] * 4
        # the writer serialises to memory (a copy), writes the file (a copy) and fsyncs it to disk
        ck_floor = 4 * nbytes / bw + (nbytes / disk if disk else 0)
        rows.append({"params": t["numel"], "optimizer": r.get("optimizer") or "sgd", "MiB": t["numel"] * 4 / MiB, "recv": t["recv_s"], "apply": t["apply_s"],
                     "send": t["send_s"], "total": total, "floor": floor, "ratio": total / floor,
                     "ratio_recv": t["recv_s"] / fl["recv"] if fl["recv"] else None, "ratio_apply": t["apply_s"] / fl["apply"],
                     "ratio_send": t["send_s"] / fl["send"] if fl["send"] else None, "ckpt_s": ck, "ckpt_floor": ck_floor,
                     "ckpt_ratio": ck / ck_floor if ck else None, "completed": r.get("completed")})
    return rows


def failure_figures(results: dict) -> dict:
    """The failure runs' figures: ``by_mode`` (the SIGKILL runs with spawned replacements, one per
    mode), ``by_run`` ((mode, kind, repair) -> figures), ``by_kind`` (kind -> every spawn run's figures
    together) and ``spares`` (mode -> the SIGKILL run whose repairs took spares); ``detections``: the
    SIGKILLs' detection latencies. A perf.json from before fault kinds has only SIGKILL runs, one from
    before spares only spawns."""
    out: dict = {"detections": [], "by_mode": {}, "by_run": {}, "by_kind": {}, "spares": {}}
    for f in results.get("failures", []):
        recs = f.get("recoveries") or []
        kind = f.get("kind", "kill")
        repair = f.get("repair", "spawn")
        figures = {"kills": f.get("kills"), "faults": f.get("faults", f.get("kills")), "completed": f.get("completed"),
                   "exit_reason": f.get("exit_reason"), "detections": f.get("detections") or [],
                   "recovery": [r["recovery_s"] for r in recs], "idle": [r["idle_s"] for r in recs],
                   "lost": [r["lost_steps"] for r in recs], "unplanned": f.get("unplanned", 0)}
        figures["spare_wait_cpu"] = [u["wait_cpu_frac"] for who, u in (f.get("usage") or {}).items()
                                     if who.startswith("spare") and u.get("wait_cpu_frac") is not None]
        out["by_run"][(f["mode"], kind, repair)] = figures
        if repair == "spare":
            out["spares"][f["mode"]] = figures
            continue
        total = out["by_kind"].setdefault(kind, {k: [] if isinstance(v, list) else 0 for k, v in figures.items()})
        for k, v in figures.items():  # lists are joined, counts added; flags and reasons are per run
            if isinstance(v, list) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
                total[k] += v
        if kind == "kill":
            out["detections"] += figures["detections"]
            out["by_mode"][f["mode"]] = figures
    return out


def _step_ms(results: dict, samples_per_s: float | None) -> float | None:
    """Milliseconds of one synchronous step at this throughput (every worker one batch)."""
    if not samples_per_s:
        return None
    return batch_of(results) * results.get("plan", {}).get("workers", 2) / samples_per_s * 1000


def step_split(results: dict) -> dict[str, dict]:
    """Median milliseconds of one step, from the leader's step events (psbench) or the reference
    trainer's own timing: compute (forward + backward), sync (allreduce; Horovod: optimizer.step,
    which waits for the allreduces started during backward), PS exchange and the rest."""
    out = {}
    for variant in ("reference", "none"):
        runs = [r.get("leader") or {} for r in results.get("throughput", []) if r["variant"] == variant]
        runs = [r for r in runs if r.get("compute_s") is not None]
        if not runs:
            continue
        med = lambda k: (_med([r.get(k) for r in runs]) or 0.0) * 1000  # noqa: E731
        if variant == "reference":
            ref = [r for r in results["throughput"] if r["variant"] == "reference" and r.get("samples_per_s")]
            step = _step_ms(results, _med([r["samples_per_s"] for r in ref]))
            out[variant] = {"step": step, "compute": med("compute_s"), "sync": med("allreduce_s")}
        else:
            step, sync = med("step_s"), med("allreduce_s")
            compute, exchange = med("compute_s") - sync, med("exchange_s")
            out[variant] = {"step": step, "compute": compute, "sync": sync, "exchange": exchange,
                            "rest": max(0.0, step - compute - sync - exchange)}
            if all(r.get("ctrl_wait_s") is not None and r.get("ctrl_s") is not None for r in runs):
                # a worker's wait for the control header after its allreduce, less the leader's exchange
                # and send in that time: the header's own latency on the step's critical path
                out[variant]["header"] = max(0.0, med("ctrl_wait_s") - med("ctrl_s"))
    return out


# ---- targets
def targets(results: dict) -> list[dict]:
    rows = []
    for what, variant, baseline, bound in RATIO_TARGETS:
        value = _med(paired_ratio(results.get("throughput", []), variant, baseline))
        rows.append(_verdict(what, f">= {bound}", value, bound, higher=True, why=_ratio_why(results, variant, baseline)))
    fails = failure_figures(results)
    det = _med(fails["detections"])
    rows.append(_verdict("detection latency p50 (s)", f"<= {DETECTION_P50}", det, DETECTION_P50, higher=False))
    if "hang" in fails["by_kind"]:
        bound = RunConfig().suspect_after_s + HANG_MARGIN
        rows.append(_verdict("hung PS: detection p50 (s)", f"<= --suspect-after + {HANG_MARGIN} = {bound:g}",
                             _med(fails["by_kind"]["hang"]["detections"]), bound, higher=False,
                             why="SIGSTOP to the first rank's suspicion; then fenced and repaired like a death"))
    chain = fails["by_mode"].get("chain", {})
    rows.append(_verdict("chain failover p50: kill to first step on the new head (s)", f"<= {FAILOVER_P50}",
                         _med(chain.get("recovery", [])), FAILOVER_P50, higher=False))
    st = fails["by_mode"].get("stateless", {})
    st_det = _med(st.get("detections", []))
    bound = st_det + IDLE_MARGIN if st_det is not None else None
    rows.append(_verdict("stateless worker idle p50 (s)", f"<= detection p50 + {IDLE_MARGIN}"
                         + (f" = {bound:.3f}" if bound is not None else ""), _med(st.get("idle", [])), bound, higher=False))
    for mode in SPARE_TARGET_MODES:
        if mode in fails["spares"]:
            rows.append(_verdict(f"{mode} recovery p50 with a spare (s)", f"<= {SPARE_RECOVERY_P50}",
                                 _med(fails["spares"][mode]["recovery"]), SPARE_RECOVERY_P50, higher=False,
                                 why="kill to the first update the spare applied as the PS; spawned: "
                                     f"{_fmt(_med(fails['by_mode'].get(mode, {}).get('recovery', [])))} s"))
    spare_cpu = [x for d in fails["spares"].values() for x in d["spare_wait_cpu"]]
    if spare_cpu:
        rows.append(_verdict("no spinning: highest CPU / wall of a waiting spare", f"< {SPARE_SPIN_LIMIT}",
                             max(spare_cpu), SPARE_SPIN_LIMIT, higher=False,
                             why="while it waited for a role, over every failure run with spares"))
    waiting = [(r["variant"], who, u) for r in results.get("throughput", [])
               for who, u in (r.get("usage") or {}).items()
               if (who.startswith("ps") or who.startswith("replica")) and u.get("wall_s")]
    if waiting:
        variant, who, u = max(waiting, key=lambda w: _working_share(w[2]))
        since = (", from its start event to the end of its training (no start-up, no final evaluation)"
                 if "train_wall_s" in u else ", from its start event on (no start-up)" if "run_wall_s" in u else "")
        rows.append(_verdict("no spinning: highest CPU / wall of a waiting rank (PS, replica)", f"<= {SPIN_LIMIT}",
                             _working_share(u), SPIN_LIMIT, higher=False,
                             why=f"{who} in {variant}{since}; a rank spinning while it waits would be near 1.0"))
    sc = scaling_rows(results)
    if sc:
        big = max(sc, key=lambda r: r["params"])
        why = ((f"receive {big['ratio_recv']:.1f}x, " if big["ratio_recv"] is not None else
                "no receive (the PS reads the gradient in place from the leader's mailbox), ")
               + f"apply {big['ratio_apply']:.1f}x {'their floors' if big['ratio_recv'] is not None else 'its floor'}; "
               + (f"send {big['ratio_send']:.1f}x" if big["ratio_send"] is not None else
                  f"no weights sent (the worker applies the update), the answer took {big['send'] * 1e3:.2f} ms"))
        rows.append(_verdict(f"PS time per update / memory floor at {big['params'] / 1e6:.0f}M parameters",
                             f"<= {FLOOR_TARGET}", big["ratio"], FLOOR_TARGET, higher=False, why=why))
    return rows


def _verdict(what: str, target: str, value, bound, higher: bool, why: str = "") -> dict:
    if value is None or bound is None:
        status = "not measured"
    elif (value >= bound) if higher else (value <= bound):
        status = "met"
    else:
        status = f"MISSED by {abs(value - bound):.3f}" + (f" ({abs(value - bound) / bound:.1%})" if bound else "")
    return {"figure": what, "target": target, "measured": "n/a" if value is None else f"{value:.3f}",
            "status": status, "breakdown": why}


def _ratio_why(results: dict, variant: str, baseline: str) -> str:
    """The measured per-update breakdown behind a throughput ratio: the step time, and what the PS
    spends per update (receive, SGD step, replication/checkpoint, send) on the critical path."""
    runs = [r for r in results.get("throughput", []) if r["variant"] in (variant, "none") and r.get("samples_per_s")]
    if not runs:
        return ""
    step_ms = _step_ms(results, _med([r["samples_per_s"] for r in runs if r["variant"] == "none"]))
    if variant == IDLE_VARIANT:
        idle, normal = _ps_share(results, IDLE_VARIANT), _ps_share(results, "none")
        chain = _med(paired_ratio(results.get("throughput", []), "chain K=1 R=1, PS idle-class", "none"))
        return ((f"the PS took {idle:.3f} of a core while training, run only when a worker leaves a core idle"
                 f" ({normal:.3f} at normal priority); " if idle is not None and normal is not None else "")
                + "not the default: the strict chain's replication would wait for an idle core too"
                + (f" (chain K=1 R=1 with an idle-class PS / none: {chain:.3f})" if chain is not None else ""))
    if baseline == "reference":
        timing = [r.get("ps_timing") or {} for r in runs if r["variant"] == "none"]
        ps_ms = _med([(t.get("recv_s") or 0) + (t.get("apply_s") or 0) + (t.get("send_s") or 0) for t in timing if t])
        text = (f"none's step {step_ms:.1f} ms; the PS round trip (receive + apply + send) {ps_ms * 1000:.1f} ms of it"
                if step_ms and ps_ms is not None else "")
        split = step_split(results)
        if split.get("none") and split.get("reference"):
            n, r = split["none"], split["reference"]
            text = (f"median step: Horovod {r['step']:.1f} ms (forward+backward {r['compute']:.1f}, "
                    f"optimizer.step {r['sync']:.1f}); none {n['step']:.1f} ms (forward+backward {n['compute']:.1f}, "
                    f"allreduce {n['sync']:.1f}, PS exchange {n['exchange']:.1f}, control header + local apply "
                    f"{n['rest']:.1f}); the PS rank also takes CPU from the 2 workers")
        return text
    timing = [r.get("ps_timing") or {} for r in runs if r["variant"] == variant]
    after = _med([t.get("after_s") for t in timing if t])
    if after is None or step_ms is None:
        return ""
    return f"none's step {step_ms:.1f} ms; replication/checkpoint after the SGD step {after * 1000:.2f} ms median per update"


# ---- the report
def write_perf_report(results: dict, out: Path, runs: Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = [p for p in (_plot_ratios(results, out / "throughput.png"), _plot_scaling(results, out / "scaling.png")) if p]
    text = render(results, runs, [p.name for p in plots])
    path = out / "report.md"
    write_text_atomic(path, text)
    write_text_atomic(out / "perf.json", records_json(results))
    return path


def render(results: dict, runs: Path, plots: list[str]) -> str:
    plan = results.get("plan", {})
    m = results.get("machine", {})
    v = m.get("versions", {})
    lines = ["# psbench perf: the price of fault tolerance", "",
             f"Measured {results.get('started', '?')} on {m.get('cores', '?')} cores ({m.get('cpu', '?')}), "
             f"{m.get('memory_gib', '?')} GiB, GPU: {m.get('gpu', '?')}; torch {v.get('torch', '?')}, "
             f"Horovod {v.get('horovod', '?')}, Open MPI {v.get('openmpi', '?')}. "
             f"Command: `{' '.join(['psbench'] + list(results.get('argv', [])[1:]))}`; "
             f"{results.get('wall_s', '?')} s in all; runs in `{runs}`.", "",
             f"{plan.get('benchmark') or 'fmnist-cnn'} (optimizer: {plan.get('optimizer') or 'its own'}), "
             f"{plan.get('workers')} workers, batch {batch_of(results)} per worker, evaluation off in every run "
             "(an evaluator rank would compete with the workers for the cores, and the reference has none). "
             f"Throughput: {plan.get('reps')} repetitions of {plan.get('steps')} updates, every variant once per "
             "repetition, interleaved; a ratio is taken within a repetition and shown as median (min-max).", ""]
    speed = results.get("cpu_speed")
    if speed:
        lines += [f"The machine's speed before the runs: {speed['min']:.0f}-{speed['max']:.0f} GFLOP/s a core (median "
                  f"{speed['median']:.0f}; a single-threaded matmul on each of its {speed['cores']} cores at once, "
                  f"sampled every {speed.get('sample_s', 0.5):g} s for {speed['seconds']:.0f} s). Where min and max are far apart, the cores "
                  "change speed by themselves (shared VMs), and a ratio of two runs carries that noise: the "
                  "repetitions' range shows how much.", ""]
    for note in results.get("notes", []):
        lines += [f"**Note**: {note}", ""]
    if results.get("plan", {}).get("quick"):
        lines += ["**Quick mode**: one repetition, short runs, small models: a smoke test of the "
                  "measurement, not figures to quote.", ""]
    rows = targets(results)
    lines += ["## Targets", "", _table(rows), ""]
    lines += _misses_section(results, rows)
    lines += _throughput_section(results, plots)
    lines += _scale_section(results)
    # a session that measured some sections (--only) leaves the others out, not as empty tables;
    # the targets table says "not measured" (a perf.json without the plan's sections measured all)
    measured = plan.get("sections") or ("failures", "scaling")
    lines += _failure_section(results) if "failures" in measured else []
    lines += _worker_failure_section(results) if results.get("worker_failures") else []
    lines += _scaling_section(results, plots) if "scaling" in measured else []
    lines += _memory_section(results)
    lines += _cpu_section(results)
    return "\n".join(lines) + "\n"


def _misses_section(results: dict, rows: list[dict]) -> list[str]:
    """Why each missed target was missed, from the measured breakdown."""
    missed = [r["figure"] for r in rows if r["status"].startswith("MISSED")]
    if not missed:
        return []
    out = ["### Why the misses", ""]
    split = step_split(results)
    if PS_OVERHEAD in missed and "none" in split and "reference" in split:
        n, r = split["none"], split["reference"]
        out += [f"- **PS overhead**: a median `none` step takes {n['step']:.1f} ms against Horovod's {r['step']:.1f} ms. "
                f"{n['exchange']:.1f} ms of it is the exchange with the PS (the gradient's header, the gradient itself "
                f"read in place from the leader's shared memory on one host (else 4 bytes a weight over MPI), the SGD "
                f"step there, the answer), {n['rest']:.1f} ms the control header to the other workers "
                "and the local application of the update"
                + (f" (the header's own latency: {n['header']:.2f} ms, a worker's wait for it less the leader's "
                   "exchange and send)" if "header" in n else "") + ", and forward+backward itself is "
                f"{n['compute'] - r['compute']:+.1f} ms slower than in the reference"
                + _ps_share_while_training(results) + ". With the pipelined exchange (the default for plain SGD) the exchange is "
                "only the wait for the previous "
                "step's answer that the next step's compute did not hide; `none, blocking` shows the exchange whole."
                + _idle_class_answer(results, rows), ""]
    chain = [m for m in missed if m.startswith("chain K=1 ")]  # not "chain K=100"
    if chain:
        after = {}
        for r in results.get("throughput", []):
            t = r.get("ps_timing") or {}
            if r["variant"].startswith("chain K=1 ") and t.get("after_s") is not None:
                after.setdefault(r["variant"], []).append(t["after_s"])
        parts = ", ".join(f"{v}: {_med(x) * 1e3:.2f} ms" for v, x in sorted(after.items()))
        out += [f"- **chain K=1** ({', '.join(m.split(' /')[0] for m in chain)}): every update waits until the state "
                f"has travelled head -> replica(s) -> tail and the tail's ACK is back ({parts} per update, median). "
                "Each hop is a model-sized copy into another process plus the wake-up of a replica that polls every "
                "millisecond while it waits, and the replicas add processes to the 2 cores. That is the price of "
                "strict chain replication; K=100 pays it once per 100 updates.", ""]
    out += _noise_misses(results, missed)
    return out


def _idle_class_answer(results: dict, rows: list[dict]) -> str:
    """What the PS overhead is with the PS in the idle class, where that was measured."""
    row = next((r for r in rows if r["figure"] == PS_OVERHEAD_IDLE and r["measured"] != "n/a"), None)
    if row is None:
        return ""
    return (f" With the PS in the idle scheduling class (`--ps-priority idle`), where it runs only on a core that the "
            f"workers leave idle, `none` / Horovod is {row['measured']} ({row['status']})"
            + (": the PS's CPU time was the gap." if row["status"] == "met" else
               ": the PS's CPU time is only part of the gap (its cache traffic and the cores' wake-ups are not "
               "scheduled away)."))


def _noise_misses(results: dict, missed: list[str]) -> list[str]:
    """Missed ratios of variants that do nothing measurable per update (K=100: a copy every 100th):
    their repetitions' range reaches the target, so the miss is the machine's noise."""
    ratios, after = throughput_ratios(results), {}
    for r in results.get("throughput", []):
        t = r.get("ps_timing") or {}
        if t.get("after_s") is not None:
            after.setdefault(r["variant"], []).append(t["after_s"])
    out = []
    for figure, variant, baseline, target in RATIO_TARGETS:
        if figure not in missed or baseline != "none" or not ratios.get(variant) or not after.get(variant):
            continue
        cost_ms = _med(after[variant]) * 1e3
        if cost_ms >= NOISE_AFTER_MS or max(ratios[variant]) < target:
            continue
        out += [f"- **{variant}**: its PS spends {cost_ms:.2f} ms after an update (as `none` does), and its ratio "
                f"ranged {min(ratios[variant]):.3f}-{max(ratios[variant]):.3f} over the repetitions, reaching the "
                f"target: the median's miss is the machine's run-to-run noise, not a cost of the mode.", ""]
    return out


def _tail_ratio(run: dict) -> float | None:
    """A run's mean step over its median (perf's _tail): 1 without slow steps."""
    leader = run.get("leader") or {}
    if not leader.get("mean_step_s") or not leader.get("step_s"):
        return None
    return leader["mean_step_s"] / leader["step_s"]


def _throughput_section(results: dict, plots: list[str]) -> list[str]:
    ratios = throughput_ratios(results)
    by_variant: dict[str, list] = {}
    for r in results.get("throughput", []):
        by_variant.setdefault(r["variant"], []).append(r)
    rows = []
    for variant, runs in by_variant.items():
        timing = [r.get("ps_timing") or {} for r in runs]
        rows.append({
            "variant": "Horovod, no PS (reference)" if variant == "reference" else variant,
            "samples/s": _spread([r.get("samples_per_s") for r in runs], "{:.0f}"),
            "ratio": ("none / this: " if variant == "reference" else "") + (_spread(ratios.get(variant, []))
                                                                            if variant != "none" else "1"),
            "mean / median step": _spread([_tail_ratio(r) for r in runs]),
            "PS recv / apply / after / send (ms)": " / ".join(
                _med_ms([t.get(k) for t in timing]) for k in ("recv_s", "apply_s", "after_s", "send_s"))
            if variant != "reference" else "-",
            "completed": f"{sum(1 for r in runs if r.get('completed', True))}/{len(runs)}"})
    out = ["## Throughput without failures", "", _table(rows), "",
           "`after` is what the PS does after the SGD step and before it answers: the chain replication "
           "(with K=1 the wait for the tail's acknowledgement) or the checkpoint's in-memory copy. "
           "`mean / median step` is the tail of slow steps (the leader's steps; Horovod: rank 0's iterations) "
           "that samples/s carries and a median hides; the ratios read samples/s.", ""]
    if "throughput.png" in plots:
        out += ["![throughput ratios](throughput.png)", ""]
    return out


def _scale_section(results: dict) -> list[str]:
    """The PS's overhead as the workers and the model grow: the throughput section's point first, then
    each scale point, every ratio paired within a repetition."""
    points: dict[str, list[dict]] = {}
    for r in results.get("scale", []):
        points.setdefault(r["point"], []).append(r)
    if not points:
        return []
    plan = results.get("plan", {})
    base = f"{plan.get('benchmark') or 'fmnist-cnn'}, {plan.get('workers', 2)} workers (above)"
    variants = list(dict.fromkeys(r["variant"] for rs in points.values() for r in rs
                                  if r["variant"] not in ("reference", "none")))  # as measured, in order
    rows = []
    for point, runs in [(base, results.get("throughput", []))] + list(points.items()):
        ratios = paired_ratios(runs)
        sps = lambda v: _spread([r.get("samples_per_s") for r in runs if r["variant"] == v], "{:.0f}")  # noqa: E731
        none_t = [r.get("ps_timing") or {} for r in runs if r["variant"] == "none"]
        row = {"point": point, "updates": runs[0].get("steps", plan.get("steps")) if runs else "-",
               "Horovod samples/s": sps("reference"), "none samples/s": sps("none"),
               "none / Horovod": _spread(ratios.get("reference", []))}
        for v in variants:
            row[f"{v} / none"] = _spread(ratios.get(v, []))
        row["none's PS recv / apply / send (ms)"] = " / ".join(_med_ms([t.get(k) for t in none_t])
                                                               for k in ("recv_s", "apply_s", "send_s"))
        rows.append(row)
    return ["## Throughput at scale", "",
            "The throughput comparison at more workers and bigger models (the `synthetic` MLP on random data): "
            "each point's variants run interleaved, repetition by repetition, and a ratio is paired within a "
            "repetition (median (min-max)). More workers than cores share them with the PS; a bigger model "
            "moves more bytes through the PS each update (the gradient in; with plain SGD no weights out).", "",
            _table(rows), ""]


REPAIR_NAMES = {"spawn": "spawned", "spare": "spare"}
KIND_NAMES = {name: kind.perf_name for name, kind in PERF_KINDS.items()}


def _failure_row(d: dict) -> dict:
    return {"faults": d["faults"], "detected": len(d["detections"]), "detection p50 / p95 (s)": _pair(d["detections"]),
            "recovery p50 / max (s)": f"{_fmt(_med(d['recovery']))} / {_fmt(max(d['recovery'], default=None))}",
            "worker idle p50 / max (s)": f"{_fmt(_med(d['idle']))} / {_fmt(max(d['idle'], default=None))}",
            "lost steps": ", ".join(str(x) for x in d["lost"]) or "-"}


def _failure_section(results: dict) -> list[str]:
    f = failure_figures(results)
    rows = [{"mode": mode, "fault": KIND_NAMES.get(kind, kind), "replacement": REPAIR_NAMES[repair], **_failure_row(d),
             "completed": d["completed"]} for (mode, kind, repair), d in f["by_run"].items()]
    kinds = [{"fault": KIND_NAMES.get(kind, kind), **_failure_row(d), "lost steps": max(d["lost"], default="-"),
              "unplanned recorded": d["unplanned"]} for kind, d in f["by_kind"].items()]
    return ["## Failure costs", "",
            f"One run per mode and kind of fault, each with the PS faulted {results.get('plan', {}).get('kill_gap_s')} s "
            "apart, `--restart-delay 0` (the replacement is started as soon as the death is known, so recovery is "
            "psbench's own cost), chain with 2 replicas. Kinds: a SIGKILL from the injector; a hang (SIGSTOP, never "
            f"continued: a rank suspects it after `--suspect-after` ({RunConfig().suspect_after_s:g} s), the launcher "
            f"fences it); a slow phase ({SLOW_PHASE_S:g} s at `--slow-factor` {RunConfig().slow_factor:g}: ridden out, "
            "nothing to detect); a SIGKILL sent from outside psbench (an unplanned failure the run finds itself). "
            "Detection: fault to the first rank that noticed (a hang: its suspicion; a kill from outside: from the "
            "PS's last recorded event, an upper bound); recovery: fault to the first applied step after it (chain: on "
            "the promoted head); idle: the workers' seconds without computing. Replacement: a process the "
            "survivors spawn (`MPI_Comm_spawn`: a new Python, torch, the model), or a spare (`--spares`, one per "
            "fault: a rank started with the job, warm, that takes the missing role; chain's spare becomes the new "
            "tail).", "", _table(rows), "",
            "Per kind, every mode together (lost steps: the most in one recovery):", "", _table(kinds), "",
            f"All SIGKILLs together: detection p50 / p95 {_pair(f['detections'])} s over {len(f['detections'])} kills.",
            ""]


def _worker_failure_section(results: dict) -> list[str]:
    """Elastic workers (psmodes/elastic.py): per mode and row of WORKER_ROWS, the seconds from each worker's
    fault to the group training on without it and to its replacement joining, and the run's ETTR."""
    runs = results["worker_failures"]
    rows = [{"mode": r["mode"], "fault": r["kind"] + (" (leader)" if r["leader"] else ""),
             "replacement": REPAIR_NAMES[r["repair"]], "faults": r["faults"],
             "to W-1 p50 / max (s)": f"{_fmt(_med(r['short_s']))} / {_fmt(max(r['short_s'], default=None))}",
             "to replaced p50 / max (s)": f"{_fmt(_med(r['replaced_s']))} / {_fmt(max(r['replaced_s'], default=None))}",
             "replaced": len(r["replaced_s"]), "ETTR": _fmt(r.get("ettr")), "completed": r["completed"]}
            for r in runs]
    kills = [r for r in runs if r["kind"] == "kill"]
    short = [x for r in kills for x in r["short_s"]]
    spare = [x for r in kills if r["repair"] == "spare" for x in r["replaced_s"]]
    return ["## Worker failures", "",
            f"Three workers, sync over psbench's MPI allreduce and the blocking exchange, `--restart-delay 0`; "
            f"{results.get('plan', {}).get('kills')} faults a run (the leader's: 3, each on the worker that leads "
            "then), each replaced by a spare (one per fault) or a spawned process. To W-1: the fault to the group "
            "made again without it (training goes on short); to replaced: the fault to the group made again with "
            "the replacement (its first gradient is in the next average). A hang is fenced after `--suspect-after`.",
            "", _table(rows), "",
            f"SIGKILLs, every mode: to W-1 p50 {_fmt(_med(short))} s (target 0.5 s); replaced by a spare p50 "
            f"{_fmt(_med(spare))} s (target 1.0 s).", ""]


def _pair(xs) -> str:
    return f"{_fmt(_med(xs))} / {_fmt(_pct(xs, 95))}"


def _fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _scaling_section(results: dict, plots: list[str]) -> list[str]:
    bw = results.get("memory_bandwidth_Bps")
    disk = results.get("disk_bandwidth_Bps")
    rows = [{"parameters": f"{r['params'] / 1e6:.1f}M", "optimizer": r["optimizer"], "MiB": f"{r['MiB']:.0f}",
             "recv / apply / send (ms)": f"{r['recv'] * 1e3:.2f} / {r['apply'] * 1e3:.2f} / {r['send'] * 1e3:.2f}",
             "per update (ms)": f"{r['total'] * 1e3:.2f}", "floor (ms)": f"{r['floor'] * 1e3:.2f}",
             "x floor": f"{r['ratio']:.2f}",
             "checkpoint write (s)": _fmt(r["ckpt_s"]), "its floor (s)": _fmt(r["ckpt_floor"]),
             "x floor ": _fmt(r["ckpt_ratio"], 2)} for r in scaling_rows(results)]
    out = ["## PS time per update against the memory-bandwidth floor", "",
           f"Memory bandwidth (single-threaded numpy copy, read + write): "
           f"{bw / 1e9:.2f} GB/s; disk (write + fsync): {disk / 1e9:.2f} GB/s." if bw and disk else "",
           "", "synthetic MLP, 1 worker, checkpoint mode (two checkpoints in the run). Floor of an "
           "update: receiving the gradient moves 2x the model's bytes (read + write; nothing when the PS reads it in "
           "place from the leader's mailbox, psmodes/mailbox.py), the step 3x (read "
           "weights and gradient, write weights) plus 2x per vector of optimizer state (momentum: 5x, AdamW: 7x), sending the weights 2x when they are sent (plain SGD: the "
           "worker applies the update itself and the PS answers with a header); bytes / bandwidth. Checkpoint floor: "
           "serialising and writing move 4x the file's bytes in memory, plus the file / disk bandwidth.", "",
           _table(rows), ""]
    if "scaling.png" in plots:
        out += ["![PS time per update](scaling.png)", ""]
    return out


def _memory_section(results: dict) -> list[str]:
    rows = []
    for group, runs in _group(results.get("throughput", [])).items():
        roles = sorted({k for r in runs for k in (r.get("usage") or {})}, key=_role_order)
        for role in roles:
            rows.append({"variant": group, "process": role,
                         "peak RSS (MiB)": _fmt(_med([(r.get("usage") or {}).get(role, {}).get("maxrss_mb") for r in runs]), 0)})
    mem = []
    for r in results.get("memory", []):
        usage = r.get("usage") or {}
        numel = r.get("numel") or 0
        mem.append({"policy": r["policy"], "buffered updates": r["buffered"], "dropped": r["dropped"],
                    "vectors kept": r["vectors"], "buffer (MiB)": f"{r['vectors'] * numel * 4 / MiB:.1f}",
                    "worker0 (buffers) peak RSS (MiB)": _fmt((usage.get("worker0") or {}).get("maxrss_mb"), 0),
                    "worker1 (no buffer) peak RSS (MiB)": _fmt((usage.get("worker1") or {}).get("maxrss_mb"), 0),
                    "completed": r.get("completed")})
    bound = results.get("plan", {}).get("max_buffered")
    return ["## Memory", "", "Peak RSS per process (median over the repetitions):", "", _table(rows), "",
            *_backup_lines(results),
            f"Stateless buffer by replay policy: one PS kill, the replacement spawned after a delay, so the "
            f"leader (worker0) buffers for several seconds. `paper` and `mean` add every gradient into one "
            f"model-sized vector; `sequential` and `staleness` keep each one, at most `--max-buffered {bound}`, "
            "and count the rest as dropped.", "", _table(mem), ""]


def _backup_lines(results: dict) -> list[str]:
    """What hybrid's upstream backup costs its leader: worker0's peak RSS over none's, against the bound
    of the gradients it keeps (at most 2K + EXTRA_KEPT model-sized vectors, psmodes/modes/hybrid.py)."""
    groups = _group(results.get("throughput", []))
    rss = lambda runs: _med([(r.get("usage") or {}).get("worker0", {}).get("maxrss_mb") for r in runs])  # noqa: E731
    numel = _med([(r.get("ps_timing") or {}).get("numel") for r in groups.get("none", [])])
    base = rss(groups.get("none", []))
    out = []
    for variant, runs in groups.items():
        mine = rss(runs)
        if not variant.startswith("hybrid") or mine is None or base is None or "K=" not in variant:
            continue
        kept = 2 * int(variant.split("K=")[1].split()[0]) + EXTRA_KEPT
        mib = numel * 4 / MiB if numel else None
        bound = f"; its bound, {kept} vectors of {mib:.1f} MiB, is {kept * mib:.0f} MiB" if mib else ""
        out += [f"- **{variant}**: the leader's upstream backup (the gradients sent since the tail's last "
                f"acknowledged version) adds {mine - base:+.0f} MiB to worker0's peak RSS over `none`'s{bound}.", ""]
    return out


def _cpu_section(results: dict) -> list[str]:
    rows = []
    for group, runs in _group(results.get("throughput", []) + [
            {"variant": f"failures: {f['mode']}" + (" with spares" if f.get("repair") == "spare" else ""),
             "usage": f.get("usage")} for f in results.get("failures", [])]).items():
        roles = sorted({k for r in runs for k in (r.get("usage") or {})}, key=_role_order)
        for role in roles:
            us = [(r.get("usage") or {}).get(role) or {} for r in runs]
            rows.append({"variant": group, "process": role, "CPU s": _fmt(_med([u.get("cpu_s") for u in us]), 1),
                         "wall s": _fmt(_med([u.get("wall_s") for u in us]), 1),
                         "CPU / wall": _fmt(_med([u.get("cpu_s") / u["wall_s"] if u.get("wall_s") else None
                                                  for u in us]), 2),
                         "without start-up": _fmt(_med([_working_share(u) if "run_wall_s" in u else None
                                                        for u in us]), 2)})
    return ["## CPU time per rank", "",
            f"{results.get('machine', {}).get('cores', '?')} cores. CPU seconds (all threads) against the "
            "process's wall time, median over the repetitions. A rank that waits on MPI in a busy loop would "
            "show close to 1.0 (a whole core) while it waits; the PS and the replicas wait most of the time. "
            "psbench waits by polling `MPI_Test` with a sleep that backs off to 1 ms (psmodes/transport.py); "
            "the workers compute, so theirs is high by design. `without start-up`: from the process's start "
            "event on (after the interpreter's, torch's and MPI's start, about 3 s of CPU), and a PS's only to the "
            "end of its training (without its final evaluation of the test set, newer runs), the figure the "
            "waiting-rank target reads; runs recorded before it was measured show `n/a`.", "", _table(rows), ""]


def _ps_share(results: dict, variant: str) -> float | None:
    """The median share of a core that the PS of ``variant``'s runs took while training, where recorded."""
    return _med([u["train_cpu_s"] / u["train_wall_s"] for r in results.get("throughput", []) if r.get("variant") == variant
                 for u in [(r.get("usage") or {}).get("ps") or {}] if u.get("train_wall_s")])


def _ps_share_while_training(results: dict) -> str:
    """What the PS of the ``none`` runs took of a core while they trained, where the runs recorded it:
    the first suspect of a slower forward+backward with a third process on the workers' cores."""
    share = _ps_share(results, "none")
    if share is None:
        return (" (with the PS there are 3 processes for 2 cores; these runs did not record the PS's share of a "
                "core while training, which its wake-ups and SGD steps take from the workers)")
    idle = [t["idle_class"] for r in results.get("throughput", []) if r.get("variant") == "none"
            for t in [r.get("ps_timing") or {}] if "idle_class" in t]
    where = (" in the idle scheduling class (`--ps-priority idle`, psmodes/priority.py)" if idle and all(idle) else "")
    return (f" (with the PS there are 3 processes for 2 cores; the PS took {share:.3f} of a core while "
            f"training{where}, median over the repetitions: what its wake-ups and SGD steps can take from the "
            "workers)")


def _working_share(u: dict) -> float:
    """A process's CPU / wall where the run recorded them (launch/analysis/summary.py, ``usage``): a PS's
    from its start event to the end of its training, another's from its start event on, else over its
    life; from the seconds, not the rounded ``run_cpu_frac``."""
    if u.get("train_wall_s"):
        return u["train_cpu_s"] / u["train_wall_s"]
    return u["run_cpu_s"] / u["run_wall_s"] if "run_wall_s" in u else u["cpu_s"] / u["wall_s"]


def _group(runs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in runs:
        out.setdefault(r["variant"], []).append(r)
    return out


def _role_order(name: str) -> tuple:
    order = {"ps": 0, "replica": 1, "worker": 2, "evaluator": 3}
    kind = next((k for k in order if name.startswith(k)), "z")
    return order.get(kind, 9), name


# ---- plots
def _plot_ratios(results: dict, path: Path) -> Path | None:
    ratios = throughput_ratios(results)
    if not ratios:
        return None
    plt = pyplot()

    names = list(ratios)
    med = [np.median(ratios[n]) for n in names]
    lo = [m - min(ratios[n]) for m, n in zip(med, names)]
    hi = [max(ratios[n]) - m for m, n in zip(med, names)]
    labels = ["none / Horovod" if n == "reference" else n for n in names]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(labels, med, yerr=[lo, hi], capsize=4, color="#4c72b0")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("samples/s ratio (median, min-max)")
    ax.set_title("Throughput without failures, against --mode none")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_scaling(results: dict, path: Path) -> Path | None:
    rows = scaling_rows(results)
    if not rows:
        return None
    plt = pyplot()

    x = [r["params"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(x, [r["total"] * 1e3 for r in rows], "o-", label="PS time per update (recv + apply + send)")
    ax.loglog(x, [r["floor"] * 1e3 for r in rows], "k--", label="memory-bandwidth floor")
    ax.loglog(x, [FLOOR_TARGET * r["floor"] * 1e3 for r in rows], ":", color="grey", label=f"{FLOOR_TARGET:g}x floor")
    ax.set_xlabel("model parameters")
    ax.set_ylabel("ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

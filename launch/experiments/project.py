"""``psbench project``: each recovery mode's ETTR, effective throughput and time to train on a cluster
of thousands of GPUs, from what ``psbench perf`` measured here.

    psbench project --from reports/perf --gpus 1024,16384,131072 --out reports/projection

What is taken from the measurement (``perf.json``), per mode: the steady overhead (throughput against
``--mode none``, paired), the outage of a PS SIGKILL with a spawned replacement and with a hot spare
(failure to the first update after it, median over the kills), and from the scaling section the
checkpoint's synchronous copy and its write against the state's bytes (a straight-line fit, residuals
reported). What the target adds: its size, its failure rate (default the published one, about 30,000
GPU-hours per failure: arXiv 2410.21680), the model's state bytes and step time, the checkpoint
store's and the network's bandwidths. How a measured cost moves to the target:

- a checkpoint restore reads the state from the store: the measured outage, less the measured
  restore of this machine's small state, plus state bytes / store bandwidth; each checkpoint
  pauses training for the copy (the write goes on in the background), bytes / the fitted copy rate;
- a chain or hybrid replica holds the state already: the measured outage stands; replicating the
  state every K updates costs state bytes / network bandwidth per K steps, not hidden behind compute
  (the measured overhead is the floor);
- a stateless replacement takes the weights from the workers (state bytes / network bandwidth on top
  of the measured outage) and replays what was buffered meanwhile, one update per step of the
  outage at the PS's measured apply rate per byte.

The projection is :mod:`launch.analysis.projection`'s simulation (seeded, 1,000 failures or more per
point); its assumptions are printed in the report. A failure of any node is treated as a failure the
mode recovers from as it recovers from a PS death (the workers' own recovery is elastic workers', not
measured yet: the report says so).
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from psmodes.atomic import write_text_atomic
from psmodes.config import ConfigError, parse_duration
from psmodes.failure_process import parse_all

from ..analysis.collect import collect
from ..analysis.lazy import frame, pyplot
from ..analysis.projection import PUBLISHED_GPU_MTTF_H, Recovery, Target, project, replay_arrivals, young_daly_s
from .kept import runs_at

# the measured variants projected: perf's throughput variant, its mode, and K (updates per replication
# or checkpoint)
VARIANTS = {"checkpoint K=100": ("checkpoint", 100), "chain K=1 R=1": ("chain", 1), "chain K=100 R=1": ("chain", 100),
            "stateless": ("stateless", None), "hybrid K=100 R=1": ("hybrid", 100)}


@dataclass(frozen=True)
class Workload:
    """The model at the target."""
    state_bytes: float   # what a checkpoint or a replica holds: weights and optimizer state
    step_s: float        # one synchronous step, failure-free
    store_Bps: float     # checkpoint store bandwidth, the job's share
    net_Bps: float       # network bandwidth of a PS (replication, weights to a new PS)
    shards: int = 1      # PS shards: each holds, copies, replicates and restores its part, in parallel
    copy_Bps: float | None = None  # a checkpoint's synchronous copy (None: the rate measured here)

    @property
    def shard_bytes(self) -> float:
        return self.state_bytes / self.shards


@dataclass(frozen=True)
class Measured:
    """What one ``psbench perf`` measured that the projection needs."""
    overhead: dict        # variant -> steady share of step time against none (median over repetitions)
    outage: dict          # (mode, "spawn" | "spare") -> median outage of a PS SIGKILL, seconds
    copy_fit: tuple       # checkpoint copy seconds = a + b x bytes (a, b, max relative residual)
    write_fit: tuple      # checkpoint write seconds, the same
    apply_s_per_byte: float
    measured_bytes: float  # the state bytes of the failure runs' workload
    step_s: float          # none's median step here, failure-free
    source: str


def measured_from(folder: Path) -> Measured:
    """The figures of a perf measurement (``perf.json``); ConfigError (one line) when they are missing."""
    path = folder / "perf.json" if folder.is_dir() else folder
    try:
        perf = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--from {folder}: no perf.json (run psbench perf, or give its folder)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--from {folder}: cannot read perf.json: {exc}") from None
    by_rep: dict = {}
    for r in perf.get("throughput") or []:
        by_rep.setdefault(r["rep"], {})[r["variant"]] = r["samples_per_s"]
    overhead = {}
    for variant in VARIANTS:
        ratios = [reps[variant] / reps["none"] for reps in by_rep.values() if variant in reps and reps.get("none")]
        if ratios:
            overhead[variant] = max(0.0, 1.0 - float(np.median(ratios)))
    outage = {}
    for f in perf.get("failures") or []:
        recs = [r["recovery_s"] for r in f.get("recoveries") or [] if r.get("recovery_s") is not None]
        if f.get("kind") == "kill" and recs:
            outage[(f["mode"], f["repair"])] = float(np.median(recs))
    scaling = [s for s in perf.get("scaling") or [] if s.get("checkpoint_bytes")]
    missing = [what for what, ok in (("throughput", overhead), ("failures (kill)", outage), ("scaling", scaling))
               if not ok]
    if missing:
        raise ConfigError(f"--from {folder}: perf.json has no {', '.join(missing)} section; run psbench perf "
                          "with --only throughput,failures,scaling")
    x = np.array([s["checkpoint_bytes"] for s in scaling], dtype=float)
    numel = next((s["ps_timing"]["numel"] for s in scaling if s.get("ps_timing")), None)
    apply = [s["ps_timing"]["apply_s"] / (s["ps_timing"]["numel"] * 4) for s in scaling if s.get("ps_timing")]
    failure_numel = next((r["ps_timing"]["numel"] for r in perf.get("throughput") or [] if r.get("ps_timing")), numel)
    steps = [r["leader"]["step_s"] for r in perf.get("throughput") or [] if r["variant"] == "none" and r.get("leader")]
    return Measured(overhead=overhead, outage=outage, copy_fit=_fit(x, [s["checkpoint_copy_s"] for s in scaling]),
                    write_fit=_fit(x, [s["checkpoint_write_s"] for s in scaling]),
                    apply_s_per_byte=float(np.median(apply)) if apply else 0.0,
                    measured_bytes=4.0 * float(failure_numel or 0),
                    step_s=float(np.median(steps)) if steps else 0.0, source=str(path))


def _fit(x: np.ndarray, y) -> tuple[float, float, float]:
    """seconds = a + b x bytes, least squares; and the largest residual relative to its point."""
    y = np.array(y, dtype=float)
    if len(x) >= 2:
        b, a = np.polyfit(x, y, 1)
    else:
        a, b = 0.0, float(y[0] / x[0])
    a, b = max(0.0, float(a)), max(0.0, float(b))
    resid = float(np.max(np.abs((a + b * x) - y) / y)) if len(x) else 0.0
    return a, b, resid


def recoveries(m: Measured, w: Workload, target_mtbf_s: float) -> list[Recovery]:
    """Each measured variant as a Recovery at the target (the module docstring's rules), and checkpoint
    at Young/Daly's interval beside the measured K."""
    out = []
    restore_here = m.write_fit[0] + m.write_fit[1] * m.measured_bytes
    # each PS shard copies its own part; a failure takes one shard, which restores or fetches its part
    copy_there = w.shard_bytes / w.copy_Bps if w.copy_Bps else m.copy_fit[0] + m.copy_fit[1] * w.shard_bytes
    for variant, (mode, k) in VARIANTS.items():
        if variant not in m.overhead or (mode, "spawn") not in m.outage:
            continue
        spawn, spare = m.outage[(mode, "spawn")], m.outage.get((mode, "spare"))
        base = m.overhead[variant]
        if mode == "checkpoint":
            load = w.shard_bytes / w.store_Bps - restore_here
            for label, interval in ((variant, k * w.step_s),
                                    ("checkpoint at Young/Daly", young_daly_s(copy_there, target_mtbf_s))):
                out.append(Recovery(label, outage_s=spawn + load,
                                    spare_outage_s=None if spare is None else spare + load, refill_s=spawn + load,
                                    rollback=True, interval_s=interval, overhead=min(1.0, copy_there / interval),
                                    notes=(f"every {interval:.0f} s", f"restore {w.shard_bytes / w.store_Bps:.0f} s from the store",
                                           f"each checkpoint pauses {copy_there:.1f} s (the copy)")))
        elif mode in ("chain", "hybrid"):
            repl = w.shard_bytes / w.net_Bps
            overhead = max(base, repl / (k * w.step_s))
            out.append(Recovery(variant, outage_s=spawn, spare_outage_s=spare, refill_s=spawn,
                                lost_s=(k - 1) / 2 * w.step_s if mode == "chain" and k > 1 else 0.0,
                                overhead=min(1.0, overhead),
                                notes=(f"a replication takes {repl:.1f} s every {k} step(s)",)
                                + (("replication cannot keep up with training",) if overhead >= 1 else ())))
        elif mode == "stateless":
            fetch = w.shard_bytes / w.net_Bps
            apply = m.apply_s_per_byte * w.shard_bytes
            outage_spawn = spawn + fetch
            out.append(Recovery(variant, outage_s=outage_spawn,
                                spare_outage_s=None if spare is None else spare + fetch, refill_s=outage_spawn,
                                replay_s=outage_spawn / w.step_s * apply, overhead=base,
                                notes=(f"weights from the workers {fetch:.1f} s", f"replay {apply:.2f} s per "
                                       "buffered update")))
    return out


def here(m: Measured, config: dict) -> Recovery | None:
    """The Recovery of one measured configuration on this machine, from the perf measurement alone
    (the outage measured includes a replay; the state is this machine's): None for a mode it lacks."""
    mode = config.get("mode")
    if (mode, "spawn") not in m.outage:
        return None
    spawn, spare = m.outage[(mode, "spawn")], m.outage.get((mode, "spare"))
    k = config.get("checkpoint_every") if mode == "checkpoint" else config.get("replicate_every")
    # a spare that took the PS comes back only with --refill-spares (before, the validation assumed it always
    # did and overestimated the MTBF study's runs with a spare by 0.06-0.13: their later failures were spawns)
    refill = spawn if config.get("refill_spares") else math.inf
    return Recovery(mode, outage_s=spawn, spare_outage_s=spare, refill_s=refill,
                    rollback=mode == "checkpoint", interval_s=(k or 100) * m.step_s if mode == "checkpoint" else None,
                    lost_s=(k - 1) / 2 * m.step_s if mode == "chain" and k and k > 1 else 0.0)


def validate(m: Measured, aggs: list, seed: int = 0) -> list[dict]:
    """Each configuration of measured runs with --failures at the PS (the MTBF study): its ETTR as
    measured (mean and 95 % interval over its seeds) beside the simulation's for the same failure
    process over a run of the same length, fed with this machine's perf measurement; and beside the
    model's ETTR for the runs' own failure times (``same_arrivals``: the mean over its runs, the draw's
    noise left out, so what remains is the model's). A failure drawn during an outage lands at its end,
    as the injector's kill of the PS does (launch/analysis/projection.py, ``defer``)."""
    rows = []
    for agg in aggs:
        processes = parse_all(agg.config.get("failures") or [])
        est = agg.estimates.get("ettr")
        rec = here(m, agg.config)
        if len(processes) != 1 or processes[0].target != "ps" or rec is None or est is None or est.mean is None:
            continue
        p = processes[0]
        mtbf = p.mean_s
        target = Target(gpus=1, gpus_per_node=1, gpu_mttf_h=mtbf / 3600.0, shape=p.shape,
                        spares=int(agg.config.get("spares") or 0))
        pred = project(rec, target, seed=seed, horizon_s=float(agg.config.get("duration_s") or 0) or None,
                       defer=True)
        diff = pred.ettr - est.mean
        same = [(replay_arrivals(rec, landed_failures(r.summary), r.summary["ettr_parts"]["train_s"],
                                 target.spares), r.summary["ettr"]) for r in agg.completed
                if r.summary.get("ettr") is not None and (r.summary.get("ettr_parts") or {}).get("train_s")]
        rows.append({"configuration": agg.label, "mode": rec.mode, "mtbf_s": round(mtbf, 1),
                     "spares": target.spares, "measured": round(est.mean, 4),
                     "measured_ci": None if est.half_width is None else round(est.half_width, 4), "n": est.n,
                     "predicted": round(pred.ettr, 4), "predicted_ci": round(pred.ettr_ci, 4),
                     "difference": round(diff, 4), "within_0.03": abs(diff) <= 0.03,
                     "same_arrivals": round(float(np.mean([p for p, _ in same])), 4) if same else None,
                     "same_difference": round(float(np.mean([p - e for p, e in same])), 4) if same else None})
    return rows


def ended_early(aggs: list) -> list[dict]:
    """The configurations (``aggs``, from collect) with runs that did not complete (the MTBF study: a chain
    whose head and every replica died), which the validation cannot compare: the model has no such end."""
    out = []
    for agg in aggs:
        failed = [r for r in agg.runs if r.status in ("failed", "diverged")]
        if failed and parse_all(agg.config.get("failures") or []):
            out.append({"configuration": agg.label, "runs": len([r for r in agg.runs if r.status != "incomplete"]),
                        "ended_early": len(failed), "reason": failed[0].summary.get("exit_reason")})
    return out


def landed_failures(summary: dict) -> list[float]:
    """When a run's injected failures landed (seconds since training started; a kill of the PS drawn
    during an outage lands once a replacement holds the role)."""
    return [f["t_s"] for f in summary.get("faults") or [] if f.get("planned", True) and f.get("t_s") is not None]


def cmd_project(a: argparse.Namespace) -> int:
    m = measured_from(Path(a.from_))
    sizes = _positive_ints(a.gpus, "--gpus")
    spares = sorted(set(_non_negative_ints(a.spares, "--spares")))
    for name in ("gpus_per_node", "params", "bytes_per_param", "store_gbps", "net_gbps", "gpu_mttf_h", "shape",
                 "work_days"):
        if not getattr(a, name) > 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    step = parse_duration(a.step, "--step")
    if a.ps_shards < 1 or (a.copy_gbps is not None and not a.copy_gbps > 0):
        raise ConfigError("--ps-shards must be at least 1 and --copy-gbps positive")
    w = Workload(state_bytes=a.params * a.bytes_per_param, step_s=step, store_Bps=a.store_gbps * 1e9 / 8,
                 net_Bps=a.net_gbps * 1e9 / 8, shards=a.ps_shards,
                 copy_Bps=a.copy_gbps * 1e9 / 8 if a.copy_gbps else None)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for gpus in sizes:
        for n_spares in spares:
            target = Target(gpus=gpus, gpus_per_node=a.gpus_per_node, gpu_mttf_h=a.gpu_mttf_h, shape=a.shape,
                            spares=n_spares)
            for rec in recoveries(m, w, target.mtbf_s):
                p = project(rec, target, seed=a.seed)
                rows.append({"gpus": gpus, "spares": n_spares, "mode": rec.mode, "mtbf_s": round(p.mtbf_s, 1),
                             "ettr": round(p.ettr, 4), "ettr_ci": round(p.ettr_ci, 4),
                             "overhead": round(rec.overhead, 4), "effective": round(p.effective, 4),
                             "train_days": round(a.work_days / p.effective, 1) if p.effective > 0 else None,
                             "failures_simulated": p.failures, "notes": "; ".join(rec.notes)})
    checked = early = None
    if a.validate:
        with runs_at(a.validate) as runs:  # a folder of runs, or a sweep's kept archive (reports/mtbf)
            aggs = collect(runs)[1]  # the measured runs' configurations, read once
            checked, early = validate(m, aggs, seed=a.seed), ended_early(aggs)
    if a.validate and not checked:
        raise ConfigError(f"--validate {a.validate}: no runs with --failures at the PS of a mode the "
                          "measurement has (run benchmarks/sweeps/mtbf.toml)")
    result = {"measured": {**m.__dict__, "outage": {f"{k[0]}/{k[1]}": v for k, v in m.outage.items()}},
              "workload": w.__dict__, "target": {"gpus_per_node": a.gpus_per_node, "gpu_mttf_h": a.gpu_mttf_h,
                                                 "shape": a.shape}, "seed": a.seed, "work_days": a.work_days,
              "rows": rows, "validation": checked, "validated_from": a.validate,
              "ended_early": early}
    write_text_atomic(out / "projection.json", json.dumps(result, indent=2, default=str) + "\n")
    write_text_atomic(out / "report.md", render(result))
    _plot(rows, out / "ettr.png")
    print(f"report: {out / 'report.md'}")
    return 0


def render(result: dict) -> str:
    m, w, rows = result["measured"], result["workload"], result["rows"]
    best = {}
    for r in rows:
        key = (r["gpus"], r["spares"])
        if r["effective"] is not None and (key not in best or r["effective"] > best[key]["effective"]):
            best[key] = r
    lines = ["# At your scale: ETTR and time to train per recovery mode", "",
             f"Projected from `{m['source']}` by a seeded simulation (seed {result['seed']}; 20 simulated runs per "
             "point, 1,000 failures or more; ± is the 95 % interval of the mean over the runs). "
             f"Target: {result['target']['gpus_per_node']} GPUs per node, {result['target']['gpu_mttf_h']:,.0f} "
             f"GPU-hours per failure (Weibull shape {result['target']['shape']:g}), state "
             f"{w['state_bytes'] / 1e9:,.1f} GB in {w['shards']} PS shard(s), step {w['step_s']:g} s, checkpoint store "
             f"{w['store_Bps'] * 8 / 1e9:g} Gb/s, network {w['net_Bps'] * 8 / 1e9:g} Gb/s. Time to train: "
             f"{result['work_days']:g} days of failure-free training divided by the effective share.", "",
             "## Findings", ""]
    for (gpus, spares), r in sorted(best.items()):
        lines.append(f"- {gpus:,} GPUs, {spares} spare(s) (a failure every {r['mtbf_s'] / 60:.0f} min): "
                     f"**{r['mode']}** keeps the most, {r['effective']:.1%} of failure-free throughput "
                     f"(ETTR {r['ettr']:.3f}).")
    by = {(r["gpus"], r["spares"], r["mode"]): r for r in rows}
    sizes, counts = sorted({r["gpus"] for r in rows}), sorted({r["spares"] for r in rows})
    winners = [best[(g, counts[0])]["mode"] for g in sizes if (g, counts[0]) in best]
    changes = [f"{a} to {b} at {g:,} GPUs" for (a, b, g) in zip(winners, winners[1:], sizes[1:]) if a != b]
    if changes:
        lines.append("- The order changes with scale: " + "; ".join(changes) + ".")
    if len(counts) > 1:
        gain = max(((by[(g, counts[-1], m)]["effective"] - by[(g, counts[0], m)]["effective"], g, m)
                    for (g, c, m) in by if c == counts[0] and (g, counts[-1], m) in by), default=None)
        if gain:
            lines.append(f"- {counts[-1]} spare(s) buy at most {gain[0]:+.1%} of throughput ({gain[2]}, "
                         f"{gain[1]:,} GPUs): a spare shortens a spawn's outage, which only matters where outages "
                         "are a large share of the time between failures.")
    for g in sizes:
        k, yd = by.get((g, counts[0], "checkpoint K=100")), by.get((g, counts[0], "checkpoint at Young/Daly"))
        if k and yd:
            lines.append(f"- Checkpointing at Young/Daly's interval instead of every 100 steps: "
                         f"{yd['effective'] - k['effective']:+.1%} of throughput at {g:,} GPUs ({yd['notes'].split(';')[0]}).")
    if result.get("validation"):
        v = result["validation"]
        inside = sum(1 for r in v if r["within_0.03"])
        same = [r for r in v if r["same_difference"] is not None]
        same_inside = sum(1 for r in same if abs(r["same_difference"]) <= 0.03)
        lines += ["", "## Validation on measured runs", "",
                  f"The completed runs in `{result['validated_from']}` (PS failures at random, `--failures`), "
                  "each configuration predicted twice by the simulation fed with this machine's measurement: "
                  "`predicted`, its expectation for the failure process over runs of the same length (what a "
                  "projection gives), and `same_arrivals`, the model given each run's own failure times (the "
                  "mean over its runs). A measured mean differs from the first by the model's error and by the "
                  "draw (a few runs of minutes see a handful of failures: `measured_ci`), from the second by "
                  f"the model's error alone. {inside} of {len(v)} configurations are within 0.03 of the first, "
                  f"{same_inside} of {len(same)} of the second.", "", frame(v).to_markdown(index=False)]
        model_missed = [r for r in same if abs(r["same_difference"]) > 0.03]
        draw_missed = [r for r in v if not r["within_0.03"] and r not in model_missed]
        if draw_missed:
            lines += ["", "Off by more than 0.03 from the expectation but not on the runs' own failure times, so "
                      "by the draw: " + ", ".join(f"{r['configuration']} ({r['difference']:+.3f}, on its "
                                                    f"arrivals {r['same_difference']:+.3f})" for r in draw_missed)
                      + "."]
        if result.get("ended_early"):
            lines += ["", "Not compared, runs that did not complete (the model has no such end: it counts every "
                      "failure as recovered): " + "; ".join(f"{r['configuration']} ({r['ended_early']} of "
                                                              f"{r['runs']}: {r['reason']})"
                                                              for r in result["ended_early"]) + "."]
        if model_missed:
            lines += ["", "Where the model misses on the runs' own failure times: it counts each failure's outage "
                      "as the perf run measured it (the median of a few kills at a steady pace) and no cost "
                      "between failures; failures that come closer than a replacement's cold start pay a slower "
                      "repair (a spawn into a loaded machine, a failure during the last repair's set-up) that it "
                      "does not see: " + ", ".join(f"{r['configuration']} ({r['same_difference']:+.3f})"
                                                   for r in model_missed) + "."]
    lines += ["", "## Projection", "", frame([{k: v for k, v in r.items() if k != "notes"} for r in rows])
              .to_markdown(index=False), "", "![ETTR against cluster size](ettr.png)", "", "## From the measurement",
              "", f"- Checkpoint copy: {m['copy_fit'][1] ** -1 / 1e9 if m['copy_fit'][1] else float('inf'):.2f} GB/s "
              f"fitted (largest residual {m['copy_fit'][2]:.0%}); write "
              f"{m['write_fit'][1] ** -1 / 1e9 if m['write_fit'][1] else float('inf'):.2f} GB/s "
              f"(largest residual {m['write_fit'][2]:.0%}).",
              "- Outage of a PS SIGKILL (median): " + ", ".join(f"{k} {v:.2f} s" for k, v in m["outage"].items()) + ".",
              "- Steady overhead against none: " + ", ".join(f"{k} {v:.1%}" for k, v in m["overhead"].items()) + ".",
              "", "## Assumptions", "",
              "- Every node failure is recovered as psbench recovered a PS death; the workers' own recovery "
              "(elastic workers) is not measured yet, so at scale this is the best case of each mode.",
              "- A chain (hybrid too) of R replicas loses every copy of the state when its head and replicas "
              "all fail within a new replica's set-up (its spawn and first state); the projection counts every "
              "failure as recovered. With PS failures 10-40 s apart, the MTBF study's chains of one replica "
              "died so (the validation's runs that did not complete); at a cluster's minutes to hours between "
              "failures and a set-up of seconds that is rare, and a job pairs a chain with checkpoints for it.",
              "- Costs per failure and steady overheads move to the target as `psbench project --help` and "
              "launch/experiments/project.py say (bytes over bandwidth on top of what was measured).", "",
              "Notes per mode: " + "; ".join(sorted({f"{r['mode']}: {r['notes']}" for r in rows if r["notes"]})), ""]
    return "\n".join(lines)


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (mode, spares) in sorted({(r["mode"], r["spares"]) for r in rows}):
        pts = sorted((r["gpus"], r["ettr"], r["ettr_ci"]) for r in rows if r["mode"] == mode and r["spares"] == spares)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3,
                    label=f"{mode}" + (f", {spares} spare(s)" if spares else ""))
    ax.set_xscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("ETTR")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    ax.set_title("Projected ETTR against cluster size")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _positive_ints(text: str, option: str) -> list[int]:
    values = _non_negative_ints(text, option)
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"{option} {text!r}: give positive whole numbers separated by commas, e.g. 1024,16384")
    return values


def _non_negative_ints(text: str, option: str) -> list[int]:
    try:
        values = [int(float(x)) for x in str(text).split(",") if x.strip()]
    except ValueError:
        values = [-1]
    if not values or any(v < 0 or math.isnan(v) for v in values):
        raise ConfigError(f"{option} {text!r}: give whole numbers separated by commas")
    return values


def add_project_parser(sub) -> None:
    p = sub.add_parser("project", help="project each mode's ETTR and time to train onto a cluster from a perf run",
                       description="Each recovery mode's ETTR, effective throughput and time to train at a "
                                   "cluster's scale, simulated from what psbench perf measured here.")
    p.add_argument("--from", dest="from_", required=True, help="a psbench perf folder (its perf.json)")
    p.add_argument("--gpus", default="1024,16384,131072", help="cluster sizes, comma-separated")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu-mttf-h", type=float, default=PUBLISHED_GPU_MTTF_H,
                   help="GPU-hours per failure (default: the published rate, arXiv 2410.21680)")
    p.add_argument("--shape", type=float, default=1.0, help="Weibull shape of a node's times between failures")
    p.add_argument("--params", type=float, default=7e9, help="model parameters")
    p.add_argument("--bytes-per-param", type=float, default=16.0,
                   help="state bytes per parameter (16: mixed precision with Adam's two moments)")
    p.add_argument("--step", default="1s", help="one failure-free synchronous step")
    p.add_argument("--store-gbps", type=float, default=100.0, help="checkpoint store bandwidth, Gb/s")
    p.add_argument("--net-gbps", type=float, default=200.0, help="a PS's network bandwidth, Gb/s")
    p.add_argument("--ps-shards", type=int, default=1, help="PS shards, each holding its part of the state")
    p.add_argument("--copy-gbps", type=float, help="a checkpoint's synchronous copy, Gb/s (default: the rate "
                   "measured here, a host memory copy)")
    p.add_argument("--spares", default="0,2", help="hot spares, comma-separated counts")
    p.add_argument("--work-days", type=float, default=30.0, help="failure-free days of training the job needs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--validate", metavar="RUNS", help="also predict these measured runs (a folder, or a sweep's kept "
                   ".tar.xz: the MTBF study's, --failures at the PS) and show predicted against measured ETTR")
    p.add_argument("--out", default="reports/projection")

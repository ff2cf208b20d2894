"""Collects run directories into per-run figures and per-configuration
aggregates (mean and 95% CI over seeds); the reports and ``compare`` read these.

A run's *status*:

- ``completed``: ``summary.json`` says the training completed;
- ``failed``: the run ended and has a summary, but its training did not complete
  (a crash, a timeout, a PS kill in mode ``none``);
- ``diverged``: its model went non-finite (a NaN or inf in the weights, a gradient or the
  metric: psmodes/divergence.py); an outcome of its own, counted and named by the reports;
- ``incomplete``: no ``summary.json`` (the launcher was killed or crashed, or a
  sweep run that never finished: ``<slug>.partial``); its figures are
  recomputed from the events recorded so far, where possible;
- ``broken``: ``summary.json`` or ``config.json`` cannot be read.

Only completed runs enter the aggregates; every other run is listed, marked,
never dropped.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from benchmarks import metrics
from psmodes import modes
from psmodes.config import FORMAT_VERSION, ConfigError
from psmodes.events import Ev, read_events

from . import naming
from .faults import fault_list
from .stats import Estimate, mean_ci
from .summary import SUMMARY_VERSION, final_metric, metric_timeline, summarize



@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    fmt: str
    better: str   # "high" or "low"
    doc: str


METRICS = [
    Metric("final_metric", "final metric", "{:.3f}", "high",
           "the workload's metric (accuracy: higher is better; perplexity: lower is better) of the final "
           "weights on the whole test set; the tables name it"),
    Metric("time_to_target_s", "time to target (s)", "{:.1f}", "low",
           "seconds from the start of training to the first evaluation that reaches the target (at or above "
           "it; for a metric to minimise, at or below it); (k/n): only k of n seeds reached it, the mean is "
           "over those"),
    Metric("samples_per_s", "samples/s", "{:.0f}", "high",
           "training samples per second over all workers, the outages taken out (from each failure to the "
           "first update after it: how fast it trains, not how long its failures took; evaluation runs on its "
           "own rank)"),
    Metric("goodput", "goodput (samples/s)", "{:.0f}", "high",
           "samples whose updates are in the final model, per second of training (lost updates are not; a "
           "stateless replay's are): launch/analysis/ettr.py"),
    Metric("ettr", "ETTR", "{:.3f}", "high",
           "effective training time ratio: the share of the training time that was productive, the outages "
           "(failure to the first update after it) and the compute of lost updates taken out"),
    Metric("detection_latency_s", "detection (s)", "{:.2f}", "low",
           "from the failure (a SIGKILL, a hang, ...) to the first survivor noticing it (a hang: suspecting "
           "it), mean over the run's failures"),
    Metric("recovery_s", "recovery (s)", "{:.2f}", "low",
           "from the failure to the first update applied by the new PS, mean over the run's failures"),
    Metric("lost_steps", "lost steps", "{:.1f}", "low",
           "PS updates lost by the run's kills (total over its kills)"),
    Metric("worst_dip", "worst dip", "{:.3f}", "low",
           "the largest fall of the evaluated metric after a failure below its value just before it (0: it never "
           "fell), the worst over the run's failures"),
    Metric("regained_s", "regained (s)", "{:.1f}", "low",
           "from a failure to the first evaluation back at the value before it, the longest over the run's "
           "failures (0 without a dip; runs that never regained it are left out)"),
    Metric("lost_samples", "lost samples", "{:.0f}", "low",
           "training samples whose updates the kills lost: lost steps x the samples of one PS update"),
    Metric("idle_s", "worker idle (s)", "{:.2f}", "low",
           "seconds the workers were blocked by the outages (total over the run's kills)"),
    Metric("unplanned_failures", "unplanned failures", "{:.1f}", "low",
           "failures nobody injected (a crash, a death without a word, a hang that was fenced), per run; "
           "they count in every other figure too"),
    Metric("checkpoint_overhead_pct", "checkpoint overhead (%)", "{:.2f}", "low",
           "time the PS spent on the critical path for checkpoints (state copy + waiting for the previous "
           "write), in % of the training time; checkpoint mode only"),
    Metric("buffered_updates", "buffered updates", "{:.1f}", "low",
           "updates the workers buffered while the PS was down (stateless; total over the run's kills)"),
    Metric("staleness_mean", "staleness (mean)", "{:.2f}", "low",
           "mean staleness of the applied updates (PS version minus the version the gradient was computed on), "
           "where the run records it"),
    Metric("staleness_p99", "staleness (p99)", "{:.1f}", "low",
           "99th percentile of the staleness, where the run records it"),
    Metric("cost_usd", "cost per run ($)", "{:.3g}", "low",
           "rank-seconds of the run priced from the instance price table"),
    Metric("cost_to_target_usd", "cost to target ($)", "{:.3g}", "low",
           "the same price for the time to the target"),
    Metric("usd_per_m_kept_samples", "$ per 1M samples kept", "{:.3g}", "low",
           "the run's price over the samples whose updates are in its final model (goodput x training "
           "time), per million: the cost model's view of ETTR and goodput"),
]
METRIC_BY_KEY = {m.key: m for m in METRICS}
LEGACY_KEYS = {"final_metric": "final_accuracy"}  # results.json written before the metric was declared
ROLES = ("ps", "replica", "evaluator", "worker")


@dataclass
class RunRecord:
    path: Path
    rel: str
    config: dict | None
    summary: dict | None
    status: str
    reason: str
    metrics: dict = field(default_factory=dict)
    rank_s: dict = field(default_factory=dict)     # role -> rank-seconds
    device: str = "cpu"
    label: str = "unknown"
    command: str | None = None

    @property
    def seed(self):
        return (self.config or {}).get("seed", (self.summary or {}).get("seed"))

    @property
    def timeline(self) -> list:
        return sorted(metric_timeline(self.summary or {}))

    @property
    def metric(self) -> metrics.Metric:
        return metrics.of_summary(self.summary or {})

    @property
    def kills(self) -> list:
        return (self.summary or {}).get("kills") or []

    @property
    def faults(self) -> list:
        """Every failure of the run, injected or not (summary ``faults``; an older summary: its kills)."""
        return fault_list(self.summary or {})

    def row(self) -> dict:
        return {"run": self.rel, "configuration": self.label, "seed": self.seed, "status": self.status,
                "reason": self.reason, **{m.key: self.metrics.get(m.key) for m in METRICS},
                **{f"rank_s_{r}": self.rank_s.get(r) for r in ROLES}}


@dataclass
class ConfigAggregate:
    label: str
    config: dict
    runs: list[RunRecord]
    estimates: dict[str, Estimate] = field(default_factory=dict)
    values: dict[str, list] = field(default_factory=dict)
    reached: int = 0
    reference: str | None = None   # label of the no-kill configuration it is compared with

    @property
    def completed(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == "completed"]

    @property
    def diverged(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == "diverged"]

    @property
    def metric(self) -> metrics.Metric:
        """The metric its runs were scored by (one workload per configuration, so one metric)."""
        return next((r.metric for r in self.runs if r.summary), metrics.ACCURACY)

    @property
    def has_kills(self) -> bool:
        return bool(naming.kill_specs(self.config.get("kill_ps")) or naming.kill_specs(self.config.get("kill_replica")))

    def record(self) -> dict:
        return {"label": self.label, "config": naming.identity(self.config), "runs": len(self.runs),
                "completed": len(self.completed), "seeds": [r.seed for r in self.completed],
                "diverged": len(self.diverged),
                "reached_target": self.reached, "reference": self.reference, "metric": self.metric.as_dict(),
                "metrics": {k: {"mean": e.mean, "ci95": e.half_width, "n": e.n, "values": self.values[k]}
                            for k, e in self.estimates.items()},
                "rank_s": {r: mean_ci([run.rank_s.get(r) for run in self.completed]).mean for r in ROLES}}


# ---------------------------------------------------------------- finding and reading runs

def find_run_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a run directory, else every run directory below it."""
    root = Path(root)
    if (root / "config.json").exists():
        return [root]
    return sorted({p.parent for p in root.rglob("config.json")}, key=lambda p: str(p))


def _read_json(path: Path):
    return json.loads(path.read_text())


def newer_format(config: dict, path: Path) -> str | None:
    """Why a run directory written by a newer psbench is refused, or None."""
    version = config.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        return f"{path}: config.json has an invalid format_version {version!r}"
    if version > FORMAT_VERSION:
        return (f"{path}: run format version {version} is newer than this psbench ({FORMAT_VERSION}); "
                "upgrade psbench to read it")
    try:
        summary_version = json.loads((path / "summary.json").read_text()).get("summary_version", SUMMARY_VERSION)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(summary_version, int) and summary_version > SUMMARY_VERSION:
        return (f"{path}: summary version {summary_version} is newer than this psbench ({SUMMARY_VERSION}); "
                "upgrade psbench to read it")
    return None


def load_run(path: Path, root: Path, target: float | None) -> RunRecord:
    path = Path(path)
    rel = str(path.relative_to(root)) if path != root and path.is_relative_to(root) else path.name
    try:
        config = _read_json(path / "config.json")
        if not isinstance(config, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as exc:
        return RunRecord(path, rel, None, None, "broken", f"config.json unreadable ({type(exc).__name__})")
    newer = newer_format(config, path)
    if newer:  # written by a newer psbench: refused, never read further
        if path == root:
            raise ConfigError(newer)
        return RunRecord(path, rel, None, None, "broken", newer)
    summary = None
    if (path / "summary.json").exists():
        try:
            summary = _read_json(path / "summary.json")
            if not isinstance(summary, dict) or "completed" not in summary:
                raise ValueError("not a psbench summary")
            status = run_status(summary)
            reason = str(summary.get("exit_reason") or "")
        except (OSError, ValueError) as exc:
            summary = _recover(path)
            status = "broken"
            reason = f"summary.json unreadable ({type(exc).__name__}: {exc})"[:200]
            if summary is not None:
                reason += "; figures recomputed from the events"
    else:
        summary = _recover(path)
        status = "incomplete"
        reason = ("unfinished sweep run (.partial)" if path.name.endswith(".partial")
                  else "no summary.json: the launcher was killed or crashed")
        err = path / "sweep-error.txt"
        if err.exists():
            lines = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
            reason += f"; launcher error: {lines[-1][:150]}" if lines else ""
        if summary is not None:
            reason += "; figures recomputed from the events"
    rec = RunRecord(path, rel, config, summary, status, reason)
    rec.device = _device(path)
    rec.command = _run_command(path)
    if summary is not None:
        rec.metrics = run_metrics(summary, config, target, path)
        rec.rank_s = rank_seconds(config, summary)
    return rec


def run_status(summary: dict) -> str:
    """``completed``, ``diverged`` (its model went non-finite: an outcome of its own, never averaged)
    or ``failed``, for a run that has a summary."""
    if summary.get("diverged"):
        return "diverged"
    return "completed" if summary.get("completed") else "failed"


def _recover(path: Path) -> dict | None:
    """The summary of a run that has none, recomputed from its events (or None)."""
    try:
        return summarize(path)
    except Exception:  # noqa: BLE001 - whatever the run left behind, the report still renders
        return None


def _device(path: Path) -> str:
    for rec in read_events(path / "events" / "worker0.jsonl"):
        if rec["ev"] == "start":
            return str(rec.get("device", "cpu"))
    return "cpu"


def _run_command(path: Path) -> str | None:
    """The `psbench run` command line that started this run, when it was one."""
    for rec in read_events(path / "events" / "launcher.jsonl"):
        if rec["ev"] == "launch":
            argv = rec.get("argv") or []
            if len(argv) > 1 and argv[1] == "run":
                return shlex.join(["psbench", *argv[1:]])
            return None
    return None


# ---------------------------------------------------------------- per-run figures

def time_to_target(timeline: list, target: float, metric: metrics.Metric = metrics.ACCURACY) -> float | None:
    for t, _step, value in sorted(timeline):
        if value is not None and metric.reached(value, target):
            return float(t)
    return None


def checkpoint_overhead_pct(path: Path | None, config: dict, train_s) -> float | None:
    # the checkpoint writer's cost on the PS's critical path: the copy, and any wait for the previous write
    # (None where the PS writes no checkpoints)
    if path is None or not train_s:
        return None
    starts = [e for f in sorted((path / "events").glob("ps*.jsonl")) for e in read_events(f)
              if e["ev"] == Ev.CHECKPOINT_START]
    mode = modes.REGISTRY.get(config.get("mode"))
    if not starts and not (mode and mode.writes_checkpoints):
        return None
    total = sum(float(e.get("copy_s") or 0) + float(e.get("waited_s") or 0) for e in starts)
    return 100.0 * total / float(train_s)


def run_metrics(summary: dict, config: dict | None, target: float | None, path: Path | None = None) -> dict:
    """The report's figures of one run (None where a figure does not apply); the time to ``target``, or
    without one to its metric's default target (accuracy 0.70; a metric without a default: no time)."""
    config = config or {}
    kills = fault_list(summary)  # every failure, injected or not
    dets = [d.get("latency_s") for d in summary.get("detections") or []]
    recs = summary.get("recoveries") or []
    recovered = bool(kills) and bool(recs)
    metric = metrics.of_summary(summary)
    goal = metric.default_target if target is None else target
    tt = time_to_target(metric_timeline(summary), goal, metric) if goal is not None else None
    backs = summary.get("setbacks") or []
    dips = [b["dip"] for b in backs if b.get("dip") is not None]
    regained = [b["regained_s"] for b in backs if b.get("regained_s") is not None]
    lost = [b["lost_samples"] for b in backs if b.get("lost_samples") is not None]
    out = {
        "final_metric": final_metric(summary),
        "time_to_target_s": tt,
        "samples_per_s": summary.get("samples_per_s"),
        "goodput": summary.get("goodput"),
        "ettr": summary.get("ettr"),
        "detection_latency_s": mean_ci(dets).mean if kills else None,
        "recovery_s": mean_ci([r.get("recovery_s") for r in recs]).mean if recovered else None,
        "lost_steps": sum(r.get("lost_steps") or 0 for r in recs) if recovered else None,
        "idle_s": sum(r.get("idle_s") or 0 for r in recs) if recovered else None,
        "worst_dip": max(dips) if dips else None,
        "regained_s": max(regained) if regained else None,
        "lost_samples": sum(lost) if lost else None,
        "unplanned_failures": sum(1 for f in kills if not f.get("planned", True)),
        "checkpoint_overhead_pct": checkpoint_overhead_pct(path, config, summary.get("train_s")),
        "buffered_updates": sum(r.get("buffered_updates") or 0 for r in recs) if recovered else None,
        "staleness_mean": summary.get("staleness_mean"),
        "staleness_p99": summary.get("staleness_p99"),
    }
    return out


def rank_seconds(config: dict, summary: dict) -> dict:
    """Rank-seconds of each role: the role's ranks x the training seconds."""
    train_s = summary.get("train_s") or 0.0
    mode = modes.REGISTRY.get(config.get("mode"))
    replicas = mode.replicas(SimpleNamespace(**{"replicas": 1, **config})) if mode else 0
    counts = {"ps": 1, "replica": replicas,
              "evaluator": 1 if config.get("evaluator", True) else 0, "worker": config.get("workers", 0)}
    return {role: n * float(train_s) for role, n in counts.items()}


# ---------------------------------------------------------------- grouping

def collect(root: Path, target: float | None = None, pricing=None) -> tuple[list[RunRecord], list[ConfigAggregate]]:
    """Every run below ``root`` and the aggregates of its configurations (in a stable order)."""
    root = Path(root)
    runs = [load_run(p, root, target) for p in find_run_dirs(root)]
    if pricing is not None:
        for r in runs:
            pricing.price(r)
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        key = naming.key_of(r.config) if r.config is not None else "unknown"
        groups.setdefault(key, []).append(r)
    known = [(k, g) for k, g in groups.items() if k != "unknown"]
    names = naming.labels([g[0].config for _, g in known]) if len(known) > 1 else [
        str(g[0].config.get("mode", "run")) for _, g in known]
    aggregates = []
    for (key, group), name in zip(known, names):
        for r in group:
            r.label = name
        agg = ConfigAggregate(name, group[0].config, sorted(group, key=lambda r: (r.seed is None, r.seed, r.rel)))
        aggregate(agg)
        aggregates.append(agg)
    if "unknown" in groups:
        agg = ConfigAggregate("unknown", {}, groups["unknown"])
        aggregate(agg)
        aggregates.append(agg)
    aggregates.sort(key=lambda a: _order(a))
    for agg in aggregates:
        agg.reference = reference_of(agg, aggregates)
    return runs, aggregates


def _order(agg: ConfigAggregate):
    names = modes.NAMES
    c = agg.config
    kills = len(naming.kill_specs(c.get("kill_ps"))) + len(naming.kill_specs(c.get("kill_replica")))
    return (agg.label == "unknown", kills, naming.setting(c),
            names.index(c.get("mode")) if c.get("mode") in names else len(names), agg.label)


def aggregate(agg: ConfigAggregate) -> None:
    done = agg.completed
    for m in METRICS:
        values = [r.metrics.get(m.key) for r in done]
        agg.values[m.key] = [v for v in values if v is not None]
        agg.estimates[m.key] = mean_ci(agg.values[m.key])
    agg.reached = len(agg.values["time_to_target_s"])


def without(config: dict, *keys: str) -> str:
    return json.dumps({k: v for k, v in naming.identity(config).items() if k not in keys}, sort_keys=True, default=str)


# settings that make no difference to a run in mode none without kills
RECOVERY_KEYS = ("mode", "kill_ps", "kill_replica", "restart_delay_s", *naming.MODE_OPTIONS)


def reference_of(agg: ConfigAggregate, aggregates: list[ConfigAggregate]) -> str | None:
    """The no-kill configuration that ``agg`` (with kills) is compared with: in mode ``none``
    with the same settings apart from the recovery ones, if there is one; else the same
    configuration without its kills."""
    if not agg.has_kills or agg.label == "unknown":
        return None
    others = [a for a in aggregates if a is not agg and a.label != "unknown" and not a.has_kills and a.completed]
    loose = without(agg.config, *RECOVERY_KEYS)
    for a in others:
        if a.config.get("mode") == "none" and without(a.config, *RECOVERY_KEYS) == loose:
            return a.label
    strict = without(agg.config, "kill_ps", "kill_replica")
    for a in others:
        if without(a.config, "kill_ps", "kill_replica") == strict:
            return a.label
    return None

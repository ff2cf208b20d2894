"""``psbench compare A B``: two results side by side, metric by metric, in Markdown.

A and B are each a report directory (its ``results.json``) or that file, a
sweep directory or any folder of runs, a run directory, or a ``summary.json``.
Configurations are paired by label (when each side has exactly one, they are
paired whatever their labels). Per metric: A and B (mean ± 95% CI, n), the
difference B − A, and whether it is significant at 95% (Welch's t-test, which
needs two values on each side: otherwise "n/a (n=1)").
"""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks import metrics
from psmodes.config import ConfigError

from .collect import LEGACY_KEYS, METRICS, RunRecord, collect, rank_seconds, run_metrics, run_status
from .cost import Pricing
from .lazy import frame
from .report import fmt_est
from .stats import mean_ci, welch

NA = "–"


class Side:
    """One side of a comparison: label -> metric -> values (one per seed)."""

    def __init__(self, path: str | Path, target: float | None) -> None:
        self.path = Path(path)
        self.given = target
        self.target = target  # None: each metric's default (benchmarks/metrics.py)
        self.metric_names: set[str] = set()
        self.notes: list[str] = []
        self.configs: dict[str, dict[str, list]] = {}
        self._load()

    def _load(self) -> None:
        p = self.path
        if p.is_dir() and (p / "results.json").exists():
            return self._results(p / "results.json")
        if p.is_file():
            data = _json(p)
            if isinstance(data, dict) and "configs" in data:
                return self._results(p)
            if isinstance(data, dict) and "completed" in data:
                return self._summary(data, p.parent)
            raise ConfigError(f"{p} is neither a psbench summary.json nor a report's results.json")
        if p.is_dir() and (p / "config.json").exists():
            data = _json(p / "summary.json") if (p / "summary.json").exists() else None
            if not isinstance(data, dict):
                raise ConfigError(f"{p}: the run has no readable summary.json (psbench report lists such runs)")
            return self._summary(data, p)
        if p.is_dir():
            _, aggs = collect(p, self.target, _pricing())
            if not aggs:
                raise ConfigError(f"{p} holds no runs and no results.json")
            for a in aggs:
                self.configs[a.label] = {m.key: a.values[m.key] for m in METRICS}
                diverged = [r for r in a.runs if r.status == "diverged"]
                if diverged:
                    self.notes.append(f"{a.label}: {len(diverged)}/{len(a.runs)} runs DIVERGED (left out of its "
                                      f"figures): {diverged[0].summary['diverged'].get('text')}")
                self.metric_names.add(a.metric.name)
            return None
        raise ConfigError(f"{p} not found")

    def _results(self, path: Path) -> None:
        data = _json(path)
        if not isinstance(data, dict) or not isinstance(data.get("configs"), list):
            raise ConfigError(f"{path} is not a psbench results.json")
        if data.get("target") is not None:
            if self.given is not None and data["target"] != self.given:
                self.notes.append(f"its time-to-target figures use target {data['target']} (fixed in its results)")
            self.target = data["target"]
        for c in data["configs"]:
            figures = c.get("metrics") or {}
            self.configs[str(c.get("label"))] = {
                m.key: list((figures.get(m.key) or figures.get(LEGACY_KEYS.get(m.key)) or {}).get("values") or [])
                for m in METRICS}
            self.metric_names.add((c.get("metric") or {}).get("name", "accuracy"))
            if c.get("diverged"):
                self.notes.append(f"{c.get('label')}: {c['diverged']}/{c.get('runs')} runs DIVERGED (left out of its figures)")

    def _summary(self, summary: dict, folder: Path) -> None:
        config = _json(folder / "config.json") if (folder / "config.json").exists() else None
        config = config if isinstance(config, dict) else None
        rec = RunRecord(folder, folder.name, config, summary, run_status(summary), str(summary.get("exit_reason", "")))
        events = folder / "events"
        rec.metrics = run_metrics(summary, config, self.target, folder if events.is_dir() else None)
        if config:
            rec.rank_s = rank_seconds(config, summary)
            pricing = _pricing()
            if pricing:
                pricing.price(rec)
        self.metric_names.add(rec.metric.name)
        if rec.status == "diverged":
            self.notes.append(f"the run DIVERGED ({summary['diverged'].get('text')}): no figure of it is compared")
        elif not summary.get("completed"):
            self.notes.append(f"the run did not complete ({summary.get('exit_reason')})")
        label = str(summary.get("mode") or (config or {}).get("mode") or folder.name)
        self.configs[label] = {m.key: [] if rec.metrics.get(m.key) is None or rec.status == "diverged"
                               else [rec.metrics[m.key]] for m in METRICS}


def _json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None


def _pricing():
    try:
        return Pricing()
    except ConfigError:
        return None


def _cell(key: str, values: list) -> str:
    est = mean_ci(values)
    return NA if est.n == 0 else f"{fmt_est(key, est)} (n={est.n})"


def _diff(metric, a: list, b: list) -> str:
    ea, eb = mean_ci(a), mean_ci(b)
    if ea.mean is None or eb.mean is None:
        return NA
    text = metric.fmt.replace("{:", "{:+", 1).format(eb.mean - ea.mean)
    return metric.fmt.format(0.0) if float(text) == 0 else text


def table(a: dict[str, list], b: dict[str, list], metric_name: str = "metric") -> str:
    rows = []
    for m in METRICS:
        va, vb = a.get(m.key) or [], b.get(m.key) or []
        if not va and not vb:
            continue
        rows.append({"metric": f"final {metric_name}" if m.key == "final_metric" else m.title, "A": _cell(m.key, va), "B": _cell(m.key, vb), "B − A": _diff(m, va, vb),
                     "significant at 95%?": welch(va, vb).text() if va and vb else NA})
    if not rows:
        return "(no figures on either side)"
    return frame(rows).to_markdown(index=False, disable_numparse=True)


def compare(a: str | Path, b: str | Path, target: float | None = None) -> str:
    if target is not None and not target > 0:
        raise ConfigError(f"--target must be a positive value of the runs' metric, got {target}")
    A, B = Side(a, target), Side(b, target)
    names = A.metric_names | B.metric_names
    for name in names:
        why = target is not None and metrics.METRICS.get(name) and metrics.METRICS[name].valid_target(target)
        if why:
            raise ConfigError(why)
    metric_name = names.pop() if len(names) == 1 else "metric"
    show = lambda t: "each metric's default" if t is None else f"{t:g}"  # noqa: E731
    targets = show(A.target) if A.target == B.target else f"{show(A.target)} (A), {show(B.target)} (B)"
    lines = ["# psbench compare", "",
             f"A: `{A.path}`; B: `{B.path}`; scored by {metric_name}, target {targets}. Cells: mean ± 95% CI over seeds (n); "
             "significant: Welch's t-test p < 0.05 (needs n >= 2 on both sides).", ""]
    for name, side in (("A", A), ("B", B)):
        for note in side.notes:
            lines.append(f"- {name}: {note}")
    if A.notes or B.notes:
        lines.append("")
    if len(A.configs) == 1 and len(B.configs) == 1:
        (la, va), (lb, vb) = next(iter(A.configs.items())), next(iter(B.configs.items()))
        lines += [f"## {la}" if la == lb else f"## A: {la} vs B: {lb}", "", table(va, vb, metric_name), ""]
        return "\n".join(lines).rstrip() + "\n"
    common = [label for label in A.configs if label in B.configs]
    if not common:
        raise ConfigError(f"A and B share no configuration label (A: {', '.join(A.configs)}; B: {', '.join(B.configs)})")
    for label in common:
        lines += [f"## {label}", "", table(A.configs[label], B.configs[label], metric_name), ""]
    only_a = [label for label in A.configs if label not in B.configs]
    only_b = [label for label in B.configs if label not in A.configs]
    if only_a:
        lines.append(f"Only in A: {', '.join(only_a)}.")
    if only_b:
        lines.append(f"Only in B: {', '.join(only_b)}.")
    return "\n".join(lines).rstrip() + "\n"

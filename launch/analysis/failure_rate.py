"""The section "Against the mean time between failures" of a sweep whose configurations differ in the
rate of one failure process (``failures``, benchmarks/sweeps/mtbf.toml): per variant (a recovery mode
with its settings), ETTR, goodput and the final metric at each mean time between failures, with 95 %
intervals over seeds, a plot, and findings: which variant leads at each rate and where the order changes.

A run that ended early (a chain whose head and every replica died) is not left out here, as the means
elsewhere in the report leave it: the rest of its planned training time was not productive, so its ETTR
and goodput are counted over the whole ``--duration`` (productive seconds / planned seconds; samples
kept / planned seconds). That is what such a run is worth to whoever planned it; the table says how many
runs completed. The final metric is the completed runs' only.
"""
from __future__ import annotations

from pathlib import Path

from psmodes.failure_process import parse_all

from . import naming
from .collect import ConfigAggregate, RunRecord
from .lazy import pyplot
from .stats import Estimate, mean_ci, welch

NA = "–"


def mtbf_of(config: dict) -> float | None:
    """The mean time between failures of a configuration's one failure process (None: not one)."""
    try:
        processes = parse_all(config.get("failures") or [])
    except ValueError:
        return None
    return processes[0].mean_s if len(processes) == 1 else None


def planned_figures(run: RunRecord, config: dict) -> tuple[float, float] | None:
    """(ETTR, goodput) of a run over its planned training time (the module docstring); None without a
    summary that says."""
    s = run.summary or {}
    parts = s.get("ettr_parts") or {}
    train_s = parts.get("train_s") or s.get("train_s")
    planned = config.get("duration_s") or train_s
    if not planned or train_s is None or s.get("ettr") is None:
        return None
    productive = parts.get("productive_s", s["ettr"] * train_s)
    kept = (s.get("goodput") or 0.0) * train_s
    return min(1.0, productive / planned), kept / planned


class Study:
    """The aggregates of a failure-rate sweep, by variant and mean time between failures."""

    def __init__(self, aggs: list[ConfigAggregate]) -> None:
        cells = [(a, mtbf_of(a.config)) for a in aggs if a.label != "unknown"]
        cells = [(a, m) for a, m in cells if m is not None]
        variants = [{k: v for k, v in a.config.items() if k not in ("failures", "failure_schedule")}
                    for a, _ in cells]
        names = naming.labels(variants) if len(cells) > 1 else [a.config.get("mode", "run") for a, _ in cells]
        self.rates = sorted({round(m, 3) for _, m in cells})
        self.variants = list(dict.fromkeys(names))
        self.cell = {(name, round(m, 3)): a for (a, m), name in zip(cells, names)}

    @property
    def applies(self) -> bool:
        return len(self.rates) >= 2 and len(self.variants) >= 1

    def runs(self, variant: str, rate: float) -> list[RunRecord]:
        agg = self.cell.get((variant, rate))
        return [] if agg is None else [r for r in agg.runs if r.status != "incomplete"]

    def figures(self, variant: str, rate: float) -> tuple[list[float], list[float]]:
        agg = self.cell.get((variant, rate))
        pairs = [planned_figures(r, agg.config) for r in self.runs(variant, rate)] if agg else []
        pairs = [p for p in pairs if p is not None]
        return [e for e, _ in pairs], [g for _, g in pairs]

    def mode_of(self, variant: str) -> str:
        return next(str(a.config.get("mode")) for (v, _), a in self.cell.items() if v == variant)

    def final(self, variant: str, rate: float) -> Estimate:
        agg = self.cell.get((variant, rate))
        return agg.estimates["final_metric"] if agg else Estimate(None, None, 0)


def _cell(est: Estimate, fmt: str) -> str:
    if est.mean is None:
        return NA
    return fmt.format(est.mean) + (f" ± {fmt.format(est.half_width)}" if est.half_width is not None else "")


def _rate(rate: float) -> str:
    return f"{rate:g} s"


def section(aggs: list[ConfigAggregate], out: Path, md_table) -> list[str]:
    study = Study(aggs)
    if not study.applies:
        return []
    L = ["## Against the mean time between failures", "",
         "Each variant at each mean time between failures (MTBF) of the failure process: ETTR and goodput over "
         "the planned training time (a run that ended early counts the rest as lost, not as left out: "
         "launch/analysis/failure_rate.py), the final metric of the completed runs, and how many completed. "
         "Mean ± the half-width of the 95 % interval over seeds.", ""]
    for title, pick, fmt in (("ETTR", 0, "{:.3f}"), ("goodput (samples/s)", 1, "{:.0f}")):
        rows = []
        for v in study.variants:
            row = {"variant": v}
            for rate in study.rates:
                values = study.figures(v, rate)[pick]
                done = sum(1 for r in study.runs(v, rate) if r.status == "completed")
                row[f"MTBF {_rate(rate)}"] = (_cell(mean_ci(values), fmt) + f" ({done}/{len(values)})"
                                              if values else NA)
            rows.append(row)
        L += [f"**{title}** (completed/runs)", "", md_table(rows), ""]
    rows = [{"variant": v, **{f"MTBF {_rate(rate)}": _cell(study.final(v, rate), "{:.3f}") for rate in study.rates}}
            for v in study.variants]
    L += ["**final metric** (completed runs)", "", md_table(rows), ""]
    path = _plot(study, out / "ettr-mtbf.png")
    if path is not None:
        L += [f"![ETTR and goodput against the mean time between failures]({path.name})", ""]
    L += ["Findings:", ""] + findings(study) + [""]
    return L


def leaders(study: Study) -> list[tuple[float, str, str, str | None, str | None, str]]:
    """Per rate, the recovery modes by their best variant's mean ETTR: (rate, the leading mode, its best
    variant, the next mode, its best variant, whether the lead is significant at 95%)."""
    out = []
    for rate in study.rates:
        best: dict[str, tuple[float, str, list]] = {}
        for v in study.variants:
            e = study.figures(v, rate)[0]
            if e and (study.mode_of(v) not in best or sum(e) / len(e) > best[study.mode_of(v)][0]):
                best[study.mode_of(v)] = (sum(e) / len(e), v, e)
        ranked = sorted(best.items(), key=lambda kv: kv[1][0], reverse=True)
        if not ranked:
            continue
        (mode, (_, variant, values)), second = ranked[0], ranked[1] if len(ranked) > 1 else None
        test = welch(values, second[1][2]).text() if second else NA
        out.append((rate, mode, variant, second[0] if second else None, second[1][1] if second else None, test))
    return out


def findings(study: Study) -> list[str]:
    """Which mode leads at each rate (by its best variant), where that changes, and the runs that ended early."""
    lines = []
    lead = leaders(study)
    for rate, mode, variant, next_mode, next_variant, test in lead:
        text = (f"- MTBF {_rate(rate)}: **{mode}** has the highest ETTR, {variant} "
                f"({_cell(mean_ci(study.figures(variant, rate)[0]), '{:.3f}')})")
        if next_mode:
            runner_up = _cell(mean_ci(study.figures(next_variant, rate)[0]), "{:.3f}")
            text += f"; next {next_mode}, {next_variant} ({runner_up}); the lead significant at 95%: {test}"
        lines.append(text + ".")
    changes = [(a, b) for a, b in zip(lead, lead[1:]) if a[1] != b[1]]
    if changes:
        lines.append("- The order changes with the rate: " + "; ".join(
            f"{a[1]} leads at MTBF {_rate(a[0])}, {b[1]} at {_rate(b[0])}" for a, b in changes) + ".")
    elif lead:
        lines.append(f"- The same mode leads at every rate measured: {lead[0][1]}.")
    ended: dict[tuple, list[str]] = {}  # (rates, reasons) -> the variants whose runs ended early there
    for v in study.variants:
        early = [rate for rate in study.rates
                 if any(r.status in ("failed", "diverged") for r in study.runs(v, rate))]
        if early:
            reasons = {(r.summary or {}).get("exit_reason") for rate in early for r in study.runs(v, rate)
                       if r.status in ("failed", "diverged")}
            ended.setdefault((tuple(early), tuple(sorted(str(x) for x in reasons))), []).append(v)
    for (early, reasons), variants in ended.items():
        lines.append(f"- Runs ended early at MTBF {', '.join(_rate(r) for r in early)}: {', '.join(variants)} "
                     f"({'; '.join(reasons)}).")
    return lines


def _plot(study: Study, path: Path) -> Path | None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    drawn = False
    for v in study.variants:
        for ax, pick in zip(axes, (0, 1)):
            pts = [(rate, mean_ci(study.figures(v, rate)[pick])) for rate in study.rates]
            pts = [(rate, est) for rate, est in pts if est.mean is not None]
            if not pts:
                continue
            drawn = True
            ax.errorbar([p[0] for p in pts], [p[1].mean for p in pts],
                        yerr=[p[1].half_width or 0.0 for p in pts], marker="o", capsize=3, label=v)
    if not drawn:
        plt.close(fig)
        return None
    for ax, title in zip(axes, ("ETTR (over the planned time)", "goodput (samples/s)")):
        ax.set_xscale("log")
        ax.set_xlabel("mean time between failures (s)")
        ax.set_title(title)
    axes[0].set_ylim(0, 1.02)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

"""The outage-length study's section of a report (benchmarks/sweeps/outage.toml): what a
failure costs each recovery mode as a function of how long the PS is down.

It appears when configurations with kills differ in ``--restart-delay`` (the time a
replacement takes to be provisioned). A *series* is one mode with its options (stateless
with one replay policy, checkpoint with its K, ...); its points are its configurations,
one per restart delay, each with the outage it measured (the mean kill-to-first-update
over seeds). Per figure (the final metric lost against the no-kill reference, the worst
dip, the time to target) a plot against the restart delay with one line per series and
its 95% confidence band, and a table; then the finding the study is about: from which
delay on, if any, a stateless series ends above checkpoint and reaches the target before
it, and whether that difference is significant.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import naming
from .collect import METRIC_BY_KEY, ConfigAggregate
from .lazy import pyplot
from .stats import mean_ci, welch

DELAY = "restart_delay_s"
FIGURES = (("metric_lost", "final metric lost against the no-kill reference (accuracy lost, perplexity gained)"),
           ("worst_dip", "worst dip after the failure"),
           ("time_to_target_s", "time to target (s)"))


def series(aggs: list[ConfigAggregate]) -> dict[str, list[ConfigAggregate]]:
    """Configurations with kills that differ in the restart delay, by series name, sorted by delay;
    empty when the delay does not vary."""
    killed = [a for a in aggs if a.has_kills and a.completed and a.label != "unknown"]
    if len({a.config.get(DELAY) for a in killed}) < 2:
        return {}
    groups: dict[str, list[ConfigAggregate]] = {}
    for a in killed:
        key = json.dumps({k: v for k, v in naming.identity(a.config).items() if k != DELAY}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(a)
    reps = [json.loads(k) for k in groups]
    names = naming.labels(reps) if len(reps) > 1 else [str(reps[0].get("mode"))]
    return {name: sorted(g, key=lambda a: a.config.get(DELAY) or 0) for name, g in zip(names, groups.values())}


def values(agg: ConfigAggregate, key: str, by_label: dict) -> list:
    """Per-seed values of a figure; the metric lost is against the reference's mean (positive: worse)."""
    if key != "metric_lost":
        return agg.values.get(key, [])
    ref = by_label.get(agg.reference)
    ref_mean = ref.estimates["final_metric"].mean if ref else None
    return [] if ref_mean is None else [agg.metric.drop(ref_mean, v) for v in agg.values["final_metric"] if v is not None]


def outage_of(agg: ConfigAggregate) -> float | None:
    return agg.estimates["recovery_s"].mean


# what a stateless series is compared with checkpoint on, at the same restart delay: (figure, what being
# ahead is called); the final metric by the metric's own direction, the time to target lower
CROSSOVER = (("final_metric", "ends above checkpoint"), ("time_to_target_s", "reaches the target before checkpoint"))


def crossover(lines: dict[str, list[ConfigAggregate]]) -> list[str]:
    """Where each stateless series overtakes checkpoint (same restart delay, ahead from that delay
    on) in the final metric and in the time to target, with the test at the first such delay."""
    base = next((g for g in lines.values() if g[0].config.get("mode") == "checkpoint"), None)
    if base is None:
        return []
    at = {a.config.get(DELAY): a for a in base}
    out = []
    for key, phrase in CROSSOVER:
        for name, group in lines.items():
            if group[0].config.get("mode") != "stateless":
                continue
            pairs = [(a, at[a.config.get(DELAY)]) for a in group if a.config.get(DELAY) in at]
            if pairs:
                out.append(_overtakes(name, pairs, key, phrase))
    return out


def _ahead(a: ConfigAggregate, c: ConfigAggregate, key: str) -> bool:
    x, y = a.estimates[key].mean, c.estimates[key].mean
    if x is None or y is None:
        return key == "time_to_target_s" and x is not None  # reached the target where checkpoint never did
    return a.metric.better(x, y) if key == "final_metric" else x < y


def _overtakes(name: str, pairs: list, key: str, phrase: str) -> str:
    ahead = [_ahead(a, c, key) for a, c in pairs]
    first = next((i for i in range(len(pairs)) if all(ahead[i:])), None)
    if first is None:
        return (f"- **{name}** never {phrase} at the same restart delay "
                f"({', '.join(f'{p[0].config.get(DELAY):g} s' for p in pairs)}).")
    a, c = pairs[first]
    sig = [welch(x.values[key], y.values[key]) for x, y in pairs[first:]]
    n_sig = sum(1 for t in sig if t.significant)
    x, y = a.estimates[key].mean, c.estimates[key].mean
    if key == "final_metric":
        gap = f"+{-a.metric.drop(y, x):.3f} there"  # > 0: better
    elif y is None:
        gap = "checkpoint did not reach it there"
    else:
        gap = f"{y - x:.1f} s sooner there"
    return (f"- **{name}** {phrase} from a restart delay of {a.config.get(DELAY):g} s on "
            f"(outage {outage_of(a) or 0:.1f} s against checkpoint's {outage_of(c) or 0:.1f} s; "
            f"{gap}; {sig[0].text()} at 95%); significant at {n_sig} of the {len(sig)} delays from there.")


def plot(lines: dict[str, list[ConfigAggregate]], key: str, title: str, by_label: dict, path: Path) -> Path | None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.0), dpi=110)
    drawn = False
    for name, group in lines.items():
        # at the restart delay, not the measured outage: chain's promotion takes 0.1-0.2 s whatever the delay,
        # and drawn at its outage its points stood on one vertical line; the table gives each measured outage
        pts = [(a.config.get(DELAY), mean_ci(values(a, key, by_label))) for a in group]
        pts = [(x, e) for x, e in pts if x is not None and e.mean is not None]
        if not pts:
            continue
        xs = [x for x, _ in pts]
        ax.plot(xs, [e.mean for _, e in pts], marker="o", label=name)
        if all(e.half_width is not None for _, e in pts):
            ax.fill_between(xs, [e.low for _, e in pts], [e.high for _, e in pts], alpha=0.15, linewidth=0)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("restart delay (s): the time to provision a replacement (each one's measured outage: the table)")
    ax.set_ylabel(title)
    ax.set_title(f"{title} against the restart delay (band: 95% CI over seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def section(aggs: list[ConfigAggregate], out: Path, md_table, fmt_est) -> list[str]:
    """The report's "Outage length" section (empty when the restart delay does not vary)."""
    for old in out.glob("outage-*.png"):
        old.unlink()
    lines = series(aggs)
    if not lines:
        return []
    by_label = {a.label: a for a in aggs}
    L = ["## Outage length", "",
         "The same failure with the replacement provisioned after a longer delay (`--restart-delay`): one line "
         "per mode (and policy) against the restart delay; the table gives the outage each configuration "
         "measured (failure to the new PS's first update).", ""]
    L += crossover(lines) or ["- (no checkpoint and stateless series to compare)"]
    L += [""]
    for key, title in FIGURES:
        path = plot(lines, key, title, by_label, out / f"outage-{key}.png")
        if path:
            L += [f"![{title} against the restart delay]({path.name})", ""]
    rows = []
    for name, group in lines.items():
        for a in group:
            row = {"series": name, "restart delay (s)": f"{a.config.get(DELAY):g}",
                   "outage (s)": fmt_est("recovery_s", a.estimates["recovery_s"])}
            for key, title in FIGURES:
                est = mean_ci(values(a, key, by_label))
                row[title] = fmt_est("final_metric" if key == "metric_lost" else key, est)
            rows.append(row)
    L += [md_table(rows), ""]
    L += [f"- **{METRIC_BY_KEY['worst_dip'].title}**: {METRIC_BY_KEY['worst_dip'].doc}.", ""]
    return L

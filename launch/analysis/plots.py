"""Accuracy-over-time plots of the reports (matplotlib, Agg): one line per
configuration (the mean over its completed seeds, each seed's timeline
interpolated onto a common time grid), a shaded 95% confidence band across
seeds, the target (when the metric has one), and the failures as vertical lines at their mean
times, one line style per kind (:data:`FAULT_LINES`: a PS kill dashed, a replica
kill dash-dot, hangs dotted, ...): black when every line has the same failures,
else in the colour of each configuration.

Outages are grey bands (the seeds' mean: from the failure to the first update of
the new PS), and a line is not drawn across an interval without evaluations: the
evaluator waits while the PS is down, and a straight line through the outage made
a replay's sudden fall look gradual."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..faultkinds import KINDS
from .lazy import pyplot
from .stats import t_quantile

MODE_COLORS = {"none": "#444444", "checkpoint": "#1f77b4", "chain": "#ff7f0e", "stateless": "#2ca02c",
               "hybrid": "#9467bd"}
EXTRA_COLORS = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]


def mean_band(timelines: list[list], points: int = 300):
    """(grid, mean, half-width or None) of metric timelines ``[[t, step, value], ...]``."""
    series = []
    for tl in timelines:
        tl = sorted(p for p in tl if p[2] is not None)
        if tl:
            series.append((np.array([p[0] for p in tl], float), np.array([p[2] for p in tl], float)))
    if not series:
        return None
    t_end = min(t[-1] for t, _ in series)
    t_start = max(0.0, min(t[0] for t, _ in series))
    if t_end <= t_start:  # e.g. no evaluator: only the final metric, one point per seed
        t_end = t_start = float(np.mean([t[-1] for t, _ in series]))
        ys = np.array([[a[-1]] for _, a in series])
        n = len(series)
        half = t_quantile(n) * ys.std(axis=0, ddof=1) / np.sqrt(n) if n >= 2 else None
        return np.array([t_end]), ys.mean(axis=0), half
    grid = np.linspace(t_start, t_end, points)
    ys = np.vstack([np.where(in_gap(grid, t), np.nan, np.interp(grid, t, a)) for t, a in series])
    mean = ys.mean(axis=0)
    n = len(series)
    half = t_quantile(n) * ys.std(axis=0, ddof=1) / np.sqrt(n) if n >= 2 else None
    return grid, mean, half


def in_gap(grid: np.ndarray, t: np.ndarray, factor: float = 2.5) -> np.ndarray:
    """Where ``grid`` falls between two evaluations further apart than ``factor`` x their usual
    interval (the median): nothing was measured there, so nothing is drawn (NaN breaks a line)."""
    if len(t) < 3:
        return np.zeros(len(grid), bool)
    steps = np.diff(t)
    wide = np.flatnonzero(steps > factor * np.median(steps))
    mask = np.zeros(len(grid), bool)
    for i in wide:
        mask |= (grid > t[i]) & (grid < t[i + 1])
    return mask


def with_gaps(t, y) -> tuple[np.ndarray, np.ndarray]:
    """One run's timeline with a NaN in each gap between evaluations (see :func:`in_gap`)."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    if len(t) < 3:
        return t, y
    steps = np.diff(t)
    cut = np.flatnonzero(steps > 2.5 * np.median(steps)) + 1
    return np.insert(t, cut, (t[cut - 1] + t[cut]) / 2), np.insert(y, cut, np.nan)


def outage_spans(setback_lists: list[list[dict]]) -> list[tuple[float, float]]:
    """(start, end) of the i-th outage, the mean over the runs that recovered from an i-th failure."""
    by_index: dict[int, list] = {}
    for backs in setback_lists:
        for b in backs:
            if b.get("outage_s") is not None:
                by_index.setdefault(b["fault"], []).append((b["t_s"], b["t_s"] + b["outage_s"]))
    return [tuple(np.mean(by_index[i], axis=0)) for i in sorted(by_index)]


def shade_outages(ax, spans, color: str = "#888888", label: str | None = "outage (failure to the new PS's first update)"):
    for i, (a, b) in enumerate(spans):
        ax.axvspan(a, b, color=color, alpha=0.13, linewidth=0, label=label if i == 0 else None)


# how each failure is marked, by (kind, target): each kind's own lines (launch/faultkinds/), and a failure
# nobody injected
FAULT_LINES = {**{(name, target): line for name, kind in KINDS.items() for target, line in kind.plot_lines.items()},
               ("unplanned", "ps"): ((0, (2, 2, 6, 2)), "unplanned failure")}


def fault_key(fault: dict) -> tuple[str, str]:
    kind = fault.get("kind", "kill") if fault.get("planned", True) else "unplanned"
    target = "replica" if str(fault.get("role", "ps")).startswith("replica") and kind != "unplanned" else "ps"
    for key in ((kind, target), (kind, "ps")):  # a kind without a replica style is drawn as at the PS
        if key in FAULT_LINES:
            return key
    return ("unplanned", "ps")


def kill_times(runs) -> list[tuple[tuple, float]]:
    """(fault key, mean time) of the i-th failure over the runs that had one (kills, hangs, ...)."""
    by_index: dict[int, list] = {}
    for r in runs:
        for i, k in enumerate(r.faults):
            by_index.setdefault(i, []).append((fault_key(k), k.get("t_s")))
    out = []
    for i in sorted(by_index):
        times = [t for _, t in by_index[i] if t is not None]
        if times:
            out.append((by_index[i][0][0], float(np.mean(times))))
    return out


def plot_metric(lines: list[tuple], title: str, target: float | None, path: Path) -> Path | None:
    """``lines``: (aggregate, is_reference), all scored by one metric (the y axis; ``target`` a line across
    it, none when None). Returns the PNG's path, or None when nothing to draw."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8.5, 4.4), dpi=110)
    drawn = 0
    extra = iter(EXTRA_COLORS * 4)
    used_colors: set[str] = set()
    kill_styles = set()
    outages = False
    schedules = [kill_times(a.completed) for a, _ in lines if kill_times(a.completed)]
    shared = bool(schedules) and all(len(k) == len(schedules[0]) and all(
        r1 == r2 and abs(t1 - t2) < 1.0 for (r1, t1), (r2, t2) in zip(k, schedules[0])) for k in schedules)
    for agg, is_reference in lines:
        runs = agg.completed
        band = mean_band([r.timeline for r in runs])
        if band is None:
            continue
        color = MODE_COLORS.get(agg.config.get("mode"))
        if color is None or color in used_colors:
            color = next(extra)
        used_colors.add(color)
        grid, mean, half = band
        label = f"{agg.label} (n={len(runs)}){' - no-kill reference' if is_reference else ''}"
        ax.plot(grid, mean, color=color, linewidth=1.8, linestyle=":" if is_reference else "-", label=label,
                marker="o" if len(grid) == 1 else None)
        if half is not None and len(grid) > 1:
            ax.fill_between(grid, mean - half, mean + half, color=color, alpha=0.18, linewidth=0)
        elif half is not None:
            ax.errorbar(grid, mean, yerr=half, color=color, capsize=3)
        for key, t in kill_times(runs):
            style = FAULT_LINES[key][0]
            kill_styles.add(key)
            if not shared:
                ax.axvline(t, color=color, linestyle=style, linewidth=1.1, alpha=0.85)
        spans = outage_spans([(r.summary or {}).get("setbacks") or [] for r in runs])
        shade_outages(ax, spans, color="#888888" if shared else color, label=None)
        outages = outages or bool(spans)
        drawn += 1
    if shared:  # every line has the same kills: one black marker each, at the mean time
        for i, (key, _) in enumerate(schedules[0]):
            ax.axvline(float(np.mean([k[i][1] for k in schedules])), color="black",
                       linestyle=FAULT_LINES[key][0], linewidth=1.1, alpha=0.85)
    if not drawn:
        plt.close(fig)
        return None
    metric = lines[0][0].metric
    handles, labels = ax.get_legend_handles_labels()
    if target is not None:
        ax.axhline(target, color="#999999", linestyle=":", linewidth=0.9)
        handles.append(plt.Line2D([], [], color="#999999", linestyle=":"))
        labels.append(f"target {target:g}")
    if outages:
        handles.append(plt.Rectangle((0, 0), 1, 1, color="#888888", alpha=0.25, linewidth=0))
        labels.append("outage (mean over seeds)")
    for key, (style, name) in FAULT_LINES.items():
        if key in kill_styles:
            handles.append(plt.Line2D([], [], color="black", linestyle=style, linewidth=1.1))
            labels.append(name)
    ax.legend(handles, labels, fontsize=8, loc="lower right" if metric.higher_is_better else "upper right")
    ax.set_xlabel("seconds since training started")
    ax.set_ylabel(metric.axis_label)
    ax.set_title(title + " (band: 95% CI over seeds)" if any(len(a.completed) > 1 for a, _ in lines) else title,
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

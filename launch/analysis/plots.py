"""Accuracy-over-time plots of the reports (matplotlib, Agg): one line per
configuration (the mean over its completed seeds, each seed's timeline
interpolated onto a common time grid), a shaded 95% confidence band across
seeds, the target accuracy, and the failures as vertical lines at their mean
times, one line style per kind (:data:`FAULT_LINES`: a PS kill dashed, a replica
kill dash-dot, hangs dotted, ...): black when every line has the same failures,
else in the colour of each configuration."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .lazy import pyplot
from .stats import t_quantile

MODE_COLORS = {"none": "#444444", "checkpoint": "#1f77b4", "chain": "#ff7f0e", "stateless": "#2ca02c",
               "hybrid": "#9467bd"}
EXTRA_COLORS = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]


def mean_band(timelines: list[list], points: int = 300):
    """(grid, mean, half-width or None) of accuracy timelines ``[[t, step, acc], ...]``."""
    series = []
    for tl in timelines:
        tl = sorted(p for p in tl if p[2] is not None)
        if tl:
            series.append((np.array([p[0] for p in tl], float), np.array([p[2] for p in tl], float)))
    if not series:
        return None
    t_end = min(t[-1] for t, _ in series)
    t_start = max(0.0, min(t[0] for t, _ in series))
    if t_end <= t_start:  # e.g. no evaluator: only the final accuracy, one point per seed
        t_end = t_start = float(np.mean([t[-1] for t, _ in series]))
        ys = np.array([[a[-1]] for _, a in series])
        n = len(series)
        half = t_quantile(n) * ys.std(axis=0, ddof=1) / np.sqrt(n) if n >= 2 else None
        return np.array([t_end]), ys.mean(axis=0), half
    grid = np.linspace(t_start, t_end, points)
    ys = np.vstack([np.interp(grid, t, a) for t, a in series])
    mean = ys.mean(axis=0)
    n = len(series)
    half = t_quantile(n) * ys.std(axis=0, ddof=1) / np.sqrt(n) if n >= 2 else None
    return grid, mean, half


# how each failure is marked, by (kind, target): kills of the PS dashed, of a replica dash-dot
FAULT_LINES = {("kill", "ps"): ("--", "PS killed (SIGKILL)"), ("kill", "replica"): ("-.", "replica killed"),
               ("hang", "ps"): ((0, (1, 1.5)), "PS hung (SIGSTOP)"), ("hang", "replica"): ((0, (1, 3)), "replica hung"),
               ("slow", "ps"): ((0, (6, 2, 1, 2, 1, 2)), "PS slowed"),
               ("partition", "ps"): ((0, (8, 3)), "PS host cut off"),
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


def plot_accuracy(lines: list[tuple], title: str, target: float, path: Path) -> Path | None:
    """``lines``: (aggregate, is_reference). Returns the PNG's path, or None when nothing to draw."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8.5, 4.4), dpi=110)
    drawn = 0
    extra = iter(EXTRA_COLORS * 4)
    used_colors: set[str] = set()
    kill_styles = set()
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
        drawn += 1
    if shared:  # every line has the same kills: one black marker each, at the mean time
        for i, (key, _) in enumerate(schedules[0]):
            ax.axvline(float(np.mean([k[i][1] for k in schedules])), color="black",
                       linestyle=FAULT_LINES[key][0], linewidth=1.1, alpha=0.85)
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(target, color="#999999", linestyle=":", linewidth=0.9)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="#999999", linestyle=":"))
    labels.append(f"target {target:.2f}")
    for key, (style, name) in FAULT_LINES.items():
        if key in kill_styles:
            handles.append(plt.Line2D([], [], color="black", linestyle=style, linewidth=1.1))
            labels.append(name)
    ax.legend(handles, labels, fontsize=8, loc="lower right")
    ax.set_xlabel("seconds since training started")
    ax.set_ylabel("test accuracy")
    ax.set_title(title + " (band: 95% CI over seeds)" if any(len(a.completed) > 1 for a, _ in lines) else title,
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

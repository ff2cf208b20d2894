"""``report.md`` of a single run: what ran, what happened, the figures, and an
metric-over-time plot (the workload's metric: accuracy, perplexity, ...) with the failures marked (kills, hangs, slow phases, unplanned). Tables are pandas + tabulate."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from benchmarks import metrics
from psmodes.atomic import write_text_atomic

from ..faultkinds import KINDS
from .faults import fault_list
from .lazy import frame, pyplot
from .plots import outage_spans, shade_outages, with_gaps
from .summary import final_metric, metric_timeline


def plot_timeline(summary: dict, metric: metrics.Metric, path: Path) -> Path | None:
    timeline = metric_timeline(summary)
    if not timeline:
        return None
    plt = pyplot()

    t, _, acc = zip(*timeline)
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    ax.plot(*with_gaps(t, acc), marker=".", label=summary["mode"])  # no line where nothing was evaluated
    shade_outages(ax, outage_spans([summary.get("setbacks") or []]))
    mark_faults(ax, fault_list(summary))
    ax.set_xlabel("seconds since training started")
    ax.set_ylabel(metric.axis_label)
    ax.set_title(f"{summary['benchmark']}, mode {summary['mode']}, seed {summary['seed']}")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


FAULT_STYLE = {  # how each kind of failure is marked on a timeline (launch/faultkinds/), and one nobody injected
    **{name: kind.timeline for name, kind in KINDS.items() if kind.timeline},
    "unplanned": dict(color="purple", linestyle=":", label="unplanned failure"),
}


def mark_faults(ax, faults: list[dict], labelled: set | None = None) -> None:
    """A line at each failure (a span for a hang or slow phase that ended, or was fenced);
    each kind labelled once in the legend."""
    labelled = set() if labelled is None else labelled
    for f in faults:
        style = dict(FAULT_STYLE.get(f["kind"], FAULT_STYLE["unplanned"]))
        label = style.pop("label")
        ax.axvline(f["t_s"], linewidth=1, label=None if label in labelled else label, **style)
        labelled.add(label)
        end = f.get("ended_s") or f.get("fenced_s") or ((f["t_s"] + f["for_s"]) if f.get("for_s") else None)
        if end is not None:
            ax.axvspan(f["t_s"], end, color=style["color"], alpha=0.15, linewidth=0)


def _placement(run_dir: Path) -> list[dict]:
    """Rank, role and host, when the run had hosts (placement.json)."""
    try:
        placement = json.loads((run_dir / "placement.json").read_text())
    except (OSError, ValueError):
        return []
    return placement["ranks"] if placement.get("hosts") else []


def _count_faults(faults: list[dict]) -> str:
    planned = [f["kind"] for f in faults if f.get("planned", True)]
    unplanned = sum(1 for f in faults if not f.get("planned", True))
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(Counter(planned).items()))
    return f"{len(planned)}{f' ({kinds})' if kinds else ''} / {unplanned}"


def write_run_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    command = (run_dir / "command.txt").read_text().strip() if (run_dir / "command.txt").exists() else ""
    metric = metrics.of_summary(summary)
    plot = plot_timeline(summary, metric, run_dir / f"{metric.name}.png")
    status = ("completed" if summary["completed"] else f"**DIVERGED**: {summary['diverged']['text']}"
              if summary.get("diverged") else f"**INCOMPLETE**: {summary['exit_reason']}")
    figures = {
        "status": status,
        f"final {metric.name}": final_metric(summary),
        "PS steps": summary["steps"],
        "consistency": summary.get("consistency", "sync"),
        "samples/s": summary["samples_per_s"],
        "ETTR (productive share of the training time)": summary.get("ettr"),
        "goodput (samples in the final model per s)": summary.get("goodput"),
        "samples/s per worker": summary.get("per_worker_samples_per_s"),
        "staleness mean / p99 / max": (f"{summary['staleness_mean']} / {summary['staleness_p99']} / "
                                       f"{summary['staleness_max']}" if summary.get("staleness_mean") is not None
                                       else None),
        "training seconds": summary["train_s"],
        "kills": len(summary["kills"]),
        "failures (planned / unplanned)": _count_faults(fault_list(summary)),
    }
    lines = [f"# psbench run: {summary['benchmark']}, mode {summary['mode']}", "",
             frame(list(figures.items()), columns=["figure", "value"]).to_markdown(index=False), ""]
    if plot:
        lines += [f"![{metric.name} over time]({plot.name})", ""]
    offsets = [{"host": h, **o} for h, o in (summary.get("clock_offsets") or {}).items()]
    for title, rows in (("Failures (injected, and unplanned: nobody injected them)", fault_list(summary)),
                        ("Detections", summary["detections"]),
                        ("Recoveries", summary["recoveries"]),
                        ("Setbacks (what each failure cost the model: launch/analysis/setbacks.py)",
                         summary.get("setbacks")),
                        ("Whole-job restarts", summary.get("restarts")),
                        ("Start-up failures (Open MPI failed before any rank started; the launcher starts such a job again, twice at most)",
                         summary.get("start_failures")),
                        ("Clock offsets (other hosts against the launcher's clock)", offsets),
                        ("Placement", _placement(run_dir))):
        if rows:
            lines += [f"## {title}", "", frame(rows).to_markdown(index=False), ""]
    if summary.get("failures"):
        lines += ["## Failures recorded", "", frame(summary["failures"]).to_markdown(index=False), ""]
    if summary.get("crashes"):
        lines += ["## Crashes (signals psbench did not send)", "",
                  frame(summary["crashes"]).to_markdown(index=False), ""]
    lines += ["## Configuration", "", frame(sorted(config.items()), columns=["key", "value"])
              .astype(str).to_markdown(index=False), "", "## Command", "", "```", command, "```", ""]
    path = run_dir / "report.md"
    write_text_atomic(path, "\n".join(lines))
    return path

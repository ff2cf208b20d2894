"""``report.md`` of a single run: what ran, what happened, the figures, and an
accuracy-over-time plot with the kills marked. Tables are pandas + tabulate."""
from __future__ import annotations

import json
from pathlib import Path

from psmodes.atomic import write_text_atomic

from .lazy import frame, pyplot


def plot_timeline(summary: dict, path: Path) -> Path | None:
    if not summary["accuracy_timeline"]:
        return None
    plt = pyplot()

    t, _, acc = zip(*summary["accuracy_timeline"])
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    ax.plot(t, acc, marker=".", label=summary["mode"])
    for k in summary["kills"]:
        ax.axvline(k["t_s"], color="red", linestyle="--", linewidth=1)
    ax.set_xlabel("seconds since training started")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{summary['benchmark']}, mode {summary['mode']}, seed {summary['seed']} (red: PS kills)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _placement(run_dir: Path) -> list[dict]:
    """Rank, role and host, when the run had hosts (placement.json)."""
    try:
        placement = json.loads((run_dir / "placement.json").read_text())
    except (OSError, ValueError):
        return []
    return placement["ranks"] if placement.get("hosts") else []


def write_run_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    command = (run_dir / "command.txt").read_text().strip() if (run_dir / "command.txt").exists() else ""
    plot = plot_timeline(summary, run_dir / "accuracy.png")
    status = "completed" if summary["completed"] else f"**INCOMPLETE**: {summary['exit_reason']}"
    figures = {
        "status": status,
        "final accuracy": summary["final_accuracy"],
        "PS steps": summary["steps"],
        "consistency": summary.get("consistency", "sync"),
        "samples/s": summary["samples_per_s"],
        "samples/s per worker": summary.get("per_worker_samples_per_s"),
        "staleness mean / p99 / max": (f"{summary['staleness_mean']} / {summary['staleness_p99']} / "
                                       f"{summary['staleness_max']}" if summary.get("staleness_mean") is not None
                                       else None),
        "training seconds": summary["train_s"],
        "kills": len(summary["kills"]),
    }
    lines = [f"# psbench run: {summary['benchmark']}, mode {summary['mode']}", "",
             frame(list(figures.items()), columns=["figure", "value"]).to_markdown(index=False), ""]
    if plot:
        lines += [f"![accuracy over time]({plot.name})", ""]
    offsets = [{"host": h, **o} for h, o in (summary.get("clock_offsets") or {}).items()]
    for title, rows in (("Kills", summary["kills"]), ("Detections", summary["detections"]),
                        ("Recoveries", summary["recoveries"]), ("Whole-job restarts", summary.get("restarts")),
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

"""A study's claims beside psbench's measurements: the section "Claims of <study>, checked"
that opens the report of a sweep whose file names the study (``claims = "arXiv 2406.05546"``,
benchmarks/sweeps/paper-setting.toml).

Each claim is a function of the sweep's configurations that returns, per setting
(configurations that differ only in their recovery mode), the measurement with its 95%
confidence interval and a verdict: **supported** (the difference the claim states is
significant in its direction), **contradicted** (significant the other way), or **not
significant**. The conditions under which a verdict holds are the setting's name (workers,
kills, outage). The study's own limits are stated beside them (:data:`STUDIES`).
"""
from __future__ import annotations

from .collect import ConfigAggregate
from .stats import Estimate, diff_ci, mean_ci

STUDIES = {
    "arXiv 2406.05546": {
        "title": "Training Through Failure: Effects of Data Consistency in Parallel Machine Learning Training "
                 "(arXiv 2406.05546)",
        "limits": "The study ran on one laptop, very likely with one worker, one run per configuration, and kept "
                  "its checkpoints in memory; psbench runs real processes with real SIGKILLs, several seeds, and "
                  "checkpoints on disk.",
    },
}
KNOWN = tuple(STUDIES)
RESTARTING_MODES = ("checkpoint", "chain")  # the abstract's "restarting from old checkpoints"


def _ci(est: Estimate, fmt: str = "{:+.3f}") -> str:
    if est.mean is None:
        return "–"
    text = fmt.format(est.mean)
    width = fmt.replace("+", "")  # the interval at the value's precision
    return text + (f" ± {width.format(est.half_width)}" if est.half_width is not None else " (n=1: no interval)")


def verdict(est: Estimate, claimed_sign: int) -> str:
    """supported / contradicted / not significant, for a difference the claim says is of ``claimed_sign``."""
    if est.mean is None:
        return "not measured"
    if est.half_width is None:
        return "not significant (one seed)"
    low, high = est.mean - est.half_width, est.mean + est.half_width
    if (low > 0 and claimed_sign > 0) or (high < 0 and claimed_sign < 0):
        return "**supported**"
    if (low > 0 and claimed_sign < 0) or (high < 0 and claimed_sign > 0):
        return "**contradicted**"
    return "not significant"


def _by_mode(group: list[ConfigAggregate], mode: str) -> list[ConfigAggregate]:
    return [a for a in group if a.config.get("mode") == mode and a.completed and a.has_kills]


def _best(aggs: list[ConfigAggregate], key: str, high: bool = True) -> ConfigAggregate | None:
    have = [a for a in aggs if a.estimates[key].mean is not None]
    return (max if high else min)(have, key=lambda a: a.estimates[key].mean) if have else None


def accuracy_claim(name: str, group: list[ConfigAggregate]) -> list[dict]:
    """Stateless "improves accuracy as much as 10% in the face of a failure": its best final accuracy
    against the best of checkpoint and chain in the same setting."""
    rows = []
    s = _best(_by_mode(group, "stateless"), "final_metric")
    other = _best(_by_mode(group, "checkpoint") + _by_mode(group, "chain"), "final_metric")
    if s and other:
        est = diff_ci(s.values["final_metric"], other.values["final_metric"])
        rel = est.mean / other.estimates["final_metric"].mean * 100 if other.estimates["final_metric"].mean else None
        rows.append({"setting": name, "measured": f"{s.label} - {other.label}: final accuracy {_ci(est)}"
                     + (f" ({rel:+.1f} %)" if rel is not None else ""), "verdict": verdict(est, +1)})
    return rows


def setback_claim(name: str, group: list[ConfigAggregate]) -> list[dict]:
    """Chain replication and checkpointing "suffer setbacks in accuracy due to restarting from old
    checkpoints": their worst dip after a failure (and the steps they lost), and stateless' for scale."""
    rows = []
    stateless = _best(_by_mode(group, "stateless"), "worst_dip", False)  # _best skips configurations without a dip
    scale = f"; stateless's smallest: {stateless.estimates['worst_dip'].mean:.3f} ({stateless.label})" if stateless else ""
    for mode in RESTARTING_MODES:
        for a in _by_mode(group, mode):
            est = mean_ci(a.values["worst_dip"])
            rows.append({"setting": name, "measured": f"{a.label}: worst dip {_ci(est, '{:.3f}')}, lost steps "
                         f"{_ci(a.estimates['lost_steps'], '{:.1f}')}{scale}", "verdict": verdict(est, +1)})
    return rows


def cost_claim(name: str, group: list[ConfigAggregate]) -> list[dict]:
    """Stateless "incurs similar monetary costs" to checkpointing: the cost to reach the target (the
    cost per run where a configuration never reached it), stateless against checkpoint. Similar:
    the interval of the difference lies within 10 % of checkpoint's cost."""
    rows = []
    s, c = _best(_by_mode(group, "stateless"), "final_metric"), _best(_by_mode(group, "checkpoint"), "final_metric")
    if not (s and c):
        return rows
    key = "cost_to_target_usd" if s.estimates["cost_to_target_usd"].mean and c.estimates["cost_to_target_usd"].mean \
        else "cost_usd"
    if not c.estimates[key].mean:
        return rows
    est = diff_ci(s.values[key], c.values[key])
    base = c.estimates[key].mean
    if est.half_width is None:
        word = "not significant (one seed)"
    elif abs(est.mean) + est.half_width <= 0.1 * base:
        word = "**supported**"
    elif abs(est.mean) - est.half_width > 0.1 * base:
        word = "**contradicted**"
    else:
        word = "not significant"
    what = "cost to target" if key == "cost_to_target_usd" else "cost per run"
    rows.append({"setting": name, "measured": f"{s.label} - {c.label}: {what} {_ci(est, '{:+.4f}')} $ "
                 f"({est.mean / base * 100:+.1f} % of checkpoint's)", "verdict": word})
    return rows


CLAIMS = (
    ("stateless \"continues to train towards convergence and improves accuracy as much as 10 % in the face of a "
     "failure\"", accuracy_claim),
    ("chain replication and checkpointing \"suffer setbacks in accuracy due to restarting from old checkpoints\"",
     setback_claim),
    ("stateless \"incurs similar monetary costs\" to checkpointing", cost_claim),
)


def section(study: str, slices: list[tuple[str, list[ConfigAggregate]]], md_table) -> list[str]:
    """The section for ``study`` (one of :data:`KNOWN`) over the report's settings."""
    info = STUDIES[study]
    L = [f"## Claims of {study}, checked", "", f"{info['title']}. Each claim of its abstract beside psbench's "
         "measurement (the difference with its 95% confidence interval over seeds, Welch) per setting; "
         "**supported**: significant in the claimed direction, **contradicted**: significant against it.", ""]
    rows = []
    for claim, check in CLAIMS:
        found = [r for name, group in slices for r in check(name, group)]
        rows += [{"claim": claim, **r} for r in found] or [{"claim": claim, "setting": "–",
                                                             "measured": "nothing to compare", "verdict": "–"}]
    L += [md_table(rows), "", f"Known limits of the original study: {info['limits']}", ""]
    return L

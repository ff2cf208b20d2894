"""``psbench report DIR``: the Markdown report of a run, a sweep, or any folder
of runs, written to ``reports/<name>/`` (a sweep writes it when it ends):

- ``report.md``: configuration, machine, library versions, the commands to
  reproduce; per configuration the mean and 95% CI over seeds of every figure
  (``launch.analysis.collect.METRICS``); metric-over-time plots (accuracy, perplexity...); findings generated
  from the numbers (never written by hand); a cost table priced from
  ``benchmarks/prices.toml``; every incomplete or failed run, marked;
- ``accuracy*.png`` (named after the runs' metric): the plots linked from it;
- ``results.json`` / ``results.csv``: the same figures, per run and per
  configuration (with the per-seed values), for ``psbench compare``.

Tables are pandas + tabulate.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from psmodes import divergence
from psmodes.atomic import write_text_atomic
from psmodes.config import ConfigError

from .records import records_json
from ..faultkinds import OPTIONS
from . import claims, failure_rate, naming, outage
from benchmarks import metrics

from .collect import METRIC_BY_KEY, METRICS, ROLES, ConfigAggregate, RunRecord, collect
from .cost import Pricing
from .lazy import frame
from .machine import machine_info
from .plots import kill_times, plot_metric
from .stats import Estimate, Test, welch

NA = "–"
DAGGER = "†"


# ---------------------------------------------------------------- formatting

def fmt_value(key: str, value) -> str:
    if value is None:
        return NA
    return METRIC_BY_KEY[key].fmt.format(value)


def fmt_est(key: str, est: Estimate) -> str:
    if est.n == 0 or est.mean is None:
        return NA
    text = fmt_value(key, est.mean)
    if est.half_width is not None:
        text += f" ± {fmt_value(key, est.half_width)}"
    return text


def metric_cell(agg: ConfigAggregate, word: str) -> str:
    """The final metric's estimate, named where the report mixes metrics (``word`` is then "metric")."""
    text = fmt_est("final_metric", agg.estimates["final_metric"])
    return text if word != "metric" or text == NA else f"{text} ({agg.metric.name})"


def target_cell(agg: ConfigAggregate) -> str:
    n = len(agg.completed)
    if n == 0:
        return NA
    if agg.reached == 0:
        return f"not reached (0/{n})"
    text = fmt_est("time_to_target_s", agg.estimates["time_to_target_s"])
    return text if agg.reached == n else f"{text} ({agg.reached}/{n})"


def runs_cell(agg: ConfigAggregate) -> str:
    done, total, diverged = len(agg.completed), len(agg.runs), len(agg.diverged)
    return f"{done}/{total}" + (f" {DAGGER}" if done < total else "") + (f" ({diverged} diverged)" if diverged else "")


def diverged_findings(aggs: list[ConfigAggregate]) -> list[str]:
    """A line per configuration with diverged runs: how many seeds, and after what (the most
    frequent cause): "2/3 seeds diverged after a replay of 367 buffered updates (policy paper)"."""
    out = []
    for a in aggs:
        runs = a.diverged
        if not runs:
            continue
        texts = Counter(divergence.preceded_text((r.summary["diverged"] or {}).get("preceded_by") or {})
                        .split(",")[0] for r in runs)
        cause, _ = texts.most_common(1)[0]
        out.append(f"- **{a.label}**: {len(runs)}/{len(a.runs)} seeds **diverged** {cause} "
                   f"(non-finite {runs[0].summary['diverged'].get('where')}); left out of every mean.")
    return out


def kills_cell(config: dict, runs: list[RunRecord] | None = None) -> str:
    """The fault schedule, with the mean times the failures happened (seconds into training)."""
    parts = []
    for option in OPTIONS:  # every kind's options (launch/faultkinds/)
        at = naming.kill_specs(config.get(option.field))
        if at:
            parts.append(f"{option.what} at " + ", ".join(at))
    text = "; ".join(parts) or "none"
    done = kill_times(runs or [])
    if done:
        text += " (" + ", ".join(f"{t:.1f} s" for _, t in done) + ")"
    return text


def md_table(rows: list[dict]) -> str:
    if not rows:
        return "(none)"
    df = frame(rows).astype(str)
    df = df.apply(lambda col: col.str.replace("|", "/", regex=False).str.replace("\n", " ", regex=False))
    return df.to_markdown(index=False, disable_numparse=True)


def sig_phrase(test: Test) -> str:
    if test.significant is None:
        return f"not testable at 95% ({test.why})"
    word = "significant" if test.significant else "not significant"
    return f"{word} at 95% ({test.why}, Welch's t-test)" if test.p is not None and test.why.startswith("p") \
        else f"{word} at 95% ({test.why})"


# ---------------------------------------------------------------- slices and findings

def slices(aggs: list[ConfigAggregate]) -> list[tuple[str, list[ConfigAggregate]]]:
    """Configurations that differ only in their mode (and its options), named by what they share."""
    groups: dict[str, list[ConfigAggregate]] = {}
    for a in aggs:
        if a.label != "unknown":
            groups.setdefault(naming.setting(a.config), []).append(a)
    keys = list(groups)
    if len(keys) == 1:
        return [("all configurations", groups[keys[0]])]
    reps = [json.loads(k) for k in keys]
    return list(zip(naming.labels(reps), (groups[k] for k in keys)))


def _mean(agg: ConfigAggregate, key: str):
    return agg.estimates[key].mean


def shared_metric(aggs: list[ConfigAggregate]) -> metrics.Metric | None:
    """The metric every configuration is scored by (None when workloads with different metrics are mixed)."""
    names = {a.metric.name: a.metric for a in aggs if a.runs}
    return next(iter(names.values())) if len(names) == 1 else None


def metric_word(aggs: list[ConfigAggregate]) -> str:
    m = shared_metric(aggs)
    return m.name if m else "metric"


def target_text(aggs: list[ConfigAggregate], target: float | None) -> str:
    """The target the times are measured to: the given one, else each metric's default."""
    if target is not None:
        return f"{target:g}"
    m = shared_metric(aggs)
    if m is not None:
        return f"{m.default_target:g}" if m.default_target is not None else "none"
    return "each workload's default"


def _higher(key: str, cands: list[ConfigAggregate]) -> bool:
    if key == "final_metric" and cands:
        return cands[0].metric.higher_is_better
    return METRIC_BY_KEY[key].better == "high"


def _best(cands: list[ConfigAggregate], key: str) -> list[ConfigAggregate]:
    have = [a for a in cands if _mean(a, key) is not None]
    high = _higher(key, have)
    return sorted(have, key=lambda a: -_mean(a, key) if high else _mean(a, key))


def _versus(best: ConfigAggregate, second: ConfigAggregate, key: str) -> str:
    test = welch(best.values[key], second.values[key])
    word = "tied with" if _same(best, second, key) else "next"
    return f"{word} {second.label} ({fmt_est(key, second.estimates[key])}); the difference is {sig_phrase(test)}"


def _same(a: ConfigAggregate, b: ConfigAggregate, key: str) -> bool:
    """Equal as the report shows them (e.g. times quantised by the evaluation interval)."""
    return fmt_value(key, _mean(a, key)) == fmt_value(key, _mean(b, key))


def _gap(loss: float) -> str:
    """``loss``: how much worse than the reference (metrics.Metric.drop), in words."""
    if f"{abs(loss):.3f}" == "0.000":
        return "level with"
    return f"{loss:.3f} worse than" if loss > 0 else f"{-loss:.3f} better than"


def _signed(x: float) -> str:
    text = f"{x:+.3f}"
    return "0.000" if text in ("+0.000", "-0.000") else text


def _leader(cands, key: str, claim: str) -> list[str]:
    """One finding: the best configuration by ``key`` (``claim`` takes its figure) against the runner-up."""
    ranked = _best(cands, key)
    if not ranked:
        return []
    text = f"**{ranked[0].label}** " + claim.format(fmt_est(key, ranked[0].estimates[key]))
    if len(ranked) > 1:
        text += "; " + _versus(ranked[0], ranked[1], key)
    return [text + "."]


def _largest_dip(cands: list[ConfigAggregate]) -> list[str]:
    """The configuration whose failures set the model back furthest, and what did it."""
    dipped = [a for a in cands if (_mean(a, "worst_dip") or 0) > 0]
    if not dipped:
        return []
    worst = max(dipped, key=lambda a: _mean(a, "worst_dip"))
    cause = _common_cause(worst, dipped_only=True)
    why = f" (most often after: {cause})" if cause else ""
    text = (f"**{worst.label}** was set back furthest: its evaluated {worst.metric.name} got worse by "
            f"{fmt_est('worst_dip', worst.estimates['worst_dip'])} after a failure{why}")
    others = [a for a in cands if a is not worst and _mean(a, "worst_dip") is not None]
    if others:
        least = min(others, key=lambda a: _mean(a, "worst_dip"))
        text += f"; least: {least.label} ({fmt_est('worst_dip', least.estimates['worst_dip'])})"
    return [text + "."]


def _common_cause(agg: ConfigAggregate, dipped_only: bool = False) -> str | None:
    """The most frequent cause of the configuration's setbacks (launch/analysis/setbacks.py)."""
    causes = Counter(b["cause"] for r in agg.completed for b in (r.summary or {}).get("setbacks") or []
                     if b.get("cause") and (b.get("dip") or not dipped_only))
    return causes.most_common(1)[0][0] if causes else None


def setback_section(aggs: list[ConfigAggregate]) -> list[str]:
    """The setbacks: how far each configuration's metric fell after its failures, and how long it took back."""
    rows = [{"configuration": a.label,
             **{METRIC_BY_KEY[k].title: fmt_est(k, a.estimates[k]) for k in ("worst_dip", "regained_s", "lost_samples")},
             "cause (most frequent)": _common_cause(a) or NA} for a in aggs if a.has_kills]
    if not rows:
        return []
    return ["### Setbacks", "", f"What the failures cost the model: how much worse the evaluated {metric_word(aggs)} "
            "got than its value just before a failure (the worst dip), how long it took to get back there, and the samples "
            "whose updates were lost.", "", md_table(rows), ""]


SHORT_KEYS = ("final_metric", "worst_dip", "time_to_target_s", "recovery_s", "lost_steps", "samples_per_s")


def in_short(aggs: list[ConfigAggregate], most: int = 5) -> list[str]:
    """The report's opening: the largest differences between modes (the best against the worst of
    each group of configurations that differ only in their mode, per figure) that are significant
    at 95%, largest relative difference first; if none is, the largest ones, said so."""
    cands = []
    for name, group in slices(aggs):
        for key in SHORT_KEYS:
            ranked = _best([a for a in group if a.completed], key)
            if len(ranked) < 2 or _same(ranked[0], ranked[-1], key):
                continue
            best, worst = ranked[0], ranked[-1]
            hi, lo = _mean(best, key), _mean(worst, key)
            rel = abs(hi - lo) / max(abs(hi), abs(lo), 1e-12)
            cands.append((rel, welch(best.values[key], worst.values[key]), name, key, best, worst))
    sig = sorted((c for c in cands if c[1].significant), key=lambda c: -c[0])
    shown = sig[:most] or sorted(cands, key=lambda c: -c[0])[:min(3, most)]
    out = []
    for _rel, test, name, key, best, worst in shown:
        m = METRIC_BY_KEY[key]
        title = f"final {best.metric.name}" if key == "final_metric" else m.title
        better = "high" if _higher(key, [best]) else "low"
        out.append(f"- {name}: **{best.label}** {title} {fmt_est(key, best.estimates[key])} against "
                   f"{worst.label} {fmt_est(key, worst.estimates[key])} ({better}er is better); "
                   f"{sig_phrase(test)}.")
    if shown and not sig:
        out.insert(0, "- No difference between the modes is significant at 95%; the largest ones:")
    return out


def throughput_precision(aggs: list[ConfigAggregate]) -> list[str]:
    """How far the samples/s figures can be told apart: the widest 95% interval against its mean
    (issue #18 asks for every configuration's within 10%; with 3 seeds a 5 % seed-to-seed spread
    already gives 12 %)."""
    rel = [(e.half_width / e.mean, a.label) for a in aggs
           if (e := a.estimates.get("samples_per_s")) is not None and e.half_width is not None and e.mean]
    if not rel:
        return []
    widest, label = max(rel)
    within = sum(r <= 0.10 for r, _ in rel)
    return [f"Samples/s precision: the widest 95% interval is ±{100 * widest:.1f}% of its mean ({label}); "
            f"{within} of {len(rel)} configurations are within ±10%.", ""]


def findings(aggs: list[ConfigAggregate], target: float | None) -> list[str]:
    """Sentences generated from the numbers: per group of configurations that differ only
    in their mode, who reached the target first, who lost least of the metric, who recovered
    fastest, who trained fastest, and whether the lead is significant at 95%."""
    by_label = {a.label: a for a in aggs}
    out: list[str] = []
    for name, group in slices(aggs):
        cands = [a for a in group if a.completed]
        if len(cands) == 1 and cands[0].reference:  # nothing else in its group: its cost of the kills
            a, ref = cands[0], by_label[cands[0].reference]
            loss = a.metric.drop(_mean(ref, "final_metric"), _mean(a, "final_metric"))
            out.append(f"- {name}: **{a.label}** ended {_gap(loss)} the no-kill reference {ref.label} "
                       f"({a.metric.name} {_mean(ref, 'final_metric'):.3f} → {_mean(a, 'final_metric'):.3f}); the "
                       f"difference is {sig_phrase(welch(ref.values['final_metric'], a.values['final_metric']))}.")
            continue
        if len(cands) < 2:
            continue
        lines = []
        metric = cands[0].metric
        goal = target_text(group, target)
        reached = [a for a in cands if a.reached]
        if target is None and metric.default_target is None:
            lines.append(f"no time to target: {metric.name} has no default target (`psbench report --target`).")
        elif not reached:
            lines.append(f"no configuration reached the target {metric.name} {goal}.")
        else:
            ranked = sorted(reached, key=lambda a: (-a.reached / len(a.completed), _mean(a, "time_to_target_s")))
            best = ranked[0]
            tied = [a.label for a in ranked[1:] if a.reached / len(a.completed) == best.reached / len(best.completed)
                    and _same(a, best, "time_to_target_s")]
            who = ", ".join(f"**{x}**" for x in [best.label, *tied])
            text = (f"{who} reached {goal} {'first, at the same time' if tied else 'first'}: "
                    f"{fmt_est('time_to_target_s', best.estimates['time_to_target_s'])} s "
                    f"({best.reached}/{len(best.completed)} seeds)")
            rest = [a for a in ranked[1:] if a.label not in tied]
            if rest:
                text += "; " + _versus(best, rest[0], "time_to_target_s")
            never = [a.label for a in cands if not a.reached]
            if never:
                text += f"; never reached: {', '.join(never)}"
            lines.append(text + ".")
        refs = {a.label: by_label.get(a.reference) for a in cands}
        if all(refs.values()):
            def lost(a):
                return metric.drop(_mean(refs[a.label], "final_metric"), _mean(a, "final_metric") or 0)

            losses = sorted(cands, key=lost)
            best = losses[0]
            ref = refs[best.label]
            text = (f"**{best.label}** lost least {metric.name}: it ended {_gap(lost(best))} the no-kill reference "
                    f"{ref.label} ({_mean(ref, 'final_metric'):.3f} → {_mean(best, 'final_metric'):.3f}; the "
                    f"difference is {sig_phrase(welch(ref.values['final_metric'], best.values['final_metric']))})")
            if len(losses) > 1:
                second = losses[1]
                test = welch(best.values["final_metric"], second.values["final_metric"])
                text += (f"; next {second.label} ({_gap(lost(second))} the reference); the difference in final "
                         f"{metric.name} is {sig_phrase(test)}")
            lines.append(text + ".")
        else:
            lines += _leader(cands, "final_metric", f"ended with the best final {metric.name} ({{}})")
        lines += _leader(cands, "recovery_s", "recovered fastest ({} s from kill to the first new update)")
        lines += _largest_dip(cands)
        lines += _leader(cands, "samples_per_s", "trained fastest ({} samples/s)")
        out.append(f"- {name}:\n" + "\n".join(f"  - {ln}" for ln in lines))
    if not out:  # nothing to compare: state each configuration's own figures
        for a in aggs:
            if a.completed:
                out.append(f"- **{a.label}**: final {a.metric.name} {fmt_est('final_metric', a.estimates['final_metric'])}, "
                           f"time to {target_text([a], target)}: {target_cell(a)} s, samples/s "
                           f"{fmt_est('samples_per_s', a.estimates['samples_per_s'])} "
                           f"(n={len(a.completed)}; no other configuration differs only in its mode).")
    return out


# ---------------------------------------------------------------- plots

def make_plots(aggs: list[ConfigAggregate], target: float | None, out: Path) -> list[tuple[str, Path]]:
    """One plot per slice (a slice shares its workload, so its metric), named after the metric."""
    word = metric_word(aggs)
    for old in {*out.glob("accuracy*.png"), *out.glob("metric*.png"), *out.glob("perplexity*.png"),
                *out.glob(f"{word}*.png")}:
        old.unlink()
    by_label = {a.label: a for a in aggs}
    groups = slices(aggs)
    referenced = set()
    planned = []
    for name, group in groups:
        refs = {a.reference for a in group}
        lines = [(a, False) for a in group]
        if len(refs) == 1 and None not in refs:
            ref = by_label[refs.pop()]
            if ref not in group and ref.config.get("mode") not in {a.config.get("mode") for a in group}:
                lines.append((ref, True))
                referenced.add(ref.label)
        planned.append((name, group, lines))
    benchmark = {a.config.get("benchmark") for a in aggs if a.config}
    prefix = ", ".join(sorted(str(b) for b in benchmark if b))
    plots = []
    drawable = [(n, g, ln) for n, g, ln in planned if not all(a.label in referenced for a in g)]
    for name, group, lines in drawable:
        file = out / (f"{word}.png" if len(drawable) == 1 else f"{word}-{naming.sanitize(name)}.png")
        title = f"{prefix}: {name}" if prefix else name
        if group[0].has_kills:
            title += f" - {kills_cell(group[0].config)}"
        goal = target if target is not None else group[0].metric.default_target
        path = plot_metric(lines, title, goal, file)
        if path:
            plots.append((name, path))
    return plots


# ---------------------------------------------------------------- the report

def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_report(src: str | Path, out: str | Path, target: float | None = None, prices: str | None = None,
                 instance: str | None = None, shown: str | Path | None = None) -> Path:
    """``shown``: what the report names as its source, when ``src`` is a copy (a kept archive, unpacked)."""
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise ConfigError(f"{src} is not a directory")
    sweep = _read_json(src / "sweep.json") if (src / "sweep.json").exists() else None
    if target is None:
        target = (sweep or {}).get("target")
    pricing = Pricing(prices, instance)
    runs, aggs = collect(src, target, pricing)
    if not runs:
        raise ConfigError(f"{src} holds no runs (no config.json in it or below it)")
    check_target(target, runs)
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(aggs, target, out)
    name = (sweep or {}).get("name") or src.resolve().name
    machine = _read_json(src / "machine.json")
    machine_note = "recorded when the sweep started"
    if not machine:
        machine = machine_info()
        machine_note = "the machine that wrote this report (the runs did not record theirs)"
    text = render(name, src, sweep, runs, aggs, target, plots, pricing, machine, machine_note, out, shown)
    write_results(out, name, target, runs, aggs)
    path = out / "report.md"
    write_text_atomic(path, text)
    return path


def check_target(target: float | None, runs: list[RunRecord]) -> None:
    """A given target must make sense for every metric among the runs (an accuracy in (0, 1], ...)."""
    if target is None:
        return
    for metric in {r.metric.name: r.metric for r in runs}.values():
        why = metric.valid_target(target)
        if why:
            raise ConfigError(why)


def write_results(out: Path, name: str, target: float | None, runs: list[RunRecord], aggs: list[ConfigAggregate]) -> None:
    record = {"name": name, "target": target, "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "metrics": {m.key: {"title": m.title, "better": m.better, "doc": m.doc} for m in METRICS},
              "configs": [a.record() for a in aggs], "runs": [r.row() for r in runs]}
    write_text_atomic(out / "results.json", records_json(record))
    write_text_atomic(out / "results.csv", frame([r.row() for r in runs]).to_csv(index=False))


def render(name, src, sweep, runs, aggs, target, plots, pricing, machine, machine_note, out, shown=None) -> str:
    known = [a for a in aggs if a.label != "unknown"]
    benchmarks = sorted({str(a.config.get("benchmark")) for a in known})
    seeds = sorted({r.seed for r in runs if r.seed is not None})
    not_done = [r for r in runs if r.status != "completed"]
    L = [f"# psbench report: {name}", ""]
    L += [f"{len(runs)} runs of {len(known)} configurations ({', '.join(benchmarks) or 'unknown benchmark'}), "
          f"seeds {', '.join(map(str, seeds)) or NA}, scored by {metric_word(aggs)}"
          f"{'' if shared_metric(aggs) else ' (each workload its own)'}, target {target_text(aggs, target)}. "
          f"Generated {time.strftime('%Y-%m-%d %H:%M %Z')} by `psbench report` from `{shown or src}`.", ""]
    L += ["Every figure is computed by psbench from the events the runs recorded. A cell is the mean ± the "
          "half-width of its 95% confidence interval over seeds (Student's t; no interval with one seed), over "
          "the completed runs only; – means the figure does not apply or nothing was measured.", ""]
    if not_done:
        diverged = sum(1 for r in not_done if r.status == "diverged")
        L += [f"**{len(not_done)} of {len(runs)} runs did not complete** ({DAGGER}"
              f"{f'; {diverged} of them diverged' if diverged else ''}): they are listed under "
              f"[Incomplete and failed runs](#incomplete-and-failed-runs) and left out of the means.", ""]
    short = in_short(aggs)
    if short:
        L += ["## In short", ""] + short + [""]
    if (sweep or {}).get("claims") in claims.KNOWN:
        L += claims.section(sweep["claims"], slices(aggs), md_table)
    L += failure_rate.section(aggs, out, md_table)  # a sweep over a failure process's rate
    L += ["## Findings", "", "Generated from the numbers below; a difference is called significant when Welch's "
          "t-test gives p < 0.05.", ""]
    L += diverged_findings(aggs)
    L += findings(aggs, target) or ["- no completed runs: nothing to compare."]
    word, goal = metric_word(aggs), target_text(aggs, target)
    L += ["", "## Results", "", f"### {word.capitalize()} and throughput", ""]
    L += [md_table([{"configuration": a.label, "runs": runs_cell(a),
                     f"final {word}": metric_cell(a, word),
                     f"time to {goal} (s)": target_cell(a),
                     "samples/s": fmt_est("samples_per_s", a.estimates["samples_per_s"]),
                     "goodput (samples/s)": fmt_est("goodput", a.estimates["goodput"]),
                     "staleness (mean)": fmt_est("staleness_mean", a.estimates["staleness_mean"]),
                     "staleness (p99)": fmt_est("staleness_p99", a.estimates["staleness_p99"])} for a in aggs]), ""]
    L += throughput_precision(aggs)
    L += ["### Failure and recovery", ""]
    L += [md_table([{"configuration": a.label, "faults": kills_cell(a.config, a.completed),
                     **{METRIC_BY_KEY[k].title: fmt_est(k, a.estimates[k])
                        for k in ("ettr", "detection_latency_s", "recovery_s", "lost_steps", "idle_s", "unplanned_failures",
                                  "checkpoint_overhead_pct", "buffered_updates")}} for a in aggs]), ""]
    L += setback_section(aggs)
    with_ref = [a for a in aggs if a.reference]
    if with_ref:
        by_label = {a.label: a for a in aggs}
        L += [f"### {word.capitalize()} against the no-kill reference", ""]
        rows = []
        for a in with_ref:
            ref = by_label[a.reference]
            mean, rmean = a.estimates["final_metric"].mean, ref.estimates["final_metric"].mean
            rows.append({"configuration": a.label, "reference": ref.label,
                         f"final {word}": metric_cell(a, word),
                         f"reference {word}": metric_cell(ref, word),
                         f"{word} lost": NA if mean is None or rmean is None else _signed(a.metric.drop(rmean, mean)),
                         "significant at 95%?": welch(ref.values["final_metric"], a.values["final_metric"]).text()})
        L += [md_table(rows), ""]
    L += ["<details><summary>What the figures mean</summary>", ""]
    L += [f"- **{m.title}**: {m.doc}." for m in METRICS]
    L += ["", "</details>", ""]
    L += [f"## {word.capitalize()} over time", ""]
    if plots:
        for title, path in plots:
            L += [f"![{word} over time: {title}]({path.name})", ""]
        L += ["One line per configuration: the mean over its completed seeds; the band is the 95% confidence "
              "interval across seeds; vertical lines mark the kills at their mean time over seeds (black when "
              "every configuration in the plot has the same kills, else in the colour of each).", ""]
    else:
        L += [f"(no completed run recorded a {word} timeline)", ""]
    L += outage.section(aggs, out, md_table, fmt_est)
    L += cost_section(aggs, pricing, target)
    L += ["## Incomplete and failed runs", ""]
    if not_done:
        L += [md_table([{"run": r.rel, "configuration": r.label, "seed": r.seed if r.seed is not None else NA,
                         "status": r.status.upper(), "reason": r.reason or NA} for r in not_done]), ""]
        L += ["`failed`: the run ended but its training did not complete; `diverged`: its model went non-finite "
              "(a NaN or inf in a gradient, the weights or the metric; the reason says where and after what); "
              "`incomplete`: no summary.json (the launcher was killed or crashed); `broken`: its files cannot be "
              "read.", ""]
    else:
        L += ["None: every run completed.", ""]
    L += configuration_section(aggs, seeds, src)
    L += machine_section(machine, machine_note)
    L += reproduce_section(sweep, runs, src)
    L += ["## All runs", ""]
    L += [md_table([{"run": r.rel, "configuration": r.label, "seed": r.seed if r.seed is not None else NA,
                     "status": r.status if r.status == "completed" else f"{r.status.upper()} {DAGGER}",
                     f"final {word}": fmt_value("final_metric", r.metrics.get("final_metric"))
                     + ("" if word != "metric" else f" ({r.metric.name})"),
                     f"time to {goal} (s)": fmt_value("time_to_target_s", r.metrics.get("time_to_target_s")),
                     "samples/s": fmt_value("samples_per_s", r.metrics.get("samples_per_s")),
                     "recovery (s)": fmt_value("recovery_s", r.metrics.get("recovery_s")),
                     "lost steps": fmt_value("lost_steps", r.metrics.get("lost_steps")),
                     "wall (s)": NA if not (r.summary or {}).get("wall_s") else f"{r.summary['wall_s']:.0f}"}
                    for r in runs]), ""]
    L += ["Machine-readable: [results.json](results.json), [results.csv](results.csv).", ""]
    return "\n".join(L)


def cost_section(aggs: list[ConfigAggregate], pricing: Pricing, target: float | None) -> list[str]:
    L = ["## Cost", ""]
    if pricing.used:
        for inst in pricing.used.values():
            gpu = f", {inst.gpus} x {inst.gpu}" if inst.gpus else ""
            L += [f"Priced as **{inst.name}** ({inst.provider}, {inst.vcpus} vCPU{gpu}, ${inst.usd_per_hour:g}/hour "
                  f"= ${inst.usd_per_vcpu_s:.3g} per vCPU-second; source: {inst.source}) from the price table "
                  f"`{pricing.path.name}` ({pricing.note})."]
        L += ["", "Rule: every rank (PS, replicas, evaluator, workers) holds one vCPU (a GPU rank: one GPU) for "
              "the run's training seconds; rank-seconds by role are means over the completed seeds. Edit "
              "`benchmarks/prices.toml` or pass `--prices`/`--instance` to `psbench report` to price it "
              "otherwise.", ""]
    rows = []
    for a in aggs:
        rank_s = a.record()["rank_s"]
        row = {"configuration": a.label}
        row.update({f"{r} rank-s": NA if rank_s[r] is None else f"{rank_s[r]:.0f}" for r in ROLES})
        total = sum(v for v in rank_s.values() if v is not None) if any(v is not None for v in rank_s.values()) else None
        row["total rank-s"] = NA if total is None else f"{total:.0f}"
        row["$ per run"] = fmt_est("cost_usd", a.estimates["cost_usd"])
        row[f"$ to reach {target_text(aggs, target)}"] = fmt_est("cost_to_target_usd", a.estimates["cost_to_target_usd"])
        row["$ per 1M samples kept"] = fmt_est("usd_per_m_kept_samples", a.estimates["usd_per_m_kept_samples"])
        rows.append(row)
    return L + [md_table(rows), ""]


def configuration_section(aggs: list[ConfigAggregate], seeds: list, src: Path) -> list[str]:
    configs = [a.config for a in aggs if a.label != "unknown"]
    L = ["## Configuration", ""]
    if not configs:
        return L + ["(no readable config.json)", ""]
    varying = naming.varying_keys(configs)
    common = {k: v for k, v in naming.identity(configs[0]).items() if k not in varying}
    common["seeds"] = ", ".join(map(str, seeds))
    if configs[0].get("data_dir"):
        common["data_dir"] = configs[0]["data_dir"]
    L += ["Shared by every run:", "", md_table([{"setting": k, "value": json.dumps(v) if isinstance(v, (list, dict))
                                                 else str(v)} for k, v in sorted(common.items())]), ""]
    if varying:
        L += ["What distinguishes the configurations:", ""]
        L += [md_table([{"configuration": a.label, **{k: json.dumps(a.config.get(k)) if isinstance(a.config.get(k), list)
                                                     else str(a.config.get(k)) for k in varying}}
                        for a in aggs if a.label != "unknown"]), ""]
    if (src / "sweep.toml").exists():
        L += ["<details><summary>The sweep file</summary>", "", "```toml", (src / "sweep.toml").read_text().rstrip(),
              "```", "", "</details>", ""]
    return L


def machine_section(machine: dict, note: str) -> list[str]:
    L = ["## Machine", "", f"_{note[0].upper() + note[1:]}._", ""]
    rows = [{"": "cores", "value": machine.get("cores")}, {"": "CPU", "value": machine.get("cpu")},
            {"": "memory (GiB)", "value": machine.get("memory_gib")}, {"": "GPU", "value": machine.get("gpu")},
            {"": "OS", "value": machine.get("os")}, {"": "host", "value": machine.get("host")},
            {"": "recorded", "value": machine.get("recorded")}]
    L += [md_table(rows), "", "## Library versions", ""]
    L += [md_table([{"library": k, "version": v} for k, v in (machine.get("versions") or {}).items()]), ""]
    return L


def reproduce_section(sweep: dict | None, runs: list[RunRecord], src: Path) -> list[str]:
    L = ["## Reproduce", ""]
    planned = {}
    if sweep:
        L += ["The whole sweep (re-running it resumes: finished runs are skipped; delete the sweep directory to "
              "start over):", "", "```sh", sweep.get("command", ""), "```", ""]
        planned = {r["slug"]: r["command"] for r in sweep.get("runs", [])}
    lines = []
    for r in runs:
        slug = r.path.name.removesuffix(".partial")
        cmd = planned.get(slug) or r.command
        if not cmd and (r.path / "command.txt").exists():
            cmd = "# mpirun line: " + (r.path / "command.txt").read_text().strip()
        lines.append(f"# {r.rel}\n{cmd or '# (no command recorded)'}")
    L += [f"<details><summary>Each run on its own ({len(runs)})</summary>", "", "```sh", "\n".join(lines), "```",
          "", "</details>", ""]
    return L


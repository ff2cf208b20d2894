"""Reports and comparisons: confidence intervals against a known sample, a report of
a folder with broken and unfinished runs, `compare` on fixed summaries. The run
directories here are written by the test (no MPI), so every number is known."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from conftest import psbench


# ---------------------------------------------------------------- statistics

def test_ci95_of_a_known_sample():
    from launch.analysis.stats import mean_ci, t_quantile

    est = mean_ci([1, 2, 3, 4, 5])
    assert est.mean == 3 and est.n == 5
    assert t_quantile(5) == pytest.approx(2.7764, abs=1e-4)
    # s = sqrt(2.5), half-width = t(0.975, 4) * s / sqrt(5)
    assert est.half_width == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-5)
    assert est.half_width == pytest.approx(1.9632, abs=1e-4)
    assert (est.low, est.high) == pytest.approx((3 - 1.96324, 3 + 1.96324), abs=1e-4)
    one = mean_ci([0.8])
    assert one.mean == 0.8 and one.half_width is None and one.n == 1
    assert mean_ci([None, float("nan"), 2.0, 4.0]).mean == 3.0
    assert mean_ci([]).n == 0


def test_welch_against_hand_computed_values():
    from launch.analysis.stats import welch

    # means 3 and 5, variances 2.5 and 2.5, n = 5: t = -2, df = 8, two-sided p = 0.0805
    t = welch([1, 2, 3, 4, 5], [3, 4, 5, 6, 7])
    assert t.p == pytest.approx(0.08052, abs=1e-4) and t.significant is False
    assert welch([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]).significant is True
    assert welch([0.8], [0.7, 0.75]).text() == "n/a (n=1)"
    assert welch([1.0, 1.0], [1.0, 1.0]).significant is False


# ---------------------------------------------------------------- fabricated run directories

def write_run(folder: Path, mode: str, seed: int, acc: float, kills: int = 0, summary: str | dict | None = "ok",
              evaluator: bool = True) -> Path:
    """A run directory as the launcher leaves it: config.json, events, and a summary.json
    (``summary``: "ok", None for none, or raw text)."""
    from psmodes.config import RunConfig

    folder.mkdir(parents=True)
    cfg = RunConfig(benchmark="synthetic", mode=mode, duration_s=20.0, seed=seed, evaluator=evaluator,
                    kill_ps=["10s"] if kills else [], run_dir=str(folder))
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    (folder / "events").mkdir()
    t0 = 1_000_000.0
    ps = [{"t": t0, "ev": "train_start", "who": "ps", "t0_ms": t0 * 1000}]
    if mode == "checkpoint":
        ps += [{"t": t0 + i, "ev": "checkpoint_start", "who": "ps", "version": 100 * i, "copy_s": 0.01,
                "waited_s": 0.01} for i in (1, 2, 3, 4, 5)]
    (folder / "events" / "ps.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ps))
    timeline = [[0.0, 0, 0.1], [5.0, 100, 0.5], [10.0 + seed, 200, 0.72], [20.0, 400, acc]]
    if summary is None:
        return folder
    if isinstance(summary, str) and summary != "ok":
        (folder / "summary.json").write_text(summary)
        return folder
    s = {"summary_version": 1, "benchmark": "synthetic", "mode": mode, "workers": 2, "seed": seed,
         "completed": True, "exit_reason": "completed", "final_metric": acc, "metric_timeline": timeline,
         "samples_per_s": 1000.0 + 10 * seed, "steps": 400, "train_s": 20.0, "wall_s": 30.0,
         "kills": [{"t_s": 10.0, "pid": 1, "host": "h", "role": "ps", "at": "10s"}] if kills else [],
         "detections": [{"latency_s": 0.05}] if kills else [],
         "recoveries": [{"mode": mode, "recovery_s": 2.0 + seed, "lost_steps": 10 * seed, "idle_s": 1.0,
                         "buffered_updates": 0}] if kills else []}
    if isinstance(summary, dict):
        s.update(summary)
    (folder / "summary.json").write_text(json.dumps(s))
    return folder


@pytest.fixture
def fake_sweep(tmp_path):
    root = tmp_path / "sweep"
    runs = root / "runs"
    accs = {"none": [0.80, 0.82, 0.84], "checkpoint": [0.76, 0.78, 0.80]}
    for mode, values in accs.items():
        for seed, acc in enumerate(values):
            write_run(runs / f"{mode}-s{seed}", mode, seed, acc, kills=0 if mode == "none" else 1)
    # one of each kind of trouble, all of configuration checkpoint
    write_run(runs / "checkpoint-s3", "checkpoint", 3, 0.5, kills=1, summary='{"summary_version": 1, "bench')
    write_run(runs / "checkpoint-s4.partial", "checkpoint", 4, 0.5, kills=1, summary=None)
    write_run(runs / "checkpoint-s5", "checkpoint", 5, 0.5, kills=1,
              summary={"completed": False, "exit_reason": "watchdog: the run exceeded its deadline"})
    return root


def test_report_renders_and_marks_broken_runs(fake_sweep, tmp_path):
    out = tmp_path / "report"
    proc = psbench("report", str(fake_sweep), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = (out / "report.md").read_text()
    # every run is there; the three bad ones are marked and out of the means
    assert "**3 of 9 runs did not complete**" in text
    section = text.split("## Incomplete and failed runs")[1].split("##")[0]
    for rel, status in (("runs/checkpoint-s3", "BROKEN"), ("runs/checkpoint-s4.partial", "INCOMPLETE"),
                        ("runs/checkpoint-s5", "FAILED")):
        row = next(ln for ln in section.splitlines() if f"| {rel} " in ln)
        assert status in row, row
    assert "summary.json unreadable" in section and "unfinished sweep run" in section and "watchdog" in section
    assert "| 3/6 †" in text  # checkpoint: 3 of its 6 runs completed
    # mean ± CI over the three completed seeds: 0.78 ± t(0.975,2)*0.02/sqrt(3) = 0.050
    row = next(ln for ln in text.splitlines() if ln.startswith("| checkpoint-kills1 ") and "0.780" in ln)
    assert "0.780 ± 0.050" in row
    assert "0.820 ± 0.050" in text  # none
    # samples/s 1000, 1010, 1020 in both: ± t(0.975,2)*10/sqrt(3) = 24.8 of 1010, 2.5 %
    assert "Samples/s precision: the widest 95% interval is ±2.5% of its mean" in text
    assert "2 of 2 configurations are within ±10%" in text
    # checkpoint overhead: 5 x (0.01 + 0.01) s over 20 s of training = 0.5 %
    assert "0.50 ± 0.00" in text or "| 0.50 " in text
    # the findings come from the numbers: sd 0.02 on both sides, means 0.04 apart over 3 seeds each:
    # t = 0.04 / sqrt(2 * 0.02**2 / 3) = 2.449, df = 4, two-sided p = 0.0705
    findings = text.split("## Findings")[1].split("## Results")[0]
    assert "**checkpoint-kills1** ended 0.040 worse than the no-kill reference none-kills0 (accuracy 0.820 → 0.780)" in findings
    assert "the difference is not significant at 95% (p = 0.070, Welch's t-test)" in findings
    assert (out / "accuracy.png").exists() and "![accuracy over time" in text
    for section_title in ("## Cost", "## Configuration", "## Machine", "## Library versions", "## Reproduce"):
        assert section_title in text
    results = json.loads((out / "results.json").read_text())
    ck = next(c for c in results["configs"] if c["label"] == "checkpoint-kills1")
    assert ck["runs"] == 6 and ck["completed"] == 3
    assert ck["metrics"]["final_metric"]["values"] == [0.76, 0.78, 0.80]
    assert len(results["runs"]) == 9
    assert {r["status"] for r in results["runs"]} == {"completed", "broken", "incomplete", "failed"}
    assert (out / "results.csv").read_text().count("\n") == 10


def test_report_of_a_folder_without_runs_is_one_line(tmp_path):
    proc = psbench("report", str(tmp_path), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "holds no runs" in proc.stderr and "Traceback" not in proc.stderr
    proc = psbench("report", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "not a directory" in proc.stderr


# ---------------------------------------------------------------- compare

def rows(markdown: str) -> list[list[str]]:
    out = []
    for line in markdown.splitlines():
        if line.startswith("|") and not line.startswith("|:"):
            out.append([c.strip() for c in line.strip("|").split("|")])
    return out


def test_compare_two_fixed_summaries(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    base = {"completed": True, "exit_reason": "completed", "train_s": 20.0,
            "kills": [{"t_s": 7.0, "role": "ps"}]}
    (a / "summary.json").write_text(json.dumps({**base, "mode": "checkpoint", "final_metric": 0.80,
        "metric_timeline": [[0, 0, 0.1], [5, 100, 0.6], [10, 200, 0.75], [20, 400, 0.8]],
        "samples_per_s": 1500.0, "detections": [{"latency_s": 0.05}],
        "recoveries": [{"recovery_s": 8.0, "lost_steps": 40, "idle_s": 9.5, "buffered_updates": 0}]}))
    (b / "summary.json").write_text(json.dumps({**base, "mode": "chain", "final_metric": 0.78,
        "metric_timeline": [[0, 0, 0.1], [5, 100, 0.65], [8, 160, 0.71], [20, 420, 0.78]],
        "samples_per_s": 1600.0, "detections": [{"latency_s": 0.04}],
        "recoveries": [{"recovery_s": 0.6, "lost_steps": 0, "idle_s": 0.5, "buffered_updates": 0}]}))
    proc = psbench("compare", str(a / "summary.json"), str(b / "summary.json"), "--out", str(tmp_path / "c.md"))
    assert proc.returncode == 0, proc.stderr
    assert "## A: checkpoint vs B: chain" in proc.stdout
    assert rows(proc.stdout) == [
        ["metric", "A", "B", "B − A", "significant at 95%?"],
        ["final accuracy", "0.800 (n=1)", "0.780 (n=1)", "-0.020", "n/a (n=1)"],
        ["time to target (s)", "10.0 (n=1)", "8.0 (n=1)", "-2.0", "n/a (n=1)"],
        ["samples/s", "1500 (n=1)", "1600 (n=1)", "+100", "n/a (n=1)"],
        ["detection (s)", "0.05 (n=1)", "0.04 (n=1)", "-0.01", "n/a (n=1)"],
        ["recovery (s)", "8.00 (n=1)", "0.60 (n=1)", "-7.40", "n/a (n=1)"],
        ["lost steps", "40.0 (n=1)", "0.0 (n=1)", "-40.0", "n/a (n=1)"],
        ["worker idle (s)", "9.50 (n=1)", "0.50 (n=1)", "-9.00", "n/a (n=1)"],
        ["unplanned failures", "0.0 (n=1)", "0.0 (n=1)", "0.0", "n/a (n=1)"],
        ["buffered updates", "0.0 (n=1)", "0.0 (n=1)", "0.0", "n/a (n=1)"],
    ]
    assert (tmp_path / "c.md").read_text().strip() == proc.stdout.strip()


def test_compare_two_reports_tests_significance(fake_sweep, tmp_path):
    first = psbench("report", str(fake_sweep), "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    for c in results["configs"]:  # B: the same runs, 0.05 more accurate everywhere
        fa = c["metrics"]["final_metric"]
        fa["values"] = [round(v + 0.05, 4) for v in fa["values"]]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(results))
    proc = psbench("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    sections = proc.stdout.split("## ")[1:]
    assert [s.splitlines()[0] for s in sections] == ["none-kills0", "checkpoint-kills1"]
    acc = next(r for r in rows(sections[1]) if r[0] == "final accuracy")
    # +0.05 with a standard deviation of 0.02 over 3 seeds each: t = 3.06, df = 4, p = 0.0375
    assert acc[1:4] == ["0.780 ± 0.050 (n=3)", "0.830 ± 0.050 (n=3)", "+0.050"]
    assert acc[4] == "yes (p = 0.038)"
    same = next(r for r in rows(sections[1]) if r[0] == "samples/s")
    assert same[3] == "0" and same[4] == "no (p = 1.000)"


def test_compare_bad_input_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    proc = psbench("compare", str(tmp_path / "x.json"), str(tmp_path / "missing"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- setbacks and outages

def test_setbacks_of_a_known_timeline():
    """A dip after the first failure, regained later; none after the second; a loss metric."""
    from launch.analysis.setbacks import setbacks

    timeline = [[0, 0, 0.2], [1, 10, 0.6], [2, 20, 0.7], [5, 30, 0.3], [6, 40, 0.65], [7, 50, 0.72],
                [9, 60, 0.8], [10, 70, 0.81]]
    faults = [{"kind": "kill", "planned": True, "t_s": 2.5}, {"kind": "hang", "planned": True, "t_s": 8.0}]
    recs = [{"fault": 0, "lost_steps": 0, "buffered_updates": 300, "recovery_s": 2.4}]
    first, second = setbacks(timeline, faults, recs, samples_per_update=64, replay="paper")
    assert (first["before"], first["worst"], first["worst_t_s"], first["dip"]) == (0.7, 0.3, 5.0, 0.4)
    assert first["regained_s"] == 4.5  # 7.0 (0.72 >= 0.7) - 2.5
    assert first["lost_samples"] == 0 and first["outage_s"] == 2.4
    assert first["cause"] == "replay of 300 buffered updates (policy paper)"
    assert second["dip"] == 0.0 and second["regained_s"] == 0.0 and second["cause"] is None
    (loss,) = setbacks([[0, 0, 2.0], [1, 5, 1.5], [3, 9, 1.9], [4, 12, 1.6]],
                       [{"kind": "kill", "t_s": 1.5}], [{"fault": 0, "lost_steps": 3}], 32, higher_is_better=False)
    assert loss["dip"] == 0.4 and loss["regained_s"] is None and loss["lost_samples"] == 96
    assert loss["cause"] == "restart from a state 3 steps old"


def test_plots_break_lines_where_nothing_was_evaluated():
    import numpy as np

    from launch.analysis.plots import in_gap, outage_spans, with_gaps

    t = np.array([0.0, 1.0, 2.0, 3.0, 9.0, 10.0])
    assert in_gap(np.array([2.5, 5.0, 8.9, 9.5]), t).tolist() == [False, True, True, False]
    tt, yy = with_gaps(t, [1, 2, 3, 4, 5, 6])
    assert np.isnan(yy[4]) and tt[4] == 6.0 and len(tt) == 7
    spans = outage_spans([[{"fault": 0, "t_s": 3.0, "outage_s": 2.0}], [{"fault": 0, "t_s": 5.0, "outage_s": 4.0}]])
    assert spans == [(4.0, 7.0)]


def test_outage_section_finds_where_stateless_overtakes_checkpoint(tmp_path):
    """Checkpoint loses more the longer the PS is down, stateless does not: the report's outage
    section draws both against the outage and says from which delay stateless ends above."""
    root = tmp_path / "outage"
    for seed in range(3):
        write_run(root / f"none-s{seed}", "none", seed, 0.82)
        for delay in (0, 10, 40):
            for mode, acc in (("checkpoint", 0.80 - delay / 200), ("stateless", 0.77 + delay / 1000)):
                # the target (0.70) at 10.5 s + seed for stateless, later the longer checkpoint's PS is down
                reached = 10.0 + seed + (0.5 if mode == "stateless" else delay / 10)
                run = write_run(root / f"{mode}-d{delay}-s{seed}", mode, seed, acc + 0.002 * seed, kills=1,
                                summary={"setbacks": [{"fault": 0, "t_s": 10.0, "dip": 0.1 if mode == "stateless" else 0.0,
                                                       "outage_s": 2.0 + delay}],
                                         "metric_timeline": [[0.0, 0, 0.1], [5.0, 100, 0.5], [reached, 200, 0.72],
                                                             [20.0, 400, acc + 0.002 * seed]],
                                         "recoveries": [{"mode": mode, "recovery_s": 2.0 + delay, "lost_steps": 0,
                                                         "idle_s": 1.0, "buffered_updates": 0}]})
                cfg = json.loads((run / "config.json").read_text())
                cfg["restart_delay_s"] = float(delay)
                (run / "config.json").write_text(json.dumps(cfg))
    proc = psbench("report", str(root), "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    section = text.split("## Outage length")[1].split("\n## ")[0]
    assert "**stateless** ends above checkpoint from a restart delay of 10 s on" in section, section
    # 0.5 s behind at delay 0, 0.5 s ahead at 10 (not significant over 3 seeds), 3.5 s ahead at 40 (significant)
    assert ("**stateless** reaches the target before checkpoint from a restart delay of 10 s on (outage 12.0 s "
            "against checkpoint's 12.0 s; 0.5 s sooner there; no (p = ") in section, section
    assert "significant at 1 of the 2 delays from there" in section.split("reaches the target")[1], section
    assert (tmp_path / "r" / "outage-metric_lost.png").exists() and (tmp_path / "r" / "outage-worst_dip.png").exists()
    # the findings compare the modes at each delay, not every configuration alone
    assert "restart-delay10" in text.split("## Findings")[1].split("## Results")[0]


def test_claims_section_gives_a_verdict_per_claim(tmp_path):
    """A sweep that names the study opens its report with the study's claims checked: here
    stateless ends significantly above checkpoint and chain (supported), checkpoint and chain
    never dip (no setback: not significant), and the costs to target are equal on average but
    vary by +-9 % over seeds, wider than the 10 % that "similar" allows (not significant)."""
    root = tmp_path / "paper-setting"
    for seed in range(3):
        write_run(root / f"none-s{seed}", "none", seed, 0.82)
        for mode, acc, dip in (("checkpoint", 0.70, 0.0), ("chain", 0.72, 0.0), ("stateless", 0.80, 0.2)):
            write_run(root / f"{mode}-s{seed}", mode, seed, acc + 0.003 * seed, kills=1,
                      summary={"setbacks": [{"fault": 0, "t_s": 10.0, "dip": dip, "outage_s": 2.0}]})
    (root / "sweep.json").write_text(json.dumps({"name": "paper-setting", "claims": "arXiv 2406.05546", "runs": []}))
    proc = psbench("report", str(root), "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    section = text.split("## Claims of arXiv 2406.05546, checked")[1].split("\n## ")[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ")][1:]
    accuracy, *setbacks, cost = rows
    assert "stateless-kills1 - chain-kills1: final accuracy +0.080" in accuracy and "**supported**" in accuracy, accuracy
    assert len(setbacks) == 2 and all("not significant" in r or "contradicted" in r for r in setbacks), setbacks
    # lost steps at one decimal (95.3), not 95.33333333333333
    assert all("lost steps " in r and not re.search(r"\d\.\d{4,}", r) for r in setbacks), setbacks
    assert "cost to target +0.0000" in cost and "(+0.0 % of checkpoint's)" in cost, cost
    assert cost.rstrip(" |").endswith("not significant"), cost
    assert text.index("## Claims of") < text.index("## Findings")


def test_a_sweep_naming_an_unknown_study_is_refused(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('name = "x"\nclaims = "arXiv 0000.00000"\n[base]\nbenchmark = "synthetic"\n')
    proc = psbench("sweep", str(sweep), "--dry-run")
    assert proc.returncode == 2 and "knows the claims of arXiv 2406.05546" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_training_throughput_leaves_the_outages_out():
    """Steps of 64 samples every 0.1 s for 10 s; a kill at 3 s recovered after 2 s (stateless went
    on computing meanwhile, so steps were logged there too), a pause ridden out at 7 s."""
    from launch.analysis.summary import training_throughput

    t0 = 100.0
    steps = [{"t": t0 + 0.1 * i, "samples": 64} for i in range(1, 101)]
    faults = [{"_t": t0 + 3.0, "kind": "kill"}, {"_t": t0 + 7.0, "kind": "hang"}]
    rate = training_throughput(steps, t0, 10.0, faults, [{"fault": 0, "recovery_s": 2.0}])
    assert rate == pytest.approx(80 * 64 / 8.0, rel=0.02)  # 80 steps outside [3, 5) in 8 s
    # a death never recovered: the rest of the run is outage
    assert training_throughput(steps, t0, 10.0, faults[:1], []) == pytest.approx(30 * 64 / 3.0, rel=0.04)


def test_a_report_of_a_metric_to_minimise_ranks_lower_as_better(tmp_path):
    """gpt-tiny's perplexity: the table names it, the time to --target counts a fall to it, and the
    findings call the lower final value the better one."""
    root = tmp_path / "lm"
    for mode, finals in (("none", [5.0, 5.2, 5.4]), ("checkpoint", [6.0, 6.2, 6.4])):
        for seed, final in enumerate(finals):
            timeline = [[0.0, 0, 250.0], [5.0, 100, 12.0], [10.0 + seed, 200, 8.0], [20.0, 400, final]]
            write_run(root / f"{mode}-s{seed}", mode, seed, final, kills=0 if mode == "none" else 1,
                      summary={"benchmark": "gpt-tiny", "metric": {"name": "perplexity", "higher_is_better": False},
                               "metric_timeline": timeline})
    proc = psbench("report", str(root), "--out", str(tmp_path / "r"), "--target", "10")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    assert "scored by perplexity, target 10" in text and "| final perplexity " in text
    assert "**checkpoint-kills1** ended 1.000 worse than the no-kill reference" in text, text
    assert "10.0 ± " in text  # every seed fell to 8 <= 10 at 10 + seed s
    assert (tmp_path / "r" / "perplexity.png").exists()
    bad = psbench("report", str(root), "--out", str(tmp_path / "r2"), "--target", "-1")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_an_option_the_others_determine_is_left_out_of_the_names():
    """The workloads sweep: each benchmark brings its own optimizer, which names nothing more."""
    from launch.analysis.naming import labels
    from psmodes.config import RunConfig

    own = [RunConfig(benchmark=b, optimizer=o, mode=m).to_dict()
           for b, o in (("fmnist-cnn", "sgd"), ("gpt-tiny", "adamw")) for m in ("checkpoint", "chain")]
    assert labels(own) == ["checkpoint-benchmark-fmnist-cnn", "chain-benchmark-fmnist-cnn",
                           "checkpoint-benchmark-gpt-tiny", "chain-benchmark-gpt-tiny"]
    crossed = own + [RunConfig(benchmark="gpt-tiny", optimizer="sgd", mode="chain").to_dict()]
    assert len(set(labels(crossed))) == 5 and "chain-benchmark-gpt-tiny-optimizer-sgd" in labels(crossed)

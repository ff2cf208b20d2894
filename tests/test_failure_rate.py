"""The MTBF study's section of a report (launch/analysis/failure_rate.py), on made-up run records (the real
ones are reports/mtbf's)."""
from __future__ import annotations

import json

import pytest

from launch.analysis.collect import collect
from launch.analysis.failure_rate import Study, section
from launch.analysis.report import md_table
from psmodes.config import RunConfig


def _run(root, mode, mean, seed, ettr, completed=True, train_s=120.0):
    run = root / f"{mode}-{mean}-s{seed}"
    run.mkdir()
    cfg = RunConfig(benchmark="fmnist-cnn", mode=mode, duration_s=120.0, seed=seed, failures=[f"ps:exp:{mean}"],
                    run_dir=str(run))
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    (run / "summary.json").write_text(json.dumps({
        "completed": completed, "exit_reason": "completed" if completed else "no copy survives", "mode": mode,
        "seed": seed, "ettr": ettr, "goodput": 1000.0,
        "ettr_parts": {"train_s": train_s, "productive_s": ettr * train_s}}))


def test_the_study_puts_each_variant_against_the_rate_and_counts_a_dead_run_over_its_planned_time(tmp_path):
    for seed, (a, b) in enumerate(((0.80, 0.84), (0.82, 0.86))):
        _run(tmp_path, "checkpoint", "10s", seed, a)
        _run(tmp_path, "checkpoint", "40s", seed, b)
        _run(tmp_path, "chain", "40s", seed, 0.99 - seed * 0.005)
        _run(tmp_path, "chain", "10s", seed, 0.98, completed=False, train_s=12.0 * (1 + seed))  # died 12 s, 24 s in
    study = Study(collect(tmp_path)[1])
    assert study.rates == [10.0, 40.0] and sorted(study.variants) == ["chain", "checkpoint"]
    ettr, goodput = study.figures("chain", 10.0)
    assert ettr == pytest.approx([0.098, 0.196]) and goodput == pytest.approx([100.0, 200.0])  # of 120 s planned
    text = "\n".join(section(collect(tmp_path)[1], tmp_path, md_table))
    assert "| chain      | 0.147 ± 0.623 (0/2)" in text, text
    assert "MTBF 10 s: **checkpoint** has the highest ETTR, checkpoint (0.810 ± 0.127); next chain" in text, text
    assert "MTBF 40 s: **chain** has the highest ETTR" in text
    assert "checkpoint leads at MTBF 10 s, chain at 40 s" in text
    assert "Runs ended early at MTBF 10 s: chain (no copy survives)" in text
    assert (tmp_path / "ettr-mtbf.png").exists()


def test_a_sweep_without_a_failure_rate_axis_has_no_such_section(tmp_path):
    _run(tmp_path, "checkpoint", "10s", 0, 0.8)
    _run(tmp_path, "chain", "10s", 0, 0.9)
    assert section(collect(tmp_path)[1], tmp_path, md_table) == []

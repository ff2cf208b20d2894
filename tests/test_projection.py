"""The projection to a cluster's scale (launch/analysis/projection.py, psbench project): the simulation
agrees with the closed forms where they apply, is reproducible from its seed, and the command turns a
committed perf measurement into a report; bad input is one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import psbench

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rollback, interval, outage", [(False, None, 600.0), (True, 1800.0, 600.0),
                                                        (True, 600.0, 60.0), (True, 3600.0, 1200.0)])
def test_the_simulation_agrees_with_the_closed_form(rollback, interval, outage):
    from launch.analysis.projection import Recovery, Target, closed_form, project

    target = Target(gpus=16384)  # a failure every 1.8 h, as published
    rec = Recovery("m", outage_s=outage, rollback=rollback, interval_s=interval)
    p = project(rec, target, seed=3)
    assert p.failures >= 1000
    assert abs(p.ettr - closed_form(rec, target.mtbf_s)) < 0.01, (p, closed_form(rec, target.mtbf_s))


def test_the_simulation_is_reproducible_and_its_spares_and_shape_count():
    from launch.analysis.projection import Recovery, Target, project

    rec = Recovery("m", outage_s=600.0, spare_outage_s=10.0, refill_s=600.0, rollback=True, interval_s=1800.0)
    assert project(rec, Target(gpus=16384), seed=1) == project(rec, Target(gpus=16384), seed=1)
    assert project(rec, Target(gpus=16384), seed=1) != project(rec, Target(gpus=16384), seed=2)
    alone, spared = project(rec, Target(gpus=16384), seed=1), project(rec, Target(gpus=16384, spares=2), seed=1)
    assert spared.ettr > alone.ettr + 0.05  # a spare takes 10 s instead of 600
    # a Weibull node process at a random age fails at the same mean rate (not all infant failures at once)
    bursty = project(rec, Target(gpus=16384, shape=0.7), seed=1)
    assert 0.8 < bursty.failures / alone.failures < 1.25


def test_young_daly_is_near_the_simulated_best_interval():
    from launch.analysis.projection import Recovery, Target, project, young_daly_s

    target, pause = Target(gpus=16384), 30.0

    def effective(interval):
        rec = Recovery("m", outage_s=300.0, rollback=True, interval_s=interval, overhead=pause / interval)
        return project(rec, target, seed=0).effective

    best = young_daly_s(pause, target.mtbf_s)  # about 630 s
    assert effective(best) > effective(best / 4) and effective(best) > effective(best * 4)


def test_project_turns_the_committed_perf_run_into_a_report(tmp_path):
    proc = psbench("project", "--from", "reports/perf", "--gpus", "1024,131072", "--spares", "0,1",
                   "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "projection.json").read_text())
    modes = {r["mode"] for r in result["rows"]}
    assert {"checkpoint K=100", "checkpoint at Young/Daly", "chain K=100 R=1", "stateless", "hybrid K=100 R=1"} <= modes
    assert all(0 <= r["ettr"] <= 1 and r["failures_simulated"] >= 1000 for r in result["rows"])
    by = {(r["gpus"], r["mode"]): r for r in result["rows"] if r["spares"] == 0}
    assert by[(131072, "checkpoint at Young/Daly")]["ettr"] < by[(1024, "checkpoint at Young/Daly")]["ettr"]
    report = (tmp_path / "report.md").read_text()
    assert "## Findings" in report and "keeps the most" in report and (tmp_path / "ettr.png").stat().st_size > 0


@pytest.mark.parametrize("args, needle", [
    (["--from", "/nonexistent"], "no perf.json"),
    (["--from", "reports/perf", "--gpus", "0"], "positive whole numbers"),
    (["--from", "reports/perf", "--gpus", "many"], "whole numbers"),
    (["--from", "reports/perf", "--gpu-mttf-h", "-1"], "--gpu-mttf-h must be positive"),
    (["--from", "reports/perf", "--step", "soon"], "not a duration"),
])
def test_bad_project_input_is_one_line(tmp_path, args, needle):
    proc = psbench("project", *args, "--out", str(tmp_path))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr, proc.stderr


def test_a_runs_own_failure_times_are_replayed_with_the_injectors_deferral():
    from launch.analysis.projection import Recovery, replay_arrivals

    rec = Recovery("m", outage_s=2.0)
    # 11 s falls in the outage of 10 s: the injector's kill lands at its end (12 s) and starts another
    assert replay_arrivals(rec, [10.0, 11.0, 50.0], 100.0) == pytest.approx(0.94)
    # a node failure instead starts the outage again from 11 s
    assert replay_arrivals(rec, [10.0, 11.0, 50.0], 100.0, defer=False) == pytest.approx(0.95)
    # a spare serves the first failure only when none is refilled
    spare = Recovery("m", outage_s=2.0, spare_outage_s=0.5, refill_s=float("inf"))
    assert replay_arrivals(spare, [10.0, 50.0], 100.0, spares=1) == pytest.approx(1 - 2.5 / 100)
    # after the horizon: nothing
    assert replay_arrivals(rec, [150.0], 100.0) == 1.0


def test_validation_sets_measured_runs_beside_their_prediction(tmp_path):
    """The plumbing of --validate on made-up run records (the real ones are the MTBF study's)."""
    from launch.analysis.collect import collect
    from launch.experiments.project import ended_early, measured_from, validate
    from psmodes.config import RunConfig

    for seed, ettr in ((0, 0.80), (1, 0.84), (2, 0.82)):
        run = tmp_path / f"checkpoint-s{seed}"
        run.mkdir()
        cfg = RunConfig(benchmark="fmnist-cnn", mode="checkpoint", checkpoint_every=20, duration_s=120.0, seed=seed,
                        failures=["ps:exp:20s"], run_dir=str(run))
        (run / "config.json").write_text(json.dumps(cfg.to_dict()))
        (run / "summary.json").write_text(json.dumps({"completed": True, "exit_reason": "completed", "ettr": ettr,
                                                      "mode": "checkpoint", "seed": seed,
                                                      "ettr_parts": {"train_s": 120.0},
                                                      "faults": [{"t_s": 30.0, "planned": True}]}))
    dead = tmp_path / "chain-s0"  # a run that lost every copy: listed, not compared
    dead.mkdir()
    cfg = RunConfig(benchmark="fmnist-cnn", mode="chain", duration_s=120.0, failures=["ps:exp:20s"], run_dir=str(dead))
    (dead / "config.json").write_text(json.dumps(cfg.to_dict()))
    (dead / "summary.json").write_text(json.dumps({"completed": False, "exit_reason": "no copy survives", "ettr": 0.9,
                                                   "mode": "chain", "seed": 0}))
    aggs = collect(tmp_path)[1]
    assert [(e["ended_early"], e["reason"]) for e in ended_early(aggs)] == [(1, "no copy survives")]
    (row,) = validate(measured_from(ROOT / "reports" / "perf"), aggs)
    # the same runs as a sweep keeps them (reports/mtbf/finished.tar.xz), through the command
    from launch.experiments.kept import KeptArchive

    archive = KeptArchive(tmp_path / "kept" / "finished.tar.xz")
    for run in (tmp_path / "checkpoint-s0", tmp_path / "checkpoint-s1", tmp_path / "checkpoint-s2", dead):
        archive.add(run)
    proc = psbench("project", "--from", "reports/perf", "--gpus", "1024", "--spares", "0", "--validate",
                   str(archive.path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "1 of 1 configurations are within" in report or "0 of 1 configurations are within" in report, report
    assert "Not compared, runs that did not complete" in report and "no copy survives" in report
    # on the runs' own failure times: one spawned replacement's outage (2.35 s in reports/perf) and the work
    # since the newest checkpoint (K=20 steps) at most
    assert 1 - 3.0 / 120 < row["same_arrivals"] < 1 - 2.3 / 120
    assert row["same_difference"] == pytest.approx(row["same_arrivals"] - 0.82, abs=1e-3)
    assert row["mode"] == "checkpoint" and row["mtbf_s"] == 20.0 and row["n"] == 3
    assert row["measured"] == pytest.approx(0.82) and 0.5 < row["predicted"] < 1.0
    assert row["within_0.03"] == (abs(row["predicted"] - 0.82) <= 0.03)

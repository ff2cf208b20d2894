"""psbench perf: the measurement runs end to end (real mpirun, the real Horovod
reference trainer, real kills) and its report holds every section; the derived
figures (paired ratios, the memory floor) are computed as documented. The
targets themselves are not asserted here: speed lives in the benchmark's
report, not in timed tests on a noisy machine."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from conftest import OPEN_MPI_CRASH, mpirun_log, open_mpi_crashed

from launch.analysis.perfreport import (_memory_section, _misses_section, _scale_section, _throughput_section,
                                       _working_share, floor_seconds, render, targets, throughput_ratios)

PSBENCH = [sys.executable, "-m", "launch.cli"]


def test_a_waiting_ranks_share_of_a_core_is_its_training_where_recorded():
    """The PS evaluates the test set at the end where there is no evaluator (1.4 s of a 10.6 s perf run):
    the no-spinning figure takes its share up to the end of training, else from its start event on."""
    u = {"cpu_s": 5.0, "wall_s": 14.0, "run_cpu_s": 2.0, "run_wall_s": 10.0, "train_cpu_s": 0.27, "train_wall_s": 9.0}
    assert _working_share(u) == 0.27 / 9.0
    assert _working_share({k: v for k, v in u.items() if not k.startswith("train")}) == 0.2
    assert _working_share({"cpu_s": 5.0, "wall_s": 14.0}) == 5.0 / 14.0


def test_ratios_are_paired_within_a_repetition():
    results = {"throughput": [
        {"variant": "reference", "rep": 0, "samples_per_s": 1000.0},
        {"variant": "none", "rep": 0, "samples_per_s": 900.0, "completed": True},
        {"variant": "stateless", "rep": 0, "samples_per_s": 450.0, "completed": True},
        {"variant": "reference", "rep": 1, "samples_per_s": 500.0},
        {"variant": "none", "rep": 1, "samples_per_s": 500.0, "completed": True},
        {"variant": "stateless", "rep": 1, "samples_per_s": 500.0, "completed": True},
        {"variant": "stateless", "rep": 2, "samples_per_s": 500.0, "completed": True},  # no none in rep 2: unpaired
    ]}
    ratios = throughput_ratios(results)
    assert ratios["stateless"] == [0.5, 1.0]
    assert ratios["reference"] == [0.9, 1.0]


def test_scale_points_are_paired_within_their_point_and_reported_beside_the_base():
    results = {"plan": {"workers": 2, "steps": 800, "benchmark": "fmnist-cnn"}, "throughput": [
        {"variant": "reference", "rep": 0, "samples_per_s": 1000.0},
        {"variant": "none", "rep": 0, "samples_per_s": 950.0, "completed": True}], "scale": []}
    for rep, (ref, none, chain) in enumerate(((400.0, 200.0, 100.0), (300.0, 300.0, 240.0))):
        for variant, sps in (("reference", ref), ("none", none), ("chain K=1 R=1", chain)):
            results["scale"].append({"point": "synthetic 100M, 2 workers", "steps": 30, "variant": variant, "rep": rep,
                                     "samples_per_s": sps, "completed": True,
                                     "ps_timing": {"recv_s": 0.08, "apply_s": 0.05, "send_s": 0.0001}})
    text = "\n".join(_scale_section(results))
    base, big = [line for line in text.splitlines() if line.startswith("| fmnist-cnn") or line.startswith("| synthetic")]
    assert "0.950" in base and "| 800 " in base
    # none / Horovod: 0.5 and 1.0 (median 0.75); chain / none: 0.5 and 0.8 (median 0.65); not 200/300 unpaired
    assert "0.750 (0.500-1.000)" in big and "0.650 (0.500-0.800)" in big and "| 30 " in big
    assert "80.00 / 50.00 / 0.10" in big


def test_hybrids_backup_is_its_leaders_rss_over_nones_against_its_bound():
    def run(variant, rss):
        return {"variant": variant, "rep": 0, "samples_per_s": 1.0, "usage": {"worker0": {"maxrss_mb": rss}},
                "ps_timing": {"numel": 1 << 20}}
    results = {"plan": {}, "throughput": [run("none", 600.0), run("hybrid K=100 R=1", 900.0)]}
    text = "\n".join(_memory_section(results))
    assert "**hybrid K=100 R=1**" in text and "adds +300 MiB" in text and "264 vectors of 4.0 MiB, is 1056 MiB" in text


def test_floor_counts_bytes_moved_per_phase():
    fl = floor_seconds(1_000_000, bandwidth=8e9)
    assert fl["recv"] == pytest.approx(2 * 4e6 / 8e9)
    assert fl["apply"] == pytest.approx(3 * 4e6 / 8e9)
    assert fl["send"] == pytest.approx(2 * 4e6 / 8e9)
    assert floor_seconds(1_000_000, 8e9, sends_weights=False)["send"] == 0  # the workers apply the update
    assert floor_seconds(1_000_000, 8e9, receives=False)["recv"] == 0  # read in place from the leader's mailbox


def test_a_missed_target_says_by_how_much():
    results = {"plan": {"workers": 2}, "throughput": [
        {"variant": "reference", "rep": 0, "samples_per_s": 1000.0},
        {"variant": "none", "rep": 0, "samples_per_s": 800.0, "completed": True,
         "ps_timing": {"recv_s": 0.001, "apply_s": 0.001, "send_s": 0.001}}]}
    row = next(r for r in targets(results) if r["figure"].startswith("PS overhead"))
    assert row["measured"] == "0.800"
    assert row["status"].startswith("MISSED by 0.150")
    assert "3.0 ms" in row["breakdown"]


def test_the_idle_class_ps_overhead_is_paired_with_the_reference_and_answers_the_default_miss():
    results = {"plan": {"workers": 2}, "throughput": []}
    for rep, (ref, none, idle) in enumerate(((1000.0, 900.0, 960.0), (800.0, 720.0, 760.0), (1000.0, 880.0, 980.0))):
        results["throughput"] += [
            {"variant": "reference", "rep": rep, "samples_per_s": ref, "leader": {"compute_s": 0.008, "allreduce_s": 0.002}},
            {"variant": "none", "rep": rep, "samples_per_s": none, "completed": True,
             "leader": {"compute_s": 0.011, "allreduce_s": 0.002, "exchange_s": 0.0001, "step_s": 0.011},
             "usage": {"ps": {"train_cpu_s": 0.6, "train_wall_s": 9.0}}},
            {"variant": "none, PS idle-class", "rep": rep, "samples_per_s": idle, "completed": True,
             "usage": {"ps": {"train_cpu_s": 0.5, "train_wall_s": 9.0}}}]
    rows = targets(results)
    default = next(r for r in rows if r["figure"] == "PS overhead (none / Horovod)")
    idle = next(r for r in rows if r["figure"].startswith("PS overhead, PS in the idle class"))
    # per repetition 0.96, 0.95, 0.98 (median 0.96); unpaired medians would give 960 / 1000
    assert default["status"].startswith("MISSED") and idle["measured"] == "0.960" and idle["status"] == "met"
    assert "0.056 of a core" in idle["breakdown"] and "(0.067 at normal priority)" in idle["breakdown"]
    text = "\n".join(_misses_section(results, rows))
    assert "With the PS in the idle scheduling class (`--ps-priority idle`)" in text and "is 0.960 (met): the PS's CPU time was the gap" in text


def test_the_control_headers_own_latency_is_the_workers_wait_less_the_leaders_part():
    leader = {"compute_s": 0.020, "allreduce_s": 0.002, "exchange_s": 0.001, "step_s": 0.025,
              "ctrl_s": 0.0012, "ctrl_wait_s": 0.0015}  # worker1 waits 1.5 ms, the leader's part is 1.2
    results = {"plan": {"workers": 2}, "throughput": [
        {"variant": "reference", "rep": 0, "samples_per_s": 3200.0, "leader": {"compute_s": 0.018, "allreduce_s": 0.001}},
        {"variant": "none", "rep": 0, "samples_per_s": 2560.0, "completed": True, "leader": leader,
         "ps_timing": {"recv_s": 0.001, "apply_s": 0.001, "send_s": 0.0001}}]}
    text = "\n".join(_misses_section(results, targets(results)))
    assert "the header's own latency: 0.30 ms" in text


def test_the_throughput_table_shows_each_variants_tail_of_slow_steps():
    results = {"plan": {"workers": 2}, "throughput": [
        {"variant": "reference", "rep": 0, "samples_per_s": 1000.0, "leader": {"step_s": 0.010, "mean_step_s": 0.0101}},
        {"variant": "none", "rep": 0, "samples_per_s": 900.0, "leader": {"step_s": 0.010, "mean_step_s": 0.0112}},
        {"variant": "stateless", "rep": 0, "samples_per_s": 900.0}]}  # a run without its steps: no figure
    lines = [line for line in _throughput_section(results, [])[2].splitlines() if not line.startswith("|:")]
    header, *rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines]
    tail = {row[0]: row[header.index("mean / median step")] for row in rows}
    assert tail == {"Horovod, no PS (reference)": "1.010", "none": "1.120", "stateless": "n/a"}


def test_a_session_of_some_sections_leaves_the_others_out_of_the_report(tmp_path):
    results = {"plan": {"workers": 2, "sections": ["throughput"]}, "throughput": [
        {"variant": "reference", "rep": 0, "samples_per_s": 1000.0},
        {"variant": "none", "rep": 0, "samples_per_s": 960.0, "completed": True}]}
    text = render(results, tmp_path, [])
    assert "## Throughput without failures" in text and "| 0.960 " in text
    assert "## Failure costs" not in text and "## PS time per update" not in text
    assert "## Failure costs" in render({**results, "plan": {"workers": 2}}, tmp_path, [])  # older perf.json: all


def test_a_miss_within_the_noise_is_not_blamed_on_replication():
    runs = []
    for rep, ratio in enumerate((0.95, 0.96, 1.02)):  # median 0.96 < 0.98; the range reaches it
        runs += [{"variant": "none", "rep": rep, "samples_per_s": 1000.0, "ps_timing": {"after_s": 1e-5}},
                 {"variant": "chain K=100 R=1", "rep": rep, "samples_per_s": 1000.0 * ratio,
                  "ps_timing": {"after_s": 1e-5}}]
    results = {"plan": {"workers": 2}, "throughput": runs}
    rows = targets(results)
    assert next(r for r in rows if r["figure"] == "chain K=100 R=1 / none")["status"].startswith("MISSED")
    text = "\n".join(_misses_section(results, rows))
    assert "**chain K=100 R=1**" in text and "0.950-1.020" in text and "noise" in text
    assert "**chain K=1**" not in text  # strict chain's explanation is for K=1 only


@pytest.mark.parametrize("args, message", [
    (["--reps", "0"], "--reps must be a positive integer"),
    (["--sizes", "big"], "--sizes 'big'"),
    (["--workers", "1"], "--workers must be at least 2"),
    (["--from", "/nonexistent"], "no perf.json there"),
    (["--quikc"], "did you mean --quick"),
    (["--faults", "kill,meteor"], "--faults 'kill,meteor': choose from"),
    (["--variants", "none,chain K=1"], "--variants 'none,chain K=1': choose from none, checkpoint-k100"),
])
def test_bad_input_is_one_line_and_status_2(args, message, tmp_path):
    out = subprocess.run(PSBENCH + ["perf", "--out", str(tmp_path / "r"), *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_quick_perf_measures_every_section(tmp_path):
    report, runs = tmp_path / "report", tmp_path / "runs"
    out = subprocess.run(PSBENCH + ["perf", "--quick", "--out", str(report), "--runs", str(runs)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((runs / "perf.json").read_text())
    by = {(r["variant"], r["rep"]): r for r in results["throughput"]}
    assert by[("reference", 0)]["samples_per_s"] > 0
    # each run's tail of slow steps: the reference's iterations, the leader's steps
    for variant in ("reference", "none"):
        leader = by[(variant, 0)]["leader"]
        assert 0 < leader["step_s"] and 0 < leader["mean_step_s"], (variant, leader)
    speed = results["cpu_speed"]  # the machine's own speed, probed on every core before the runs
    assert speed["cores"] >= 1 and 0 < speed["min"] <= speed["median"] <= speed["max"], speed
    for variant in ("none", "chain K=1 R=1"):
        run = by[(variant, 0)]
        assert run["completed"] and run["samples_per_s"] > 0, variant
        # every process reported its CPU time and peak RSS; the PS its per-update timing
        assert {"ps", "worker0", "worker1"} <= set(run["usage"]), variant
        assert run["ps_timing"]["updates"] == 60 and run["ps_timing"]["recv_s"] > 0, variant
    assert {"replica1"} <= set(by[("chain K=1 R=1", 0)]["usage"])
    # the waiting ranks' share of a core is also taken without the start-up (the interpreter, torch, MPI)
    ps = by[("none", 0)]["usage"]["ps"]
    assert 0 < ps["run_wall_s"] < ps["wall_s"] and 0 < ps["run_cpu_s"] < ps["cpu_s"], ps
    # and the PS's share up to the end of its training, without its final evaluation of the test set
    assert 0 < ps["train_wall_s"] < ps["run_wall_s"] and 0 < ps["train_cpu_s"] < ps["run_cpu_s"], ps
    for f in results["failures"]:
        if open_mpi_crashed(runs / f["run"]):  # the known Open MPI 5.0.11 crash (conftest.run_ok repeats such runs)
            warnings.warn(f"Open MPI crashed in {f['run']} ({OPEN_MPI_CRASH}): its failure figures are not checked")
            continue
        assert f["completed"], f"{f['run']}: {f['exit_reason']}\n" + mpirun_log(runs / f["run"])
        assert f["faults"] == 1 and len(f["detections"]) == 1 and f["unplanned"] == 0, f
        assert f["kills"] == (1 if f["kind"] == "kill" else 0), f
        assert f["recoveries"] and f["recoveries"][0]["recovery_s"] > 0, f
    (hang,) = [f for f in results["failures"] if f["kind"] == "hang"]  # quick: checkpoint only
    (spare,) = [f for f in results["failures"] if f["repair"] == "spare"]  # quick: checkpoint only
    assert spare["mode"] == "checkpoint" and spare["usage"]["spare0"]["wait_s"] > 0, spare
    assert 2.9 <= hang["detections"][0] <= 3.0 + 0.5, hang  # the suspicion, at --suspect-after
    # a worker killed and replaced by a spare (issue #46): the group trains on short, then whole again
    (workers,) = results["worker_failures"]
    assert workers["completed"] and workers["faults"] == 1, workers
    assert len(workers["short_s"]) == 1 and len(workers["replaced_s"]) == 1, workers
    assert 0 < workers["short_s"][0] < workers["replaced_s"][0], workers
    # the scale point: 4 workers on the synthetic model, the reference and none paired
    scale = {r["variant"]: r for r in results["scale"]}
    assert set(scale) == {"reference", "none"} and scale["reference"]["samples_per_s"] > 0
    assert scale["none"]["completed"] and {"ps", "worker3"} <= set(scale["none"]["usage"])
    assert scale["none"]["ps_timing"]["numel"] > 900_000  # the 1M synthetic MLP, not the CNN
    assert [s["params"] for s in results["scaling"]] == [200_000, 2_000_000]
    assert all(s["ps_timing"]["recv_s"] > 0 and s["checkpoint_write_s"] > 0 for s in results["scaling"])
    mem = {m["policy"]: m for m in results["memory"]}
    # paper aggregates in place: one model-sized vector whatever the count; sequential keeps at most the bound
    assert mem["paper"]["vectors"] == 1 and mem["paper"]["buffered"] > 1
    assert 1 <= mem["sequential"]["vectors"] <= 32
    assert mem["sequential"]["buffered"] == mem["sequential"]["vectors"]  # the dropped ones are counted apart
    text = (report / "report.md").read_text()
    for heading in ("## Targets", "## Throughput without failures", "## Throughput at scale", "## Failure costs",
                    "## Worker failures", "## PS time per update against the memory-bandwidth floor", "## Memory",
                    "## CPU time per rank"):
        assert heading in text
    assert "PS overhead (none / Horovod)" in text and "Quick mode" in text
    assert "The machine's speed before the runs" in text and "mean / median step" in text
    assert "hung PS: detection p50" in text and "hang (SIGSTOP, fenced)" in text
    assert "checkpoint recovery p50 with a spare" in text and "waiting spare" in text
    assert (report / "throughput.png").stat().st_size > 0 and (report / "scaling.png").stat().st_size > 0
    # the report renders again from perf.json alone
    again = subprocess.run(PSBENCH + ["perf", "--from", str(runs), "--out", str(tmp_path / "again")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "report.md").read_text() == text


def test_variants_pick_the_throughput_runs_by_their_slugs():
    import argparse

    from launch.experiments.perf import add_perf_parser, plan_from_args

    parser = argparse.ArgumentParser()
    add_perf_parser(parser.add_subparsers())
    plan = plan_from_args(parser.parse_args(["perf", "--variants", "chain-k100-r1, none", "--reps", "7"]))
    assert plan.variants == ["none", "chain K=100 R=1"] and plan.reps == 7
    assert plan_from_args(parser.parse_args(["perf", "--variants", "stateless"])).variants == ["none", "stateless"]
    assert "none, blocking" in plan_from_args(parser.parse_args(["perf"])).variants  # default: all


def test_sigterm_ends_the_session_not_just_one_run(tmp_path):
    """SIGTERM during a throughput run stops psbench perf (exit 130) with that run's MPI job; what was
    measured is saved (seen: a SIGTERM ended one run and the session went on with the next)."""
    import os
    import signal
    import time

    from conftest import ROOT

    from launch.experiments.chaos import leftover_processes

    runs = tmp_path / "runs"
    # the synthetic model, 1000 steps and --quick's short speed probe: the reference before none-r0 takes
    # seconds, not the 140 s of its 3000 CNN steps on a slower machine (2026-12-05); none-r0 is still
    # starting its other ranks when worker0's events appear
    proc = subprocess.Popen(PSBENCH + ["perf", "--quick", "--only", "throughput", "--variants", "none", "--reps", "2",
                                       "--benchmark", "synthetic", "--steps", "1000", "--runs", str(runs),
                                       "--out", str(tmp_path / "report")],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not list(runs.glob("none-r0/events/worker0.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert not (runs / "none-r1").exists() and not (runs / "reference-r1").exists()
    results = json.loads((runs / "perf.json").read_text())  # saved, readable
    assert all(r["variant"] != "none" for r in results["throughput"])  # the stopped run is not a result
    assert leftover_processes((runs / "none-r0").resolve()) == []

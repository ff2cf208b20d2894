"""psbench under a real one-node Slurm cluster (tests/slurm_cluster.py: munged,
slurmctld, slurmd, started here and torn down after): ``psbench slurm --submit``
of a run with a PS kill that a spare covers, and a job-array sweep with one combined report."""
from __future__ import annotations

import json
import re

import pytest

from conftest import psbench
from slurm_cluster import SlurmCluster, SlurmUnavailable

SYN = ["--benchmark", "synthetic", "--model-params", "200000", "--workers", "2", "--eval-interval", "1s",
       "--restart-delay", "2s"]


@pytest.fixture(scope="module")
def slurm():
    cluster = SlurmCluster(cpus=8)
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        cluster.stop()
        pytest.skip(f"no Slurm here: {exc}")
    yield cluster
    cluster.stop()


def submitted(proc, pattern: str) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    m = re.search(pattern, proc.stdout)
    assert m, proc.stdout
    return list(m.groups())


@pytest.mark.slow
def test_sbatch_run_with_a_ps_kill(slurm, tmp_path):
    out = tmp_path / "run"
    proc = psbench("slurm", *SYN, "--mode", "checkpoint", "--checkpoint-every", "20", "--duration", "14s",
                   "--kill-ps", "5s", "--kill-via", "srun", "--spares", "1", "--out", str(out), "--nodes", "1",
                   "--time", "00:05:00",
                   "--script", str(tmp_path / "job.sbatch"), "--submit", "--quiet", env=slurm.env)
    (job,) = submitted(proc, r"submitted job (\d+)")
    states = slurm.wait_jobs([job], timeout=150)
    assert states[job] == "COMPLETED", (states, slurm.logs())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"], summary["exit_reason"]
    (kill,) = summary["kills"]
    assert kill["role"] == "ps" and kill["how"] == "srun"  # killed through srun --overlap
    assert summary["detections"] and 0 < summary["detections"][0]["latency_s"] < 10
    (rec,) = summary["recoveries"]
    assert rec["mode"] == "checkpoint" and rec["recovery_s"] > 0
    placement = json.loads((out / "placement.json").read_text())
    # from the allocation: 4 ranks and the spare, which takes the PS's place (no slot for a spawn)
    assert placement["hosts"] == [f"{slurm.node}:5"] and placement["ranks"][-1]["role"] == "spare0"
    (start,) = [json.loads(line) for line in (out / "events" / "ps-gen1.jsonl").read_text().splitlines()
                if '"start"' in line]
    assert start["spare"] == "spare0"
    report = (out / "report.md").read_text()
    assert "kill" in report.lower()


@pytest.mark.slow
def test_job_array_sweep_gives_one_report(slurm, tmp_path):
    sweep = tmp_path / "arr.toml"
    sweep.write_text('name = "arr"\nseeds = [0, 1, 2]\n[base]\nbenchmark = "synthetic"\nmodel-params = 20000\n'
                     'steps = 60\neval-interval = "1s"\n')
    out, reports = tmp_path / "sweep", tmp_path / "reports"
    proc = psbench("slurm", str(sweep), "--out", str(out), "--report-dir", str(reports), "--array",
                   "--tasks-per-node", "4", "--time", "00:05:00", "--script", str(tmp_path / "arr.sbatch"),
                   "--submit", env=slurm.env)
    array, report_job = submitted(proc, r"submitted job array (\d+) \(3 tasks\) and report job (\d+)")
    states = slurm.wait_jobs([array, report_job], timeout=240)
    assert states[report_job] == "COMPLETED", (states, slurm.logs())
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["none-s0", "none-s1", "none-s2"], runs
    results = json.loads((reports / "results.json").read_text())
    assert len(results["runs"]) == 3
    assert all(r["status"] == "completed" for r in results["runs"]), results["runs"]
    assert len(results["configs"]) == 1 and results["configs"][0]["completed"] == 3  # one configuration, 3 seeds
    assert (reports / "report.md").exists()

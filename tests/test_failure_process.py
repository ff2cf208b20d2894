"""Failures as a process (psmodes/failure_process.py): the syntax, the draw (the same arrival times in
every mode: common random numbers), and a real run whose PS fails at the drawn times."""
from __future__ import annotations

import pytest

from conftest import events, psbench, run_ok


def cfg(**kw):
    from psmodes.config import RunConfig

    return RunConfig(**{"benchmark": "synthetic", "duration_s": 600.0, **kw})


def test_every_mode_meets_the_same_arrival_times_and_the_seed_decides():
    from psmodes.failure_process import draw

    runs = {mode: draw(cfg(mode=mode, failures=["ps:exp:30s"])) for mode in ("checkpoint", "chain", "stateless")}
    times = {mode: [f["t_s"] for f in d] for mode, d in runs.items()}
    assert times["checkpoint"] == times["chain"] == times["stateless"] and len(times["chain"]) > 5
    gaps = [b - a for a, b in zip([0.0] + times["chain"], times["chain"])]
    assert 10 < sum(gaps) / len(gaps) < 90  # exponential, mean 30 s
    assert [f["t_s"] for f in draw(cfg(mode="chain", failures=["ps:exp:30s"], seed=1))] != times["chain"]
    assert draw(cfg(mode="chain", failures=["ps:exp:30s"], seed=1, failure_seed=0)) == runs["chain"]
    mixed = draw(cfg(mode="chain", spares=1, failures=["any:weibull:20s:0.7:hang"]))
    assert {f["target"] for f in mixed} <= {"ps", "replica", "evaluator", "spare"} and len({f["target"] for f in mixed}) > 1
    assert {f["kind"] for f in mixed} == {"hang"}
    # elastic workers (async here): a worker is a target too, of any as well (the last one alive when it is due)
    elastic = draw(cfg(mode="chain", consistency="async", workers=3, failures=["any:exp:5s"]))
    assert "worker" in {f["target"] for f in elastic}


@pytest.mark.parametrize("spec, needle", [
    ("worker:exp:20s", "elastic workers"),
    ("ps:exp", "write TARGET"),
    ("ps:poisson:3s", "unknown distribution"),
    ("ps:weibull:3s:-1", "shape must be a positive"),
    ("ps:exp:3s:melt", "unknown kind"),
    ("replica:exp:3s", "needs --mode chain or hybrid"),
    ("ps:exp:0s", "must be positive"),
])
def test_a_bad_failure_spec_is_one_line(spec, needle):
    proc = psbench("run", "--failures", spec, "--duration", "60s", "--dry-run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr, proc.stderr


def test_the_ps_fails_at_the_drawn_times_and_the_run_reports_its_ettr(tmp_path):
    out, s = run_ok(tmp_path, "--benchmark", "synthetic", "--model-params", "200000", "--workers", "2",
                    "--no-evaluator", "--mode", "checkpoint", "--checkpoint-every", "20", "--restart-delay", "0",
                    "--failures", "ps:exp:4s", "--failure-seed", "3", "--duration", "14s")
    drawn = s["failure_schedule"]
    assert len(drawn) >= 2 and all(f["target"] == "ps" and f["kind"] == "kill" for f in drawn), drawn
    kills = events(out, "kill")
    assert len(kills) >= 2
    # each failure at its time (a later one waits for a live replacement to kill)
    assert abs(s["kills"][0]["t_s"] - drawn[0]["t_s"]) < 0.5, (s["kills"], drawn)
    assert 0 < s["ettr"] < 1 and s["goodput"] > 0, (s["ettr"], s["ettr_parts"])
    assert s["ettr_parts"]["outage_s"] > 0

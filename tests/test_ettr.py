"""ETTR and goodput (launch/analysis/ettr.py) from hand-written event streams with known answers."""
from __future__ import annotations

import json

import pytest

T0 = 1000.0


def run_dir(tmp_path, mode: str, streams: dict[str, list[dict]]):
    from psmodes.config import RunConfig

    RunConfig(benchmark="synthetic", mode=mode, duration_s=20, run_dir=str(tmp_path)).save(tmp_path / "config.json")
    ev = tmp_path / "events"
    ev.mkdir()
    for name, records in streams.items():
        (ev / f"{name}.jsonl").write_text("".join(json.dumps({"who": name, **r}) + "\n" for r in records))
    return tmp_path


def steps(first_t: float, last_t: float, first_version: int, every: float = 0.1, samples: int = 64) -> list[dict]:
    n = round((last_t - first_t) / every) + 1
    return [{"t": T0 + first_t + i * every, "ev": "step", "version": first_version + i, "applied": True,
             "samples": samples} for i in range(n)]


def common(final_t: float, version: int) -> dict[str, list[dict]]:
    return {"ps": [{"t": T0, "ev": "train_start", "t0_ms": T0 * 1000}],
            "evaluator": [{"t": T0 + final_t, "ev": "eval", "final": True, "value": 0.8, "ps_step": version,
                           "t_snapshot": T0 + final_t}]}


def test_a_run_without_failures_is_all_productive(tmp_path):
    from launch.analysis.summary import summarize

    work = steps(0.1, 10.0, 1)  # 100 updates of 64 samples in 10 s
    s = summarize(run_dir(tmp_path, "none", {**common(10, 100), "worker0": work + [
        {"t": T0 + 10, "ev": "done", "completed": True, "version": 100}]}))
    assert s["ettr"] == 1.0
    assert s["goodput"] == pytest.approx(100 * 64 / 10.0)


def test_an_outage_and_lost_steps_are_not_productive(tmp_path):
    """Updates every 0.1 s; the PS killed at 4 s, the first update after it at 6 s, and the replacement
    resumed 10 versions back (a checkpoint): 2 s of outage and 10 x 0.1 s of lost compute in 10 s, so
    ETTR = (10 - 2 - 1) / 10; the final model holds version 70's updates (40 before the kill, 10 of
    them lost, then 40 more), so goodput = 70 x 64 / 10."""
    from launch.analysis.summary import summarize

    work = steps(0.1, 4.0, 1) + steps(6.1, 10.0, 31)  # versions 1-40, then 31-70 after the restore
    s = summarize(run_dir(tmp_path, "checkpoint", {
        **common(10, 70),
        "worker0": work + [{"t": T0 + 6.05, "ev": "recovered", "mode": "checkpoint", "lost_steps": 10, "idle_s": 2.0,
                            "buffered_updates": 0},
                           {"t": T0 + 10, "ev": "done", "completed": True, "version": 70}],
        "launcher": [{"t": T0 + 4, "ev": "kill", "t_kill": T0 + 4, "pid": 1, "host": "h", "role": "ps", "at": "4s"}]}))
    (rec,) = s["recoveries"]
    assert rec["recovery_s"] == pytest.approx(2.05) and rec["lost_steps"] == 10
    parts = s["ettr_parts"]
    assert parts["outage_s"] == pytest.approx(2.05, abs=0.01)
    assert parts["lost_compute_s"] == pytest.approx(1.0, rel=0.05)
    assert s["ettr"] == pytest.approx((10 - 2.05 - 1.0) / 10, abs=0.01)
    assert s["goodput"] == pytest.approx(70 * 64 / 10.0)


def test_a_death_never_recovered_is_outage_to_the_end(tmp_path):
    from launch.analysis.ettr import ettr, outage_windows

    faults = [{"_t": T0 + 4.0, "kind": "kill"}, {"_t": T0 + 6.0, "kind": "hang"}]  # the pause rode out
    assert outage_windows(T0, 10.0, faults, []) == [[T0 + 4.0, T0 + 10.0]]
    assert ettr(10.0, 6.0, 0, 0.1)["ettr"] == 0.4
    # a replacement killed before it took over: one outage from the first kill to the recovery after the second
    kills = [{"_t": T0 + 4.0, "kind": "kill"}, {"_t": T0 + 4.2, "kind": "kill"}]
    assert outage_windows(T0, 10.0, kills, [{"fault": 1, "recovery_s": 1.0}]) == [[T0 + 4.0, T0 + 5.2]]
    assert ettr(0.0, 0.0, 0, None) is None


def test_a_short_group_counts_its_lost_capacity_and_its_smaller_updates(tmp_path):
    """Three workers (96 samples an update, every 0.1 s); worker2 dies at 4 s and the group is made again
    at 4.1 s, with the first update after it at 4.2 s (0.2 s of outage); from then on two workers (64
    samples an update) until 10 s. ETTR = (10 - 0.2 - (1 - 2/3) x 5.8) / 10; goodput counts each update's
    own samples: 40 x 96 + 59 x 64 in 10 s."""
    from launch.analysis.summary import summarize
    from psmodes.config import RunConfig

    work = steps(0.1, 4.0, 1, samples=96) + steps(4.2, 10.0, 41, samples=64)  # versions 1-40, then 41-99
    d = run_dir(tmp_path, "checkpoint", {
        **common(10, 99),
        "worker0": work + [{"t": T0 + 4.1, "ev": "regrouped", "size": 2, "lost": ["worker2"]},
                           {"t": T0 + 4.2, "ev": "recovered", "mode": "checkpoint", "lost_steps": 0, "idle_s": 0.2,
                            "buffered_updates": 0},
                           {"t": T0 + 10, "ev": "done", "completed": True, "version": 99}],
        "launcher": [{"t": T0 + 4, "ev": "kill", "t_kill": T0 + 4, "pid": 1, "host": "h", "role": "worker2",
                      "at": "4s"}]})
    RunConfig(benchmark="synthetic", mode="checkpoint", duration_s=20, workers=3, run_dir=str(d)).save(d / "config.json")
    s = summarize(d)
    parts = s["ettr_parts"]
    assert parts["outage_s"] == pytest.approx(0.2, abs=0.01)
    assert parts["short_group_s"] == pytest.approx((1 - 2 / 3) * 5.8, abs=0.01)
    assert s["ettr"] == pytest.approx((10 - 0.2 - 5.8 / 3) / 10, abs=0.005)
    assert s["goodput"] == pytest.approx((40 * 96 + 59 * 64) / 10.0)


def test_the_cost_model_prices_the_samples_a_run_kept():
    """launch/analysis/cost.py: the run's price over the samples in its final model (goodput x training
    time): a run that kept half its samples costs twice as much per sample kept."""
    from types import SimpleNamespace

    from launch.analysis.cost import Pricing

    pricing = Pricing()
    rate = pricing.default_cpu.usd_per_vcpu_s

    def run(goodput):
        r = SimpleNamespace(rank_s={"ps": 100.0, "worker": 200.0}, device="cpu", summary={"train_s": 100.0},
                            metrics={"goodput": goodput, "time_to_target_s": None})
        pricing.price(r)
        return r.metrics

    full, half = run(1000.0), run(500.0)
    assert full["cost_usd"] == pytest.approx(300 * rate)  # three ranks for 100 s
    assert full["usd_per_m_kept_samples"] == pytest.approx(300 * rate / 0.1)  # 100,000 samples kept
    assert half["usd_per_m_kept_samples"] == pytest.approx(2 * full["usd_per_m_kept_samples"])
    assert run(None)["usd_per_m_kept_samples"] is None

"""The fault kinds (launch/faultkinds/): one registry that every list of kinds is read from, each kind's
declaration consistent with the options psbench run has, and a run's fault plan parsed once."""
from __future__ import annotations

import dataclasses

import pytest

from conftest import events


def test_every_list_of_kinds_is_the_registry():
    from launch.experiments import chaos, perf
    from launch.faultkinds import CHAOS_DEFAULT, CHAOS_KINDS, KINDS, OPTIONS, PERF_KINDS

    assert list(KINDS) == ["kill", "hang", "slow", "outside", "node", "partition"]
    # psbench chaos draws the registry's names, in its order (a seed draws what it drew before the registry);
    # a partition only when asked (it needs the PS on another host)
    assert list(CHAOS_KINDS) == ["kill", "hang", "pause", "slow", "outside", "node", "partition"]
    assert CHAOS_DEFAULT == ("kill", "hang", "pause", "slow", "outside", "node")
    parser = chaos.argparse.ArgumentParser()
    chaos.add_chaos_parser(parser.add_subparsers())
    assert parser.parse_args(["chaos", "--mode", "chain"]).kinds == ",".join(CHAOS_DEFAULT)
    assert perf.FAILURE_KINDS == tuple(PERF_KINDS) == ("kill", "hang", "slow", "outside")
    assert {o.field for o in OPTIONS} == {"kill_ps", "kill_replica", "kill_worker", "hang_ps", "hang_replica", "hang_worker",
                                          "slow_ps", "kill_node", "partition_ps"}


def test_each_kinds_options_are_run_options_and_every_fault_option_belongs_to_a_kind():
    from launch.faultkinds import OPTIONS
    from psmodes.config import RunConfig, config_options

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert {o.field for o in OPTIONS} <= fields
    # the faults group's options that schedule a fault by hand (AT specs) are exactly the kinds' options
    by_hand = {o.field for o in config_options() if o.group == "faults" and o.metavar and o.metavar.startswith("AT")}
    assert by_hand == {o.field for o in OPTIONS}


def test_the_plan_refuses_what_its_kind_refuses():
    from launch.faultkinds import plan_of
    from psmodes.config import ConfigError, RunConfig

    def plan(**kw):
        cfg = RunConfig(benchmark="synthetic", duration_s=20.0, **kw).validate()
        return plan_of(cfg)

    with pytest.raises(ConfigError, match="a kill has no length"):
        plan(kill_ps=["5s~1s"])
    with pytest.raises(ConfigError, match="--slow-ps '5s': write AT~DUR"):
        plan(slow_ps=["5s"])
    with pytest.raises(ConfigError, match="--kill-worker"):  # a worker's point named by its own option
        plan(kill_worker=["point:nowhere"])
    points = plan(hang_ps=["50%~1s"], kill_ps=["2s", "+10ms"], failures=["ps:exp:4s:hang"], failure_seed=3).points
    assert [p.kind for p in points if p.at_s == 10.0] == ["hang"] and points[-1].after_s == 0.01
    assert {p.kind for p in points if "exp" in p.spec} == {"hang"}
    assert plan(kill_ps=["5s"], hang_ps=["6s"], slow_ps=["7s~1s"]).replacements() == 2  # a slow phase needs none


def test_a_runs_fault_plan_is_parsed_once(tmp_path):
    """psbench run: the validation, the placement, the mpirun line and the injector share one parse.
    (600 steps: with 40 the run could end before the launcher's poll saw step 12, and the kill never came.)"""
    from launch import cli
    from launch.faultkinds import plan

    before = plan.PARSES
    rc = cli.main(["run", "--benchmark", "synthetic", "--model-params", "100000", "--workers", "2",
                   "--no-evaluator", "--mode", "checkpoint", "--checkpoint-every", "5", "--steps", "600",
                   "--kill-ps", "step:60", "--restart-delay", "0", "--quiet", "--no-report",
                   "--out", str(tmp_path / "run")])
    assert rc == 0
    assert plan.PARSES - before == 1
    (kill,) = events(tmp_path / "run", "kill", "launcher")
    assert kill["at"] == "step:60" and kill["role"] == "ps"


def test_two_fences_nobody_injected_are_two_unplanned_failures():
    """A fence is matched against the faults of a kind that can be fenced; the records of failures
    nobody injected, among them (an earlier fence's), are no kind of the registry (a real run with a
    hung tail crashed the summary here)."""
    from launch.analysis.faults import fault_records

    def fence(t, pid):
        return {"t": t, "ev": "fence", "who": "launcher", "t_fence": t, "pid": pid, "host": "h", "role": "replica1",
                "by": "ps", "t_suspect": t, "waited_s": 1.5}

    faults = fault_records([fence(3.0, 11), fence(6.0, 12)], lambda k: k["t_kill"], lambda t, who: t)
    assert [(f["kind"], f["pid"]) for f in faults] == [("unplanned", 11), ("unplanned", 12)]

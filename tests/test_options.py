"""Every `psbench run` option is declared once (psmodes.config.Option); the parser, the
mapping onto RunConfig, a sweep file's keys and a sweep's `psbench run` lines come from
those declarations. Pure unit tests: nothing is started."""
from __future__ import annotations

import dataclasses
import json

import pytest

from launch.driver.options import LAUNCHER_OPTIONS, fields_from_args, run_options, run_parser
from launch.experiments.sweep import option_argv
from psmodes.config import FORMAT_VERSION, ConfigError, RunConfig, config_options

# fields the launcher fills in itself (failure_schedule: --failures as drawn, psmodes/failure_process.py)
RESOLVED = {"hosts", "oversubscribe", "run_dir", "format_version", "failure_schedule"}


def test_every_field_is_an_option_or_resolved_by_the_launcher():
    declared = {o.field for o in config_options()}
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert fields - declared == RESOLVED
    assert {o.field for o in LAUNCHER_OPTIONS if o.field} <= fields
    flags = [o.flag for o in run_options().values()]
    assert len(flags) == len(set(flags)) == len(config_options()) + len(LAUNCHER_OPTIONS)


def test_the_command_lines_defaults_are_runconfigs():
    parsed = fields_from_args(run_parser().parse_args([]))
    assert parsed == {k: v for k, v in dataclasses.asdict(RunConfig()).items() if k not in RESOLVED}


def test_arguments_map_onto_fields():
    a = run_parser().parse_args(["--duration", "1.5m", "--no-evaluator", "--kill-ps", "10s", "--kill-ps=20s,30s",
                                 "--threads", "3", "--restart-delay", "0", "--deadline", "", "--lr", "0.1"])
    got = fields_from_args(a)
    assert got["duration_s"] == 90.0 and got["evaluator"] is False and got["threads_per_rank"] == 3
    assert got["kill_ps"] == ["10s", "20s,30s"] and got["restart_delay_s"] == 0.0 and got["deadline_s"] is None
    assert got["lr"] == 0.1 and got["eval_interval_s"] == 5.0
    with pytest.raises(ConfigError, match=r"--peer-timeout 'soon' is not a duration"):
        fields_from_args(run_parser().parse_args(["--peer-timeout", "soon"]))


@pytest.mark.parametrize("dest, value, argv", [
    ("workers", 3, ["--workers=3"]),
    ("no_evaluator", True, ["--no-evaluator"]),
    ("no_evaluator", False, []),
    ("kill_ps", ["10s", "", "33%,67%"], ["--kill-ps=10s", "--kill-ps=33%,67%"]),
    ("kill_ps", "20s", ["--kill-ps=20s"]),
    ("duration", "1m", ["--duration=1m"]),
    ("hosts", "a:2,b:2", ["--hosts=a:2,b:2"]),
])
def test_a_sweep_value_is_the_psbench_run_argument_of_its_declaration(dest, value, argv):
    options = run_options()
    assert option_argv(dest, value, "here", options) == argv
    parsed = vars(run_parser().parse_args(argv))[dest]
    expected = options[dest].cli_default if not argv else value
    if options[dest].kind == "list":
        expected = [v for v in ([value] if isinstance(value, str) else value) if v]
    assert parsed == expected


def test_old_config_json_loads_and_a_newer_one_is_refused_in_one_line(tmp_path):
    old = {k: v for k, v in RunConfig(steps=10).to_dict().items()
           if k not in ("kill_worker", "max_buffered", "format_version", "exchange")}  # fields added later
    path = tmp_path / "config.json"
    path.write_text(json.dumps(old))
    cfg = RunConfig.load(path)
    assert cfg.steps == 10 and cfg.kill_worker == [] and cfg.max_buffered == 256
    assert cfg.exchange == "blocking", "a run recorded before --exchange existed was blocking, not auto's choice"
    assert RunConfig(steps=10).validate().exchange == "pipelined", "auto is recorded resolved"
    path.write_text(json.dumps({**old, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ConfigError, match=rf"^run format version {FORMAT_VERSION + 1} is newer than this psbench"):
        RunConfig.load(path)
    path.write_text(json.dumps({**old, "format_version": "2"}))
    with pytest.raises(ConfigError, match=r"^run format version '2' is not a version number"):
        RunConfig.load(path)

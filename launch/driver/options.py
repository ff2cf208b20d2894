"""The options of ``psbench run``, turned into one validated :class:`RunConfig`
(also for ``psbench sweep``, which takes the same options per run and on its
command line, ``psbench slurm``, which passes them on, and ``psbench chaos``,
which shares a few). Bad input is a :class:`ConfigError`: one line, exit
status 2, before anything starts.

Each option is declared once (:class:`psmodes.config.Option`): on the
RunConfig field it sets, or below (:data:`LAUNCHER_OPTIONS`) when the launcher
resolves it itself. The parser, the mapping onto RunConfig
(:func:`config_from_args`), a sweep file's keys and the ``psbench run`` lines
a sweep prints (launch/experiments/sweep.py) all come from these declarations.
"""
from __future__ import annotations

import argparse
import difflib

from benchmarks import fmnist
from benchmarks.registry import absolute, get
from psmodes.config import GROUPS, ConfigError, Option, RunConfig, config_options

from ..faultkinds import plan_of
from ..remote.routes import is_local
from . import runtime
from .hosts import placement_of, resolve_hosts
from .mpirun import find_mpirun, mpirun_env
from .ulfm import supported


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """An unknown option is refused with the closest option of the sub-command suggested."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self
            for action in self._actions:
                if isinstance(action, argparse._SubParsersAction) and getattr(ns, "command", None) in action.choices:
                    parser = action.choices[ns.command]
            options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
            unknown = next((x.split("=", 1)[0] for x in extras if x.startswith("-")), None)
            close = difflib.get_close_matches(unknown, options, n=1, cutoff=0.6) if unknown else []
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return ns


# options the launcher resolves itself (the RunConfig field each determines, if any)
LAUNCHER_OPTIONS = (
    Option("--out", "execution", "run directory (default: runs/<benchmark>-<mode>-s<seed>-<time>)",
           field="run_dir", launcher=True),
    Option("--no-oversubscribe", "execution", "this machine only: no more ranks than cores (the default there "
           "is to oversubscribe)", field="oversubscribe", default=False, launcher=True),
    Option("--dry-run", "execution", "print the mpirun command line and exit", default=False, launcher=True),
    Option("--quiet", "execution", "no progress line", default=False, launcher=True),
    Option("--no-report", "execution", "no report.md and plot at the end (`psbench report DIR` renders one "
           "later); summary.json is written either way", default=False, launcher=True),
    Option("--hostfile", "clusters", "Open MPI hostfile (`host slots=N` a line); see hostfiles/", field="hosts",
           launcher=True),
    Option("--hosts", "clusters", "hosts and slots, e.g. node1:4,node2:4 (inside Slurm: the allocation by "
           "default)", field="hosts", launcher=True),
    Option("--oversubscribe", "clusters", "with hosts: allow more ranks than slots (never the default there)",
           field="oversubscribe", default=False, launcher=True),
)


def run_options() -> dict[str, Option]:
    """dest -> Option of every ``psbench run`` option, in the order of ``--help``: by group,
    the launcher's own first in each, then RunConfig's in field order."""
    ordered = sorted(LAUNCHER_OPTIONS + config_options(),
                     key=lambda o: (GROUPS.index(o.group), not o.launcher))
    return {o.dest: o for o in ordered}


def add_option(p, opt: Option, **override) -> None:
    """``opt`` as an argparse argument of ``p`` (a parser or a group); ``override``: argparse's
    keywords that differ here (``psbench chaos`` has other defaults)."""
    kw: dict = {"default": opt.cli_default, "help": opt.help}
    if opt.kind in ("flag", "negated"):
        kw["action"] = "store_true"
    elif opt.kind == "list":
        kw.update(action="append", metavar=opt.metavar)
    else:
        kw.update(type=opt.type, metavar=opt.metavar)
    p.add_argument(opt.flag, **{**kw, **override})


def add_run_options(p: argparse.ArgumentParser) -> None:
    groups = {name: p.add_argument_group(name) for name in GROUPS}
    for opt in run_options().values():
        add_option(groups[opt.group], opt)


def fields_from_args(a: argparse.Namespace) -> dict:
    """RunConfig's fields set by parsed ``psbench run`` arguments (not the launcher's own)."""
    return {o.field: o.to_field(getattr(a, o.dest)) for o in run_options().values() if not o.launcher}


def config_from_args(a: argparse.Namespace) -> RunConfig:
    """The validated RunConfig of parsed ``psbench run`` arguments; hosts resolved and placed."""
    cfg = RunConfig(**fields_from_args(a))
    cfg.benchmark = absolute(cfg.benchmark)  # a user's workload file, found again by the ranks wherever they start
    if a.oversubscribe and a.no_oversubscribe:
        raise ConfigError("give --oversubscribe or --no-oversubscribe, not both")
    hosts, _source = resolve_hosts(a.hostfile, a.hosts)
    cfg.hosts = [h.spec() for h in hosts]
    # this machine alone: oversubscribed unless told not to; real hosts: only when asked
    cfg.oversubscribe = a.oversubscribe or (not hosts and not a.no_oversubscribe)
    if cfg.runtime == "prrte5" and not runtime.installed():
        raise ConfigError(f"--runtime prrte5: no PRRTE 5 runtime at {runtime.runtime_dir()}: run make setup-runtime "
                          "(as root), or leave --runtime out")
    if cfg.runtime == "prrte5" and cfg.launcher != "mpirun":
        raise ConfigError("--runtime prrte5 launches with its own mpirun: leave --launcher out")
    if cfg.ulfm and not ulfm_supported():
        cfg.ulfm = False  # recorded in config.json; the modes that need ULFM refuse below
        if cfg.recovery == "ulfm" and cfg.recovery_mode.survives_ps_death:
            raise ConfigError(f"this MPI library has no ULFM (fault tolerance), which --mode {cfg.mode} needs "
                              "to repair the job in place; use --recovery job-restart")
    cfg.validate()
    plan_of(cfg)  # the fault options checked: one line each
    placement = placement_of(cfg)  # more ranks than slots, an unknown --ps-host: one line now
    if cfg.partition_ps and is_local(placement.host_of("ps") or "localhost"):
        raise ConfigError("--partition-ps cuts the PS's host off the others: put the PS on another host "
                          "(--hosts, --ps-host)")
    return cfg


def ulfm_supported() -> bool:
    return supported(find_mpirun(), mpirun_env())


def resolve_data(cfg: RunConfig) -> None:
    if get(cfg.benchmark).needs_data:
        try:
            cfg.data_dir = str(fmnist.validate(cfg.data_dir).resolve())
        except fmnist.DataError as exc:
            raise ConfigError(str(exc)) from None


def run_parser() -> OneLineParser:
    """A parser of ``psbench run``'s options alone."""
    parser = OneLineParser(prog="psbench run")
    add_run_options(parser)
    return parser


def options_markdown() -> str:
    """The reference of ``psbench run``'s options (docs/options.md), from their declarations: one table
    per group, in ``--help``'s order. ``psbench options --markdown`` prints it; tests/test_docs.py
    fails when the committed page and the code disagree."""
    lines = ["# `psbench run` options", "",
             "Generated from the options' declarations (`option(...)` on `RunConfig` in psmodes/config.py, and "
             "the launcher's own in launch/driver/options.py) by `psbench options --markdown > docs/options.md`; "
             "`tests/test_docs.py` fails when this page and the code disagree. A sweep file takes the same "
             "options as keys (`kill_ps` or `kill-ps`).", ""]
    by_group: dict[str, list[Option]] = {}
    for opt in run_options().values():
        by_group.setdefault(opt.group, []).append(opt)
    for group in GROUPS:
        lines += [f"## {group}", "", "| option | default | what it does |", "| --- | --- | --- |"]
        for opt in by_group.get(group, []):
            value = "" if opt.kind in ("flag", "negated") else f" {opt.metavar or opt.dest.upper()}"
            default = opt.cli_default
            shown = "" if default is None or default is False or default == [] else f"`{default}`"
            text = (opt.help or "").replace("%%", "%").replace("|", "\\|")
            lines.append(f"| `{opt.flag}{value}` | {shown} | {text} |")
        lines.append("")
    return "\n".join(lines)

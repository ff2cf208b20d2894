"""The ``psbench`` command line.

    psbench run --benchmark fmnist-cnn --mode checkpoint --workers 2 --duration 90s --kill-ps 30s
    psbench run ... --dry-run        # print the exact mpirun (or horovodrun) line and exit
    psbench run ... --hosts n1:4,n2:4 --launcher horovodrun --recovery job-restart
    psbench slurm [SWEEP.toml] [run options] --nodes 1 --time 00:10:00 [--array] [--submit]
    psbench sweep benchmarks/sweeps/demo.toml [--out DIR] [run options fixed for every run]
    psbench report RUN_OR_SWEEP_DIR [--target 0.70] [--out DIR]
    psbench compare A B              # two report dirs, sweep dirs, run dirs or summary.json files
    psbench chaos --mode chain --trials 20 --seed 1   # randomised kills, invariants checked per trial
    psbench perf [--quick]           # what each mode costs, side by side: reports/perf/report.md
    psbench project --from reports/perf --gpus 1024,16384   # ETTR and time to train at a cluster's scale
    psbench doctor                   # is this machine ready?
    psbench options --markdown       # the reference of psbench run's options (docs/options.md)

Every option is validated before any process starts; bad input gets one line
on stderr and exit status 2.

This is the top of the launcher's layers (see :mod:`launch`): it hands each
sub-command to the module that does it, and nothing imports it.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from psmodes.config import ConfigError, RunConfig

from .analysis.compare import compare
from .analysis.report import write_report
from .driver.doctor import check
from .driver.hosts import placement_of
from .driver.mpirun import launch_command
from .driver.options import OneLineParser, add_run_options, config_from_args, options_markdown, resolve_data
from .driver.runner import run_job
from .experiments import sweep
from .experiments.chaos import add_chaos_parser, cmd_chaos
from .experiments.kept import is_archive, runs_at
from .experiments.perf import add_perf_parser, cmd_perf
from .experiments.project import add_project_parser, cmd_project
from .experiments.slurm import cmd_slurm


def default_run_dir(cfg: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.benchmark}-{cfg.mode}-s{cfg.seed}-{stamp}"


def prepare_run_dir(cfg: RunConfig, out: str | None) -> None:
    path = Path(out) if out else default_run_dir(cfg)
    if (path / "config.json").exists():
        raise ConfigError(f"{path} already holds a run; choose another --out or remove it")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {path} is a file, not a folder")
    cfg.run_dir = str(path.resolve())


def cmd_run(a: argparse.Namespace) -> int:
    cfg = config_from_args(a)
    resolve_data(cfg)
    prepare_run_dir(cfg, a.out)
    if a.dry_run:
        if cfg.hosts:
            print(placement_of(cfg).table(), file=sys.stderr)
        print(shlex.join(launch_command(cfg)))
        return 0
    summary = run_job(cfg, quiet=a.quiet, report=not a.no_report)
    print(f"run directory: {cfg.run_dir}")
    if not a.no_report:
        print(f"report: {Path(cfg.run_dir) / 'report.md'}")
    value, name = summary["final_metric"], summary["metric"]["name"]
    print(f"completed: {summary['completed']}  final {name}: {value if value is None else round(value, 4)}  "
          f"samples/s: {summary['samples_per_s']}  ETTR: {summary.get('ettr')}  ({summary['exit_reason']})")
    return 0 if summary["completed"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="psbench", description="How parameter-server training survives the death of its PS.")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)
    run = sub.add_parser("run", help="one training run under mpirun, with optional PS kills")
    add_run_options(run)
    sweep.add_sweep_parser(sub)
    add_chaos_parser(sub)
    add_project_parser(sub)
    options = sub.add_parser("options", help="the reference of psbench run's options, in Markdown (docs/options.md)")
    options.add_argument("--markdown", action="store_true", help="Markdown (the only format)")
    report = sub.add_parser("report", help="a Markdown report (CIs, plots, findings, cost) of a run or sweep directory")
    report.add_argument("dir", help="a run directory, a sweep directory, or any folder holding run directories")
    add_report_options(report)
    report.add_argument("--out", help="report folder (default: reports/<name of DIR>)")
    compare = sub.add_parser("compare", help="compare two reports, sweeps, runs or summaries metric by metric")
    compare.add_argument("a", help="report dir (results.json), sweep or run dir, or summary.json")
    compare.add_argument("b")
    compare.add_argument("--target", type=float, help="target of the runs' metric for runs and summaries (default: the metric's, accuracy 0.70)")
    compare.add_argument("--out", help="also write the Markdown to this file")
    sub.add_parser("slurm", help="a Slurm batch script for a run or a sweep (--array: a job array), "
                                 "optionally submitted", add_help=False)
    add_perf_parser(sub)
    doctor = sub.add_parser("doctor", help="check torch, MPI/ULFM, Horovod and the data")
    doctor.add_argument("--data-dir")
    return parser


def add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=float, help="target of the runs' metric: an accuracy to reach, a perplexity to get "
                   "down to (default: the sweep's, else the metric's own: accuracy 0.70)")
    p.add_argument("--prices", help="instance price table (default: benchmarks/prices.toml)")
    p.add_argument("--instance", help="price the runs as this instance of the price table")


def cmd_sweep(a: argparse.Namespace, argv: list[str]) -> int:
    plan = sweep.load_from_args(a)
    if getattr(a, "dry_run", False):
        return sweep.dry_run(plan)
    if a.task is not None:
        if a.keep:
            raise ConfigError("--keep belongs to a whole sweep, not to one --task of a job array "
                              "(run `psbench sweep FILE --keep DIR` once the array is done)")
        return sweep.execute_task(plan, a.task, argv, quiet=getattr(a, "quiet", False))
    return sweep.execute(plan, argv, quiet=getattr(a, "quiet", False), report_dir=a.report_dir, keep=a.keep)


def cmd_report(a: argparse.Namespace) -> int:
    src = Path(a.dir)
    if is_archive(src):  # a sweep's kept runs (--keep FILE.tar.xz)
        out = Path(a.out) if a.out else src.parent
        with runs_at(src) as tmp:
            path = write_report(tmp, out, target=a.target, prices=a.prices, instance=a.instance, shown=src)
        print(f"report: {path}")
        return 0
    if not src.is_dir():
        raise ConfigError(f"{src} is not a directory (give a run or sweep directory, or a sweep's kept .tar.xz)")
    out = Path(a.out) if a.out else Path("reports") / src.resolve().name
    path = write_report(src, out, target=a.target, prices=a.prices, instance=a.instance)
    print(f"report: {path}")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    text = compare(a.a, a.b, target=a.target)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["slurm"]:  # its options are psbench run's or sweep's plus its own: parsed there
            return cmd_slurm(argv[1:])
        a = parser.parse_args(argv)
        if a.command == "run":
            return cmd_run(a)
        if a.command == "sweep":
            return cmd_sweep(a, argv)
        if a.command == "report":
            return cmd_report(a)
        if a.command == "chaos":
            return cmd_chaos(a)
        if a.command == "compare":
            return cmd_compare(a)
        if a.command == "perf":
            return cmd_perf(a)
        if a.command == "project":
            return cmd_project(a)
        if a.command == "options":
            print(options_markdown(), end="")
            return 0
        if a.command == "doctor":
            return check(a.data_dir)
        parser.print_help()
        return 2
    except ConfigError as exc:
        print(f"psbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("psbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

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
    psbench doctor                   # is this machine ready?

Every option is validated before any process starts; bad input gets one line
on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from psmodes.config import MODES, REPLAY_POLICIES, ConfigError, RunConfig, parse_duration


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """An unknown option is refused with the closest option of the sub-command suggested."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            import difflib

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


def add_run_options(p: argparse.ArgumentParser) -> None:
    from benchmarks.registry import WORKLOADS

    g = p.add_argument_group("workload")
    g.add_argument("--benchmark", default="fmnist-cnn", help=f"one of: {', '.join(WORKLOADS)}")
    g.add_argument("--workers", type=int, default=2)
    g.add_argument("--steps", type=int, help="train for N PS updates")
    g.add_argument("--duration", help="train for this long, e.g. 60s, 2m")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--batch-size", type=int, help="per worker (default: the benchmark's)")
    g.add_argument("--lr", type=float, help="learning rate (default: the benchmark's)")
    g.add_argument("--momentum", type=float, default=0.0)
    g.add_argument("--model-params", type=int, default=1_000_000, help="synthetic benchmark: model size")
    g.add_argument("--data-dir", help="folder with the Fashion-MNIST IDX .gz files (else $PSBENCH_DATA, "
                                      "else Debian's dataset-fashion-mnist)")
    g.add_argument("--no-evaluator", action="store_true", help="no evaluator rank; the PS scores the final weights")
    g.add_argument("--eval-interval", default="5s", help="evaluate the PS's weights this often (wall clock)")
    g.add_argument("--eval-samples", type=int, default=2000, help="test images per periodic evaluation")
    c = p.add_argument_group("consistency")
    c.add_argument("--consistency", default="sync",
                   help="sync (Horovod allreduce, one update a step), async (each worker pushes to the PS), "
                        "or bounded:S (async, no applied update staler than S)")
    c.add_argument("--lr-staleness", action="store_true", help="async/bounded: scale each update by 1/staleness")
    c.add_argument("--slow-worker", metavar="W:FACTOR", help="worker W's steps take FACTOR times longer (a straggler)")
    r = p.add_argument_group("recovery")
    r.add_argument("--mode", default="none", help=f"one of: {', '.join(MODES)}")
    r.add_argument("--checkpoint-every", type=int, default=100, help="checkpoint mode: K updates")
    r.add_argument("--checkpoint-sync", action="store_true",
                   help="checkpoint: wait for each write (lost steps <= K strictly, at a throughput cost)")
    r.add_argument("--replicas", type=int, default=1, help="chain mode: replicas behind the head")
    r.add_argument("--replicate-every", type=int, default=1, help="chain mode: K (1 = strict)")
    r.add_argument("--restart-delay", default="10s", help="time before a replacement is spawned")
    r.add_argument("--replay", default="paper", help=f"stateless mode: {', '.join(REPLAY_POLICIES)}")
    r.add_argument("--max-buffered", type=int, default=256,
                   help="stateless, replay sequential or staleness: gradients kept while the PS is down "
                        "(each one model-sized; later ones are counted as dropped)")
    r.add_argument("--kill-ps", action="append", default=[], metavar="AT[,AT...]",
                   help="SIGKILL the PS at a time since training started (20s) or a PS step (step:800)")
    r.add_argument("--kill-replica", action="append", default=[], metavar="AT[,AT...]",
                   help="chain mode: SIGKILL the tail replica")
    r.add_argument("--kill-worker", action="append", default=[], metavar="AT",
                   help="SIGKILL the last worker (the worker group is fixed: the run ends cleanly)")
    x = p.add_argument_group("execution")
    x.add_argument("--out", help="run directory (default: runs/<benchmark>-<mode>-s<seed>-<time>)")
    x.add_argument("--peer-timeout", default="60s", help="longest wait on a live peer before declaring a hang")
    x.add_argument("--deadline", help="watchdog for the whole job (default: derived from the run length)")
    x.add_argument("--allreduce", default="horovod", help="horovod or mpi")
    x.add_argument("--device", default="auto", help="auto, cpu or cuda (one GPU per local rank)")
    x.add_argument("--threads", type=int, help="torch threads per rank (default: 1 when ranks outnumber cores)")
    x.add_argument("--no-oversubscribe", action="store_true",
                   help="this machine only: no more ranks than cores (the default there is to oversubscribe)")
    h = p.add_argument_group("clusters")
    h.add_argument("--hostfile", help="Open MPI hostfile (`host slots=N` a line); see hostfiles/")
    h.add_argument("--hosts", help="hosts and slots, e.g. node1:4,node2:4 (inside Slurm: the allocation by default)")
    h.add_argument("--ps-host", help="the PS's host (default: the first host; replicas go to other hosts)")
    h.add_argument("--oversubscribe", action="store_true",
                   help="with hosts: allow more ranks than slots (never the default there)")
    h.add_argument("--launcher", default="mpirun", help="mpirun or horovodrun (the same job, same flags)")
    h.add_argument("--recovery", default="ulfm",
                   help="ulfm (survivors repair the job in place) or job-restart (the PS death ends the job; "
                        "the launcher restarts it from the newest checkpoint after --restart-delay)")
    h.add_argument("--max-restarts", type=int, default=3, help="job-restart: restarts before giving up")
    h.add_argument("--no-ulfm", action="store_true",
                   help="start mpirun without --with-ft ulfm (a death takes the whole job down)")
    h.add_argument("--kill-via", default="auto",
                   help="how the launcher reaches the PS's host: auto (local, srun inside Slurm, else ssh), "
                        "local, ssh or srun")
    x.add_argument("--dry-run", action="store_true", help="print the mpirun command line and exit")
    x.add_argument("--quiet", action="store_true", help="no progress line")


def config_from_args(a: argparse.Namespace) -> RunConfig:
    cfg = RunConfig(
        benchmark=a.benchmark, mode=a.mode, consistency=a.consistency, lr_staleness=a.lr_staleness,
        slow_worker=a.slow_worker, workers=a.workers, steps=a.steps,
        duration_s=parse_duration(a.duration, "--duration") if a.duration is not None else None,
        seed=a.seed, batch_size=a.batch_size, lr=a.lr, momentum=a.momentum, model_params=a.model_params,
        data_dir=a.data_dir, evaluator=not a.no_evaluator,
        eval_interval_s=parse_duration(a.eval_interval, "--eval-interval"), eval_samples=a.eval_samples,
        checkpoint_every=a.checkpoint_every, checkpoint_sync=a.checkpoint_sync, replicas=a.replicas, replicate_every=a.replicate_every,
        restart_delay_s=0.0 if str(a.restart_delay).strip() in ("0", "0s") else parse_duration(a.restart_delay, "--restart-delay"),
        replay=a.replay, max_buffered=a.max_buffered, kill_ps=list(a.kill_ps), kill_replica=list(a.kill_replica),
        kill_worker=list(a.kill_worker),
        peer_timeout_s=parse_duration(a.peer_timeout, "--peer-timeout"),
        deadline_s=parse_duration(a.deadline, "--deadline") if a.deadline else None,
        allreduce=a.allreduce, device=a.device, threads_per_rank=a.threads,
        recovery=a.recovery, max_restarts=a.max_restarts, ulfm=not a.no_ulfm, launcher=a.launcher,
        ps_host=a.ps_host, kill_via=a.kill_via,
    )
    from .hosts import placement_of, resolve_hosts

    if a.oversubscribe and a.no_oversubscribe:
        raise ConfigError("give --oversubscribe or --no-oversubscribe, not both")
    hosts, _source = resolve_hosts(a.hostfile, a.hosts)
    cfg.hosts = [h.spec() for h in hosts]
    # this machine alone: oversubscribed unless told not to; real hosts: only when asked
    cfg.oversubscribe = a.oversubscribe or (not hosts and not a.no_oversubscribe)
    if cfg.ulfm and not ulfm_supported():
        cfg.ulfm = False  # recorded in config.json; the modes that need ULFM refuse below
        if cfg.recovery == "ulfm" and cfg.mode != "none":
            raise ConfigError(f"this MPI library has no ULFM (fault tolerance), which --mode {cfg.mode} needs "
                              "to repair the job in place; use --recovery job-restart")
    cfg.validate()
    from .faults import parse_kills

    parse_kills(cfg.kill_ps, "ps", cfg.duration_s)
    parse_kills(cfg.kill_replica, "replica", cfg.duration_s)
    parse_kills(cfg.kill_worker, "worker", cfg.duration_s)
    placement_of(cfg)  # more ranks than slots, an unknown --ps-host: one line now
    return cfg


def ulfm_supported() -> bool:
    from .mpirun import find_mpirun, mpirun_env
    from .ulfm import supported

    return supported(find_mpirun(), mpirun_env())


def resolve_data(cfg: RunConfig) -> None:
    from benchmarks import fmnist
    from benchmarks.registry import get

    if get(cfg.benchmark).needs_data:
        try:
            cfg.data_dir = str(fmnist.validate(cfg.data_dir).resolve())
        except fmnist.DataError as exc:
            raise ConfigError(str(exc)) from None


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
    from .hosts import placement_of
    from .mpirun import launch_command
    from .runner import run_job

    cfg = config_from_args(a)
    resolve_data(cfg)
    prepare_run_dir(cfg, a.out)
    if a.dry_run:
        if cfg.hosts:
            print(placement_of(cfg).table(), file=sys.stderr)
        print(shlex.join(launch_command(cfg)))
        return 0
    summary = run_job(cfg, quiet=a.quiet)
    print(f"run directory: {cfg.run_dir}")
    print(f"report: {Path(cfg.run_dir) / 'report.md'}")
    acc = summary["final_accuracy"]
    print(f"completed: {summary['completed']}  final accuracy: {acc if acc is None else round(acc, 4)}  "
          f"samples/s: {summary['samples_per_s']}  ({summary['exit_reason']})")
    return 0 if summary["completed"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="psbench", description="How parameter-server training survives the death of its PS.")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)
    run = sub.add_parser("run", help="one training run under mpirun, with optional PS kills")
    add_run_options(run)
    add_sweep_parser(sub)
    from .chaos import add_chaos_parser

    add_chaos_parser(sub)
    report = sub.add_parser("report", help="a Markdown report (CIs, plots, findings, cost) of a run or sweep directory")
    report.add_argument("dir", help="a run directory, a sweep directory, or any folder holding run directories")
    add_report_options(report)
    report.add_argument("--out", help="report folder (default: reports/<name of DIR>)")
    compare = sub.add_parser("compare", help="compare two reports, sweeps, runs or summaries metric by metric")
    compare.add_argument("a", help="report dir (results.json), sweep or run dir, or summary.json")
    compare.add_argument("b")
    compare.add_argument("--target", type=float, help="target accuracy for runs and summaries (default 0.70)")
    compare.add_argument("--out", help="also write the Markdown to this file")
    sub.add_parser("slurm", help="a Slurm batch script for a run or a sweep (--array: a job array), "
                                 "optionally submitted", add_help=False)
    from .perf import add_perf_parser

    add_perf_parser(sub)
    doctor = sub.add_parser("doctor", help="check torch, MPI/ULFM, Horovod and the data")
    doctor.add_argument("--data-dir")
    return parser


SWEEP_HELP = {
    "--out": "sweep directory (default: runs/sweeps/<name>); re-running the same command resumes it",
    "--dry-run": "list the runs (done / to run) with their psbench run commands; start nothing",
    "--quiet": "no progress bar",
}


def add_sweep_parser(sub) -> None:
    sweep = sub.add_parser("sweep", help="the runs of a sweep file (resumable), then a report",
                           description="Options of `psbench run` given here are fixed for every run of the sweep: "
                                       "they override the file's [base], [[extra]] and [grid] entries.")
    sweep.add_argument("file", help="a sweep file, e.g. benchmarks/sweeps/demo.toml")
    add_run_options(sweep)
    for action in sweep._actions:
        if action.option_strings and action.dest != "help":
            action.default = argparse.SUPPRESS  # only what the user typed overrides the file
            action.help = SWEEP_HELP.get(max(action.option_strings, key=len), action.help)
    sweep.add_argument("--seeds", help="comma-separated seeds, replacing the file's seeds (e.g. 0 or 0,1,2)")
    sweep.add_argument("--report-dir", help="where the report goes (default: reports/<name>)")
    sweep.add_argument("--target", type=float, help="target accuracy of the report (default: the file's, else 0.70)")
    sweep.add_argument("--task", type=int, metavar="I",
                       help="run only the sweep's run number I (0-based, as --dry-run lists them) and write no "
                            "report: one task of a Slurm job array (psbench slurm --array)")


def add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=float, help="target accuracy (default: the sweep's, else 0.70)")
    p.add_argument("--prices", help="instance price table (default: benchmarks/prices.toml)")
    p.add_argument("--instance", help="price the runs as this instance of the price table")


def cmd_sweep(a: argparse.Namespace, argv: list[str]) -> int:
    from . import sweep

    seeds = sweep.parse_seeds(a.seeds) if a.seeds is not None else None
    overrides = {k: v for k, v in vars(a).items()
                 if k not in ("command", "file", "seeds", "report_dir", "target", "task")}
    plan = sweep.load(a.file, overrides=overrides, seeds=seeds, out=getattr(a, "out", None), target=a.target)
    if getattr(a, "dry_run", False):
        return sweep.dry_run(plan)
    if a.task is not None:
        return sweep.execute_task(plan, a.task, argv, quiet=getattr(a, "quiet", False))
    return sweep.execute(plan, argv, quiet=getattr(a, "quiet", False), report_dir=a.report_dir)


def cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    src = Path(a.dir)
    if not src.is_dir():
        raise ConfigError(f"{src} is not a directory (give a run or sweep directory)")
    out = Path(a.out) if a.out else Path("reports") / src.resolve().name
    path = write_report(src, out, target=a.target, prices=a.prices, instance=a.instance)
    print(f"report: {path}")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from .compare import compare

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
            from .slurm import cmd_slurm

            return cmd_slurm(argv[1:])
        a = parser.parse_args(argv)
        if a.command == "run":
            return cmd_run(a)
        if a.command == "sweep":
            return cmd_sweep(a, argv)
        if a.command == "report":
            return cmd_report(a)
        if a.command == "chaos":
            from .chaos import cmd_chaos

            return cmd_chaos(a)
        if a.command == "compare":
            return cmd_compare(a)
        if a.command == "perf":
            from .perf import cmd_perf

            return cmd_perf(a)
        if a.command == "doctor":
            from .doctor import check

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

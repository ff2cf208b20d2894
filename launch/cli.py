"""The ``psbench`` command line.

    psbench run --benchmark fmnist-cnn --mode checkpoint --workers 2 --duration 90s --kill-ps 30s
    psbench run ... --dry-run        # print the exact mpirun line and exit
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
    r.add_argument("--kill-ps", action="append", default=[], metavar="AT[,AT...]",
                   help="SIGKILL the PS at a time since training started (20s) or a PS step (step:800)")
    r.add_argument("--kill-replica", action="append", default=[], metavar="AT[,AT...]",
                   help="chain mode: SIGKILL the tail replica")
    x = p.add_argument_group("execution")
    x.add_argument("--out", help="run directory (default: runs/<benchmark>-<mode>-s<seed>-<time>)")
    x.add_argument("--peer-timeout", default="60s", help="longest wait on a live peer before declaring a hang")
    x.add_argument("--deadline", help="watchdog for the whole job (default: derived from the run length)")
    x.add_argument("--allreduce", default="horovod", help="horovod or mpi")
    x.add_argument("--device", default="auto", help="auto, cpu or cuda (one GPU per local rank)")
    x.add_argument("--threads", type=int, help="torch threads per rank (default: 1 when ranks outnumber cores)")
    x.add_argument("--no-oversubscribe", action="store_true")
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
        replay=a.replay, kill_ps=list(a.kill_ps), kill_replica=list(a.kill_replica),
        peer_timeout_s=parse_duration(a.peer_timeout, "--peer-timeout"),
        deadline_s=parse_duration(a.deadline, "--deadline") if a.deadline else None,
        allreduce=a.allreduce, device=a.device, threads_per_rank=a.threads, oversubscribe=not a.no_oversubscribe,
    )
    cfg.validate()
    from .faults import parse_kills

    parse_kills(cfg.kill_ps, "ps", cfg.duration_s)
    parse_kills(cfg.kill_replica, "replica", cfg.duration_s)
    return cfg


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
    from .mpirun import mpirun_command
    from .runner import run_job

    cfg = config_from_args(a)
    resolve_data(cfg)
    prepare_run_dir(cfg, a.out)
    if a.dry_run:
        print(shlex.join(mpirun_command(cfg)))
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
    doctor = sub.add_parser("doctor", help="check torch, MPI/ULFM, Horovod and the data")
    doctor.add_argument("--data-dir")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
        if a.command == "run":
            return cmd_run(a)
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

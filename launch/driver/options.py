"""The options of ``psbench run``, turned into one validated :class:`RunConfig`
(also for ``psbench sweep``, which takes the same options per run and on its
command line, and ``psbench slurm``, which passes them on). Bad input is a
:class:`ConfigError`: one line, exit status 2, before anything starts.
"""
from __future__ import annotations

import argparse
import difflib

from benchmarks import fmnist
from benchmarks.registry import WORKLOADS, get
from psmodes.config import MODES, REPLAY_POLICIES, ConfigError, RunConfig, parse_duration

from .hosts import placement_of, resolve_hosts
from .kills import parse_kills
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


def add_run_options(p: argparse.ArgumentParser) -> None:
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
    parse_kills(cfg.kill_ps, "ps", cfg.duration_s)
    parse_kills(cfg.kill_replica, "replica", cfg.duration_s)
    parse_kills(cfg.kill_worker, "worker", cfg.duration_s)
    placement_of(cfg)  # more ranks than slots, an unknown --ps-host: one line now
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

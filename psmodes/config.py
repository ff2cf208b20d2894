"""The one configuration object of a run: parsed, validated and resolved once by
the launcher, written to ``<run_dir>/config.json`` and read back by every rank.

Every option of ``psbench run`` is declared once, on the field of
:class:`RunConfig` it sets (:func:`option`: flag, help, group, how the
command line's text becomes the field's value, and the check of that value);
the few the launcher resolves itself (``--out``, ``--hosts``, ...) are
declared in ``launch/driver/options.py``. From these :class:`Option`
declarations the launcher builds the ``psbench run`` parser, the mapping of
its arguments onto RunConfig, the check of a sweep file's keys, and the
``psbench run`` lines a sweep prints.

Validation happens here, before any process starts, and raises
:class:`ConfigError` whose message is a single line telling the user what to
fix; the CLI turns it into exit status 2.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.registry import WORKLOADS, WorkloadError, missing_requirement
from benchmarks.registry import get as get_workload

from . import modes
from .atomic import write_text_atomic
from .durations import parse_duration  # noqa: F401 - the options' parser, imported from here by the launcher
from .errors import ConfigError, positive_int
from .failure_process import draw as draw_failures
from .messages import POLICY_CODES

FORMAT_VERSION = 1
MODES = modes.NAMES  # each mode's own options and checks live in psmodes/modes/<name>.py
OPTIMIZERS = ("sgd", "momentum", "adamw")  # psmodes/optim.py
REPLAY_POLICIES = tuple(POLICY_CODES)
CONSISTENCY = ("sync", "async", "bounded:S")
RECOVERY = ("ulfm", "job-restart")
LAUNCHERS = ("mpirun", "horovodrun")
RUNTIMES = ("pypi", "prrte5")  # launch/driver/runtime.py
EXCHANGES = ("auto", "blocking", "pipelined")  # the sync leader's exchange with the PS (psmodes/worker.py)
PS_PRIORITIES = ("normal", "idle")  # the sync PS's CPU scheduling (psmodes/priority.py)
ON_DIVERGE = ("stop", "continue")  # a run whose model went non-finite (psmodes/divergence.py)
PIN_WORKERS = ("auto", "off")  # a worker to a core of its own where ranks outnumber cores (psmodes/priority.py)
# a run recorded before one of these fields existed ran so, not with the field's default
RAN_BEFORE_ITS_FIELD = {"exchange": "blocking", "mailbox": False}
KILL_VIA = ("auto", "local", "ssh", "srun")
GROUPS = ("workload", "consistency", "recovery", "faults", "execution", "clusters")  # of `psbench run --help`, in order


def read_user_file(path, what: str, missing: str) -> str:
    """The text of a file the user named; ConfigError (one line) when it is missing or unreadable."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(missing) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from None


# ---------------------------------------------------------------- option declarations

@dataclass(frozen=True)
class Option:
    """One option of ``psbench run``. On a RunConfig field (:func:`option`) it sets that
    field; ``launcher=True``: the launcher reads it and resolves the field it names itself
    (``--hosts`` and ``--hostfile`` -> ``hosts``), or it names none (``--dry-run``).

    Its kind follows from its default: a bool is a flag (``--no-X`` clears a field that
    is true by default), a list is repeatable (``--kill-ps 10s --kill-ps 20s``), anything
    else takes one value, of ``type`` (default: the default's type, else text)."""
    flag: str                       # "--duration"
    group: str                      # one of GROUPS: where --help lists it
    help: str | None = None
    field: str | None = None        # the RunConfig field it sets (or, launcher=True, determines)
    default: Any = None             # the field's default (launcher=True: the command line's)
    type: Callable | None = None    # of the command line's value (int, float); None: text
    parse: Callable | None = None   # (text or default, flag) -> the field's value; None: as given
    check: Callable | None = None   # (field value, flag) -> None, or ConfigError; not run on a None default
    metavar: str | None = None
    launcher: bool = False

    @property
    def dest(self) -> str:
        """The argparse name and the sweep-file key (``-`` or ``_``): ``--kill-ps`` -> ``kill_ps``."""
        return self.flag[2:].replace("-", "_")

    @property
    def kind(self) -> str:
        if isinstance(self.default, bool):
            return "negated" if self.flag.startswith("--no-") and not self.launcher else "flag"
        return "list" if isinstance(self.default, list) else "value"

    @property
    def cli_default(self):
        """The command line's value when the option is not given."""
        return {"negated": False, "list": []}.get(self.kind, self.default)

    def to_field(self, value):
        """The command line's value -> the field's (ConfigError, one line, when it does not parse)."""
        if self.kind == "negated":
            return not value
        if self.kind == "list":
            return list(value)
        return self.parse(value, self.flag) if self.parse else value


def option(default, flag: str, help: str | None = None, *, group: str, **spec) -> Any:
    """A RunConfig field that is the ``psbench run`` option ``flag`` (see :class:`Option`)."""
    opt = dict(flag=flag, help=help, group=group, **spec)
    if isinstance(default, list):
        return field(default_factory=list, metadata={"option": opt})
    return field(default=default, metadata={"option": opt})


@functools.cache
def config_options() -> tuple[Option, ...]:
    """The options declared on RunConfig's fields, in field order."""
    out = []
    for f in dataclasses.fields(RunConfig):
        spec = f.metadata.get("option")
        if spec is None:
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        kind_of = type(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else None
        spec = {"type": None if spec.get("parse") else kind_of, **spec}
        out.append(Option(field=f.name, default=default, **spec))
    return tuple(out)


# how an option's text becomes its field's value
def duration(text, flag: str) -> float | None:
    """``90s`` -> 90.0 (> 0); not given: None."""
    return None if text is None else parse_duration(text, flag)


def duration_or_zero(text, flag: str) -> float:
    """As :func:`duration`, and ``0`` or ``0s`` is 0."""
    return 0.0 if str(text).strip() in ("0", "0s") else parse_duration(text, flag)


def duration_or_blank(text, flag: str) -> float | None:
    """As :func:`duration`, and an empty value is None too."""
    return parse_duration(text, flag) if text else None


# checks of one field's value
def one_of(choices, what: str, listing: str | None = None) -> Callable:
    listing = listing or f"one of: {', '.join(choices)}"

    def check(value, flag: str) -> None:
        if value not in choices:
            raise ConfigError(f"unknown {what} {value!r}; choose {listing}")

    return check


def whole_number(value, flag: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{flag} must be a whole number >= 0, got {value!r}")


def at_least_one(value, flag: str) -> None:
    if not value >= 1:
        raise ConfigError(f"{flag} must be at least 1, got {value}")


def non_negative(value, flag: str) -> None:
    if value < 0:
        raise ConfigError(f"{flag} must be >= 0, got {value}")


def positive(value, flag: str) -> None:
    if not value > 0:
        raise ConfigError(f"{flag} must be positive")


def learning_rate(value, flag: str) -> None:
    if not (value > 0 and value < 1e3):
        raise ConfigError(f"{flag} must be a positive number, got {value}")


def fraction(value, flag: str) -> None:
    if not 0 <= value < 1:
        raise ConfigError(f"{flag} must be in [0, 1), got {value}")


def check_benchmark(value, flag: str) -> None:
    try:
        why = missing_requirement(get_workload(value))
    except WorkloadError as exc:
        raise ConfigError(str(exc)) from None
    if why:
        raise ConfigError(why)


def check_betas(value, flag: str) -> None:
    parse_betas(value, flag)


def parse_betas(value: str, flag: str = "--betas") -> tuple[float, float]:
    try:
        b1, b2 = (float(x) for x in str(value).split(","))
    except ValueError:
        raise ConfigError(f"{flag} takes two numbers B1,B2 in [0, 1), e.g. 0.9,0.999; got {value!r}") from None
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ConfigError(f"{flag}: both rates must be in [0, 1), got {value!r}")
    return b1, b2


def check_consistency(value, flag: str) -> None:
    staleness_bound(value)


def staleness_bound(consistency: str) -> int | None:
    """S of ``bounded:S``; None for sync and async; ConfigError for anything else."""
    if consistency in ("sync", "async"):
        return None
    m = re.fullmatch(r"bounded:(-?\d+)", consistency or "")
    if not m:
        raise ConfigError(f"unknown consistency {consistency!r}; choose sync, async or bounded:S "
                          "(S >= 1, e.g. bounded:2)")
    s = int(m.group(1))
    if s < 1:
        raise ConfigError(f"--consistency {consistency}: S must be >= 1 (bounded:0 would be sync; "
                          "use --consistency sync)")
    return s


# ---------------------------------------------------------------- the configuration

@dataclass
class RunConfig:
    # workload
    benchmark: str = option("fmnist-cnn", "--benchmark", f"one of: {', '.join(WORKLOADS)}, or your own: "
                            "MODULE:FACTORY or FILE.py:FACTORY (benchmarks/registry.py)", group="workload",
                            check=check_benchmark)
    workers: int = option(2, "--workers", "data-parallel workers (one rank each)", group="workload",
                          check=positive_int)
    steps: int | None = option(None, "--steps", "train for N PS updates", group="workload", type=int,
                               check=positive_int)
    duration_s: float | None = option(None, "--duration", "train for this long, e.g. 60s, 2m", group="workload",
                                      parse=duration, check=positive)
    seed: int = option(0, "--seed", "seeds the model, the data order and the drawn failures", group="workload",
                       check=non_negative)
    batch_size: int | None = option(None, "--batch-size", "per worker (default: the benchmark's)",
                                    group="workload", type=int, check=positive_int)
    lr: float | None = option(None, "--lr", "learning rate (default: the benchmark's)", group="workload",
                              type=float, check=learning_rate)
    optimizer: str | None = option(None, "--optimizer", "the PS's optimizer: sgd, momentum (SGD with --momentum, "
                                   "default 0.9) or adamw (psmodes/optim.py); default: the benchmark's (sgd; "
                                   "gpt-tiny: adamw)", group="workload", check=one_of(OPTIMIZERS, "optimizer"))
    momentum: float = option(0.0, "--momentum", "SGD momentum in [0, 1) (0: plain SGD; --optimizer momentum: 0.9)",
                             group="workload", check=fraction)
    weight_decay: float = option(0.01, "--weight-decay", "adamw: decoupled weight decay", group="workload",
                                 type=float, check=fraction)
    betas: str = option("0.9,0.999", "--betas", "adamw: the moments' decay rates B1,B2", group="workload",
                        check=check_betas, metavar="B1,B2")
    model_params: int = option(1_000_000, "--model-params", "synthetic benchmark: model size", group="workload",
                               check=positive_int)
    data_dir: str | None = option(None, "--data-dir", "folder with the Fashion-MNIST IDX .gz files (else "
                                  "$PSBENCH_DATA, else Debian's dataset-fashion-mnist)", group="workload")
    evaluator: bool = option(True, "--no-evaluator", "no evaluator rank; the PS scores the final weights",
                             group="workload")
    eval_interval_s: float = option(5.0, "--eval-interval", "evaluate the PS's weights this often (wall clock)",
                                    group="workload", parse=duration)
    eval_samples: int = option(2000, "--eval-samples", "test images per periodic evaluation", group="workload",
                               check=positive_int)  # the final evaluation uses all
    # consistency
    consistency: str = option("sync", "--consistency", "sync (Horovod allreduce, one update a step), async (each "
                              "worker pushes to the PS), or bounded:S (async, no applied update staler than S)",
                              group="consistency", check=check_consistency)
    lr_staleness: bool = option(False, "--lr-staleness", "async/bounded: scale each update by 1/staleness",
                                group="consistency")  # Zhang et al.
    exchange: str = option("auto", "--exchange", "the sync leader's exchange with the PS: pipelined (it computes "
                           "the next step while the PS applies this one: at most one gradient unacknowledged; "
                           "sync and plain SGD only), blocking (it waits for the PS's answer before the next "
                           "step), or auto (pipelined where it can be; recorded resolved)", group="consistency",
                           check=one_of(EXCHANGES, "exchange", "auto, blocking or pipelined"))
    mailbox: bool = option(True, "--no-mailbox", "pipelined: send each gradient over MPI even to a PS on the "
                           "leader's host (by default it goes through shared memory there: psmodes/mailbox.py)",
                           group="consistency")
    slow_worker: str | None = option(None, "--slow-worker", "worker W's steps take FACTOR times longer (a "
                                     "straggler)", group="consistency", metavar="W:FACTOR")
    # recovery
    mode: str = option("none", "--mode", f"one of: {', '.join(MODES)}", group="recovery", check=one_of(MODES, "mode"))
    checkpoint_every: int = option(100, "--checkpoint-every", "checkpoint mode: K updates", group="recovery",
                                   check=positive_int)
    checkpoint_sync: bool = option(False, "--checkpoint-sync", "checkpoint: wait for each write (lost steps <= K "
                                   "strictly, at a throughput cost)", group="recovery")
    replicas: int = option(1, "--replicas", "chain, hybrid: replicas behind the head", group="recovery")
    replicate_every: int = option(1, "--replicate-every", "chain, hybrid: K (chain: 1 = strict)", group="recovery",
                                  check=positive_int)
    restart_delay_s: float = option(10.0, "--restart-delay", "time before a replacement is spawned",
                                    group="recovery", parse=duration_or_zero, check=non_negative)
    spares: int = option(0, "--spares", "standby ranks started with the job, warm, that take a dead PS's, "
                         "replica's, evaluator's or worker's place without MPI_Comm_spawn (spawned again once none "
                         "is left)",
                         group="recovery", check=whole_number)
    refill_spares: bool = option(False, "--refill-spares", "with --spares: once training runs again after spares "
                                 "took roles, spawn new ones (training waits for their MPI_Init; their set-up "
                                 "runs meanwhile)", group="recovery")
    min_workers: int = option(1, "--min-workers", "a worker's death is survived (async and bounded; sync with "
                              "--allreduce mpi: psmodes/elastic.py) while at least N workers are "
                              "left; below, the run ends cleanly", group="recovery",
                              check=positive_int)
    replace_workers: bool = option(True, "--no-replace-workers", "a lost worker is not replaced: the group goes "
                                   "on short (down to --min-workers). By default a spare, or a process spawned after "
                                   "--restart-delay, takes the lost worker's place (psmodes/elastic.py)",
                                   group="recovery")
    elastic_batch: str = option("local", "--elastic-batch", "sync, once a worker is lost: local keeps each "
                                "worker's batch and scales the learning rate with the workers left (the linear "
                                "scaling rule); global keeps the global batch (each survivor takes a larger one) "
                                "and the learning rate", group="recovery",
                                check=one_of(("local", "global"), "--elastic-batch value", "local or global"))
    replay: str = option("paper", "--replay", f"stateless mode: {', '.join(REPLAY_POLICIES)}", group="recovery",
                         check=one_of(REPLAY_POLICIES, "replay policy"))
    max_buffered: int = option(256, "--max-buffered", "stateless, replay sequential or staleness: gradients kept "
                               "while the PS is down (each one model-sized; later ones are counted as dropped)",
                               group="recovery", check=positive_int)
    on_diverge: str = option("stop", "--on-diverge", "a non-finite gradient, weights or metric (psmodes/divergence.py): "
                             "stop ends the run as diverged; continue trains on (recorded the same)",
                             group="recovery", check=one_of(ON_DIVERGE, "--on-diverge value"))
    # faults the launcher injects (launch/faultkinds/: one module per kind); AT as for --kill-ps
    kill_ps: list[str] = option([], "--kill-ps", "SIGKILL the PS at a time since training started (20s), a share "
                                "of --duration (33%%) or a PS step (step:800)", group="faults", metavar="AT[,AT...]")
    kill_replica: list[str] = option([], "--kill-replica", "chain, hybrid: SIGKILL the tail replica (AT@replicaN: "
                                     "replica N of the chain)", group="faults", metavar="AT[@replicaN][,...]")
    kill_worker: list[str] = option([], "--kill-worker", "SIGKILL the last worker (AT@workerN: worker N; survived "
                                    "down to --min-workers where psmodes/elastic.py says so, else the run ends "
                                    "cleanly)", group="faults", metavar="AT[@workerN][,...]")
    kill_node: list[str] = option([], "--kill-node", "lose the PS's host at AT: SIGKILL every rank there at once "
                                  "(PS, replicas, evaluator, spares; workers there end the run) and that host's "
                                  "Open MPI daemon", group="faults", metavar="AT[,AT...]")
    hang_ps: list[str] = option([], "--hang-ps", "SIGSTOP the PS at AT (a hung server); ~DUR: SIGCONT it DUR later "
                                "(a pause that ends), e.g. 30%%~2s", group="faults", metavar="AT[~DUR][,...]")
    hang_replica: list[str] = option([], "--hang-replica", "chain, hybrid: SIGSTOP the tail replica (AT@replicaN: "
                                     "replica N of the chain), like --hang-ps", group="faults",
                                     metavar="AT[~DUR][@replicaN][,...]")
    hang_worker: list[str] = option([], "--hang-worker", "SIGSTOP the last worker (AT@workerN: worker N) at AT: the "
                                    "ranks that wait for it suspect it (sync: the workers in their allreduce; async: "
                                    "the PS) and it is fenced (then as --kill-worker)", group="faults",
                                    metavar="AT[@workerN][,...]")
    slow_ps: list[str] = option([], "--slow-ps", "slow the PS down by --slow-factor for DUR from AT (stopped and "
                                "continued on a duty cycle), e.g. 30%%~10s", group="faults", metavar="AT~DUR[,...]")
    partition_ps: list[str] = option([], "--partition-ps", "cut the PS's host off the network for DUR from AT (its "
                                     "link to the launcher's host down; needs root there and the PS on another "
                                     "host), e.g. 30%%~5s", group="faults", metavar="AT~DUR[,...]")
    failures: list[str] = option([], "--failures", "failures arriving at random, e.g. ps:exp:30s (exponential, mean "
                                 "30 s), replica:weibull:2m:0.7, worker:exp:20s, any:exp:20s:hang "
                                 "(psmodes/failure_process.py)",
                                 group="faults", metavar="TARGET:DIST:PARAMS[:KIND][,...]")
    failure_seed: int | None = option(None, "--failure-seed", "draws the --failures arrival times (default: --seed); "
                                      "every mode meets the same times", group="faults", type=int, check=non_negative)
    slow_factor: float = option(4.0, "--slow-factor", "--slow-ps: the PS runs 1/FACTOR of the time", group="faults",
                                type=float, check=at_least_one)
    suspect_after_s: float = option(3.0, "--suspect-after", "a PS or replica that has not answered a wait that "
                                    "normally takes milliseconds for this long is suspected, fenced (SIGKILLed) and "
                                    "replaced; 0: off (only --peer-timeout ends a hang)", group="faults",
                                    parse=duration_or_zero, check=non_negative)
    # execution and safety nets
    peer_timeout_s: float = option(60.0, "--peer-timeout", "longest wait on a live peer before declaring a hang",
                                   group="execution", parse=duration)
    deadline_s: float | None = option(None, "--deadline", "watchdog for the whole job (default: derived from the "
                                      "run length)", group="execution", parse=duration_or_blank)
    allreduce: str = option("horovod", "--allreduce", "horovod or mpi", group="execution",
                            check=one_of(("horovod", "mpi"), "allreduce", "horovod or mpi"))
    device: str = option("auto", "--device", "auto, cpu or cuda (one GPU per local rank)", group="execution",
                         check=one_of(("auto", "cpu", "cuda"), "device", "auto, cpu or cuda"))
    threads_per_rank: int | None = option(None, "--threads", "torch threads per rank (default: 1 when ranks "
                                          "outnumber cores)", group="execution", type=int)
    ps_priority: str = option("normal", "--ps-priority", "the sync PS's CPU scheduling once it serves steady "
                              "updates: normal, or idle (Linux SCHED_IDLE: it runs on the cores the workers leave "
                              "idle; faster none where ranks outnumber cores, slower modes whose PS works after "
                              "an update: psmodes/priority.py)", group="execution",
                              check=one_of(PS_PRIORITIES, "PS priority", "normal or idle"))
    pin_workers: str = option("off", "--pin-workers", "auto: where a host's ranks outnumber its cores and its "
                              "workers do not, each worker runs on a core of its own and the other ranks share "
                              "them (mpirun's --bind-to none moves a worker between cores when the PS wakes); "
                              "off (the default): the kernel places every rank (psmodes/priority.py)",
                              group="execution",
                              check=one_of(PIN_WORKERS, "worker pinning", "auto or off"))
    # clusters and whole-job restarts (launch/driver/hosts.py, launch/driver/runner.py)
    ps_host: str | None = option(None, "--ps-host", "the PS's host (default: the first host; replicas go to other "
                                 "hosts)", group="clusters")
    launcher: str = option("mpirun", "--launcher", "mpirun or horovodrun (the same job, same flags)",
                           group="clusters", check=one_of(LAUNCHERS, "launcher", "mpirun or horovodrun"))
    runtime: str = option("pypi", "--runtime", "pypi (the venv's Open MPI 5.0.11: a host's lost daemon ends the job) "
                          "or prrte5 (make setup-runtime: PRRTE 5 launches the same ranks and outlives a lost "
                          "daemon; launch/driver/runtime.py)", group="clusters",
                          check=one_of(RUNTIMES, "runtime", "pypi or prrte5"))
    recovery: str = option("ulfm", "--recovery", "ulfm (survivors repair the job in place) or job-restart (the PS "
                           "death ends the job; the launcher restarts it from the newest checkpoint after "
                           "--restart-delay)", group="clusters",
                           check=one_of(RECOVERY, "recovery", "ulfm or job-restart"))
    max_restarts: int = option(3, "--max-restarts", "job-restart: restarts before giving up", group="clusters",
                               check=whole_number)
    ulfm: bool = option(True, "--no-ulfm", "start mpirun without --with-ft ulfm (a death takes the whole job down)",
                        group="clusters")
    kill_via: str = option("auto", "--kill-via", "how the launcher reaches the PS's host: auto (local, srun inside "
                           "Slurm, else ssh), local, ssh or srun", group="clusters",
                           check=one_of(KILL_VIA, "--kill-via"))
    # resolved by the launcher (launch/driver/options.py): no option of their own
    hosts: list[str] = field(default_factory=list)  # "host:slots" in order; empty: this machine only
    oversubscribe: bool = True      # more ranks than slots (this machine alone: unless --no-oversubscribe)
    run_dir: str = ""
    # --failures drawn (psmodes/failure_process.py): {t_s, target, kind, spec} each, recorded resolved
    failure_schedule: list[dict] = field(default_factory=list)
    format_version: int = FORMAT_VERSION

    # ---- derived
    @property
    def n_ranks(self) -> int:
        return 1 + self.n_replicas + (1 if self.evaluator else 0) + self.workers + self.spares

    @property
    def recovery_mode(self) -> modes.RecoveryMode:
        """The recovery mode's promise and hooks (psmodes/modes/)."""
        return modes.get(self.mode)

    @property
    def n_replicas(self) -> int:
        return self.recovery_mode.replicas(self)

    @property
    def dies_with_ps(self) -> bool:
        """Whether a PS death ends the MPI job (mode none; job-restart: the launcher restarts it)."""
        return not self.recovery_mode.survives_ps_death or self.recovery == "job-restart"

    @property
    def is_async(self) -> bool:
        """async and bounded:S: every worker talks to the PS on its own."""
        return self.consistency != "sync"

    @property
    def workers_apply(self) -> bool:
        """Sync with plain SGD: every worker can apply the averaged gradient itself, bit for bit as the
        PS does, so the PS answers with the version only (psmodes/server.py)."""
        return not self.is_async and self.optimizer == "sgd" and not self.momentum

    @property
    def staleness_bound(self) -> int | None:
        """S of bounded:S; None for sync and async."""
        return staleness_bound(self.consistency)

    @property
    def slow_worker_spec(self) -> tuple[int, float] | None:
        """(worker index, factor) of --slow-worker W:FACTOR."""
        if not self.slow_worker:
            return None
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+(?:\.\d*)?|\.\d+)\s*", self.slow_worker)
        if not m:
            raise ConfigError(f"--slow-worker {self.slow_worker!r}: write W:FACTOR, e.g. 2:3 (worker 2, 3x slower)")
        index, factor = int(m.group(1)), float(m.group(2))
        if index >= self.workers:
            raise ConfigError(f"--slow-worker {self.slow_worker}: there is no worker {index} "
                              f"(--workers {self.workers} gives workers 0..{self.workers - 1})")
        if factor < 1:
            raise ConfigError(f"--slow-worker {self.slow_worker}: FACTOR must be >= 1")
        return index, factor

    @property
    def outage_timeout_s(self) -> float:
        """Longest wait that may span a PS outage (restart delay + spawn + load)."""
        return self.peer_timeout_s + 2 * self.restart_delay_s

    def resolved_deadline(self) -> float:
        if self.deadline_s:
            return self.deadline_s
        base = self.duration_s if self.duration_s else max(60.0, (self.steps or 0) * 0.2)
        faults = sum(len(v) for v in (self.kill_ps, self.kill_node, self.kill_replica, self.kill_worker, self.hang_ps,
                                      self.hang_replica, self.hang_worker, self.slow_ps, self.partition_ps, self.failure_schedule))
        return base * 2 + 120 + faults * (self.restart_delay_s + 30)

    # ---- validation
    @property
    def adam_betas(self) -> tuple[float, float]:
        return parse_betas(self.betas)

    def validate(self) -> "RunConfig":
        """Each option's own check (its declaration), then the checks across options."""
        for opt in config_options():
            value = getattr(self, opt.field)
            if opt.check is not None and not (value is None and opt.default is None):
                opt.check(value, opt.flag)
        if self.optimizer is None:  # recorded resolved: config.json says what ran
            self.optimizer = get_workload(self.benchmark).optimizer
        if self.momentum and self.optimizer == "adamw":
            raise ConfigError("--momentum is SGD's; adamw has --betas B1,B2")
        if self.lr_staleness and self.consistency == "sync":
            raise ConfigError("--lr-staleness needs --consistency async or bounded:S (sync updates are never stale)")
        self.slow_worker_spec  # validates --slow-worker against --workers
        self.failure_schedule = draw_failures(self)  # the same times for the same seed: recorded in config.json
        if self.exchange == "auto":
            self.exchange = "pipelined" if self.workers_apply else "blocking"
        if self.exchange == "pipelined" and not self.workers_apply:
            raise ConfigError("--exchange pipelined needs --consistency sync and plain SGD (--optimizer sgd, no "
                              "--momentum): the workers go on with the update they apply themselves, which "
                              "needs no optimizer state")
        if self.min_workers > self.workers:
            raise ConfigError(f"--min-workers {self.min_workers} is more than --workers {self.workers}")
        if self.steps is None and self.duration_s is None:
            raise ConfigError("say how long to train: --steps N or --duration 60s")
        mode = self.recovery_mode
        mode.validate(self)
        if self.kill_replica and not self.n_replicas:
            raise ConfigError("--kill-replica needs --mode chain or hybrid (only they have replicas)")
        if self.hang_replica and not self.n_replicas:
            raise ConfigError("--hang-replica needs --mode chain or hybrid (only they have replicas)")
        if self.recovery == "job-restart" and not mode.supports_job_restart:
            raise ConfigError(f"--recovery job-restart needs --mode checkpoint (the restarted job resumes from "
                              f"the newest checkpoint), not --mode {self.mode}")
        if self.spares and self.dies_with_ps:
            why = "--recovery job-restart restarts the whole job" if mode.survives_ps_death else \
                f"--mode {self.mode} does not repair the job"
            raise ConfigError(f"--spares {self.spares}: {why}, so no spare could take a role; drop --spares")
        if self.refill_spares and not self.spares:
            raise ConfigError("--refill-spares refills the pool of --spares: give --spares N (N >= 1) too")
        if self.refill_spares and self.consistency != "sync":
            # sync: the leader's word is every worker's, so it refills when all of them train again;
            # an async leader cannot tell whether another worker is still reconnecting
            raise ConfigError(f"--refill-spares needs --consistency sync, not {self.consistency}")
        if not self.ulfm and self.recovery == "ulfm" and mode.survives_ps_death:
            raise ConfigError(f"--mode {self.mode} repairs the job in place and needs ULFM, which is off; "
                              "use --recovery job-restart")
        return self

    # ---- persistence
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        """A saved config; one written before a field existed gets its default. A newer
        format, or a version that is no version, is refused with one line naming it."""
        version = data.get("format_version", FORMAT_VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            raise ConfigError(f"run format version {version!r} is not a version number (this psbench writes "
                              f"{FORMAT_VERSION})")
        if version > FORMAT_VERSION:
            raise ConfigError(f"run format version {version} is newer than this psbench ({FORMAT_VERSION}); upgrade psbench")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config key {unknown[0]!r}")
        return cls(**{**{k: v for k, v in RAN_BEFORE_ITS_FIELD.items() if k not in data}, **data})

    @classmethod
    def load(cls, path: Path) -> "RunConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))


"""The one configuration object of a run: parsed, validated and resolved once by
the launcher, written to ``<run_dir>/config.json`` and read back by every rank.

Validation happens here, before any process starts, and raises
:class:`ConfigError` whose message is a single line telling the user what to
fix; the CLI turns it into exit status 2.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1
MODES = ("none", "checkpoint", "chain", "stateless")
REPLAY_POLICIES = ("paper", "mean", "sequential", "staleness", "local")
CONSISTENCY = ("sync", "async", "bounded:S")
RECOVERY = ("ulfm", "job-restart")
LAUNCHERS = ("mpirun", "horovodrun")
KILL_VIA = ("auto", "local", "ssh", "srun")


class ConfigError(ValueError):
    """Bad user input; the message is one line that says what to fix."""


def read_user_file(path, what: str, missing: str) -> str:
    """The text of a file the user named; ConfigError (one line) when it is missing or unreadable."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(missing) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from None


_DURATION = re.compile(r"^\s*(-?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s|m|min|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """'90', '90s', '1.5m', '250ms', '1h' -> seconds (> 0)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise ConfigError(f"{what} {text!r} is not a duration; write e.g. 60s, 1.5m, 250ms or 1h")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    if not value > 0:
        raise ConfigError(f"{what} must be positive, got {text!r}")
    return value


@dataclass
class RunConfig:
    benchmark: str = "fmnist-cnn"
    mode: str = "none"
    consistency: str = "sync"
    workers: int = 2
    steps: int | None = None
    duration_s: float | None = None
    seed: int = 0
    batch_size: int | None = None   # per worker; None: the workload's default
    lr: float | None = None         # None: the workload's default
    momentum: float = 0.0
    model_params: int = 1_000_000   # synthetic workload only
    data_dir: str | None = None
    evaluator: bool = True
    eval_interval_s: float = 5.0
    eval_samples: int = 2000        # test images per periodic evaluation; the final one uses all
    # recovery
    checkpoint_every: int = 100
    checkpoint_sync: bool = False   # write on the critical path: lost steps <= K strictly
    replicas: int = 1
    replicate_every: int = 1
    restart_delay_s: float = 10.0
    replay: str = "paper"
    max_buffered: int = 256         # stateless sequential/staleness: gradients kept (each O(model))
    lr_staleness: bool = False      # async/bounded: scale each update by 1/staleness (Zhang et al.)
    slow_worker: str | None = None  # "W:FACTOR": worker W's steps take FACTOR times longer
    kill_ps: list[str] = field(default_factory=list)
    kill_replica: list[str] = field(default_factory=list)
    kill_worker: list[str] = field(default_factory=list)  # SIGKILL the last worker: the run ends cleanly
    # safety nets
    peer_timeout_s: float = 60.0    # longest wait on a live peer before a rank declares the run hung
    deadline_s: float | None = None  # watchdog on the whole job; None: derived from duration/steps
    # placement and execution
    oversubscribe: bool = True
    threads_per_rank: int | None = None  # None: 1 when ranks outnumber cores, else cores // ranks
    device: str = "auto"            # auto|cpu|cuda
    allreduce: str = "horovod"      # horovod|mpi (mpi: plain MPI_Allreduce, for stacks without Horovod)
    # clusters and whole-job restarts (launch/hosts.py, launch/runner.py)
    recovery: str = "ulfm"          # ulfm: survivors repair the job in place; job-restart: the launcher restarts it
    max_restarts: int = 3           # job-restart: restarts allowed before the run is given up
    ulfm: bool = True               # mpirun --with-ft ulfm; off: any death takes the whole job down
    launcher: str = "mpirun"        # mpirun | horovodrun
    hosts: list[str] = field(default_factory=list)  # "host:slots" in order; empty: this machine only
    ps_host: str | None = None      # the PS's host (default: the first host)
    kill_via: str = "auto"          # auto (local, srun inside Slurm, else ssh) | local | ssh | srun
    run_dir: str = ""
    format_version: int = FORMAT_VERSION

    # ---- derived
    @property
    def n_ranks(self) -> int:
        return 1 + self.n_replicas + (1 if self.evaluator else 0) + self.workers

    @property
    def n_replicas(self) -> int:
        return self.replicas if self.mode == "chain" else 0

    @property
    def dies_with_ps(self) -> bool:
        """Whether a PS death ends the MPI job (mode none; job-restart: the launcher restarts it)."""
        return self.mode == "none" or self.recovery == "job-restart"

    @property
    def is_async(self) -> bool:
        """async and bounded:S: every worker talks to the PS on its own."""
        return self.consistency != "sync"

    @property
    def staleness_bound(self) -> int | None:
        """S of bounded:S; None for sync and async."""
        c = self.consistency
        if c in ("sync", "async"):
            return None
        m = re.fullmatch(r"bounded:(-?\d+)", c or "")
        if not m:
            raise ConfigError(f"unknown consistency {c!r}; choose sync, async or bounded:S (S >= 1, e.g. bounded:2)")
        s = int(m.group(1))
        if s < 1:
            raise ConfigError(f"--consistency {c}: S must be >= 1 (bounded:0 would be sync; use --consistency sync)")
        return s

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
        kills = len(self.kill_ps) + len(self.kill_replica) + len(self.kill_worker)
        return base * 2 + 120 + kills * (self.restart_delay_s + 30)

    # ---- validation
    def validate(self) -> "RunConfig":
        from benchmarks.registry import WORKLOADS

        if self.benchmark not in WORKLOADS:
            raise ConfigError(f"unknown benchmark {self.benchmark!r}; choose one of: {', '.join(WORKLOADS)}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; choose one of: {', '.join(MODES)}")
        self.staleness_bound  # validates --consistency
        if self.lr_staleness and self.consistency == "sync":
            raise ConfigError("--lr-staleness needs --consistency async or bounded:S (sync updates are never stale)")
        if self.replay not in REPLAY_POLICIES:
            raise ConfigError(f"unknown replay policy {self.replay!r}; choose one of: {', '.join(REPLAY_POLICIES)}")
        if self.allreduce not in ("horovod", "mpi"):
            raise ConfigError(f"unknown allreduce {self.allreduce!r}; choose horovod or mpi")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"unknown device {self.device!r}; choose auto, cpu or cuda")
        _positive_int(self.workers, "--workers")
        self.slow_worker_spec  # validates --slow-worker against --workers
        if self.steps is None and self.duration_s is None:
            raise ConfigError("say how long to train: --steps N or --duration 60s")
        if self.steps is not None:
            _positive_int(self.steps, "--steps")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError("--duration must be positive")
        if self.batch_size is not None:
            _positive_int(self.batch_size, "--batch-size")
        if self.lr is not None and not (self.lr > 0 and self.lr < 1e3):
            raise ConfigError(f"--lr must be a positive number, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {self.seed}")
        _positive_int(self.model_params, "--model-params")
        _positive_int(self.checkpoint_every, "--checkpoint-every")
        _positive_int(self.replicate_every, "--replicate-every")
        _positive_int(self.eval_samples, "--eval-samples")
        _positive_int(self.max_buffered, "--max-buffered")
        if self.mode == "chain":
            _positive_int(self.replicas, "--replicas")
        if self.restart_delay_s < 0:
            raise ConfigError("--restart-delay must be >= 0")
        if self.kill_replica and self.mode != "chain":
            raise ConfigError("--kill-replica needs --mode chain (only chain mode has replicas)")
        self._validate_cluster()
        return self

    def _validate_cluster(self) -> None:
        if self.recovery not in RECOVERY:
            raise ConfigError(f"unknown recovery {self.recovery!r}; choose ulfm or job-restart")
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"unknown launcher {self.launcher!r}; choose mpirun or horovodrun")
        if self.kill_via not in KILL_VIA:
            raise ConfigError(f"unknown --kill-via {self.kill_via!r}; choose one of: {', '.join(KILL_VIA)}")
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be a whole number >= 0, got {self.max_restarts!r}")
        if self.recovery == "job-restart" and self.mode != "checkpoint":
            raise ConfigError(f"--recovery job-restart needs --mode checkpoint (the restarted job resumes from "
                              f"the newest checkpoint), not --mode {self.mode}")
        if not self.ulfm and self.recovery == "ulfm" and self.mode != "none":
            raise ConfigError(f"--mode {self.mode} repairs the job in place and needs ULFM, which is off; "
                              "use --recovery job-restart")

    # ---- persistence
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        from .atomic import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        version = data.get("format_version", FORMAT_VERSION)
        if version > FORMAT_VERSION:
            raise ConfigError(f"run format version {version} is newer than this psbench ({FORMAT_VERSION}); upgrade psbench")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config key {unknown[0]!r}")
        return cls(**data)

    @classmethod
    def load(cls, path: Path) -> "RunConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _positive_int(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")

"""Per-process JSONL event streams.

Each process appends one JSON object per line to ``<run_dir>/events/<name>.jsonl``
and flushes every line, so a run that dies leaves everything it recorded so far
readable (at worst the last line is torn, and readers skip it). Every event has
``t`` (wall-clock seconds, ``time.time()``), ``ev`` (its kind) and ``who``.

Every kind is declared once, in :class:`Ev`; the ranks, the launcher and the
readers in ``launch/`` name kinds through it, and :meth:`EventLog.emit` refuses
an undeclared one, so a typo fails the first run that reaches it.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from enum import StrEnum
from typing import Iterator


class Ev(StrEnum):
    """The event kinds, with who emits each and its main fields."""
    # every rank
    START = "start"                    # role, pid, rank, size, threads, generation, device, host
    ROLE = "role"                      # pid, host, rank, role, generation: the pid file the injector reads
    FAILED = "failed"                  # reason (traceback for a bug): the rank ends
    DONE = "done"                      # completed, version, digest; sync workers: ctrl_wait_s, early_headers
    USAGE = "usage"                    # cpu_s, wall_s, maxrss_mb, at exit
    DETECT = "detect"                  # via, error, t_detect, dead / version: a death was detected
    RESPAWNED = "respawned"            # spawned, from_spares, seconds, attempts, generation, refill
    SPARE_TAKEN = "spare_taken"        # a spare took a role: role, generation, log (its events go on there)
    SPARE_WAITED = "spare_waited"      # what a spare's wait cost: wait_s, cpu_s (until it took a role or retired)
    SPAWN_FAILED = "spawn_failed"      # attempt, error, spawning, died_before_joining
    KILLPOINT = "killpoint"            # point, pid, host: stopped itself for the injector (tests)
    DIVERGED = "diverged"              # where, version, preceded_by, policy: a non-finite value (psmodes.divergence)
    STALE_DROPPED = "stale_dropped"    # kind, generation, current, source, tag: a message of an older generation
    SUSPECT = "suspect"                # role, pid, host, what, waited_s, t_suspect: a peer past --suspect-after
    # the PS
    TRAIN_START = "train_start"        # t0_ms: the run's clock starts at the first contact
    UPDATE = "update"                  # version, every 10th update
    HELLO = "hello"                    # the reconciliation with the leader (see psmodes.server)
    REPLAYED = "replayed"              # stateless replacement: applied, policy, version, staleness
    RESUME = "resume"                  # checkpoint replacement: from_version, digest, attempt
    CHECKPOINT_START = "checkpoint_start"    # version, copy_s, waited_s
    CHECKPOINT = "checkpoint"          # version, path, write_s, bytes: durable
    CHECKPOINT_FAILED = "checkpoint_failed"  # version, error
    CHECKPOINT_SKIPPED = "checkpoint_skipped"  # reason: a checkpoint that does not load
    STALE_WRITER = "stale_writer"      # version, generation, current, pid, host: a replaced PS's write, refused
    CHECKPOINT_NONE = "checkpoint_none"  # reason: none yet, the replacement starts at version 0
    PROMOTED = "promoted"              # a chain replica became the head at version
    PS_TIMING = "ps_timing"            # medians of recv_s, apply_s, after_s, send_s; train_cpu_s, train_wall_s; idle_class
    # workers
    STEP = "step"                      # version, applied, samples, compute_s, loss, (async) staleness
    CONNECTED = "connected"            # version, generation: (re)connected to a PS
    HANDOVER = "handover"              # stateless: buffered, dropped, policy, vectors, seconds
    CATCH_UP = "catch_up"              # hybrid: the leader's kept gradients sent to a promoted head: vectors, seconds
    RECOVERED = "recovered"            # the outage (psmodes.outage.Outage.recovered)
    REGROUPED = "regrouped"            # the leader: the workers' group made again without the dead or with a
                                       # replacement (psmodes.elastic): workers, lost, joined, size, seconds (the
                                       # leader's detection to the new group), since_loss_s (a replacement: since
                                       # the group fell short)
    # the evaluator
    EVAL = "eval"                      # ps_step, value, metric, final, t_snapshot, samples, eval_s
    # the launcher
    LAUNCH = "launch"                  # the mpirun command and its start
    KILL = "kill"                      # a fault sent: target role, pid, host, t_s
    HANG = "hang"                      # SIGSTOP sent: role, pid, host, at, for_s (None: until fenced)
    CONTINUED = "continued"            # the SIGCONT that ended a hang (or a slow phase)
    LANDED = "landed"                  # a hang's or slow phase's script: its host's clock when it sent its signal
    SLOW = "slow"                      # a slow phase began: role, pid, host, for_s, factor
    PARTITION = "partition"            # the target's host cut off for for_s: host, link, peer
    FENCE = "fence"                    # a suspect SIGKILLed: pid, host, role, how (launcher or self), suspect
    FENCE_REFUSED = "fence_refused"    # a suspicion not acted on: reason (its rank cut off; the suspect dead already)
    KILL_FAILED = "kill_failed"        # a kill that could not be sent
    FAULT_SKIPPED = "fault_skipped"    # a --failures worker:... due with only the leader left: kind, at, reason
    KILL_NOT_REACHED = "kill_not_reached"  # a scheduled kill whose time or step never came
    CRASH = "crash"                    # a rank's crash report read from mpirun.log
    LINGERED = "lingered"              # mpirun stopped after every rank had left
    EXIT = "exit"                      # the launcher's end: return code, reason
    JOB_EXIT = "job_exit"              # job-restart: one attempt's job ended
    RESTART = "restart"                # job-restart: the next attempt starts
    START_FAILED = "start_failed"      # Open MPI failed before any rank started; started again (or given up)
    CLOCK_OFFSETS = "clock_offsets"    # per-host clock offsets (clusters)


class EventLog:
    def __init__(self, run_dir: str | Path, name: str) -> None:
        self.name = name
        folder = Path(run_dir) / "events"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}.jsonl"
        self._fh = open(self.path, "a", buffering=1)
        self._lock = threading.Lock()  # the PS's checkpoint thread logs too

    def emit(self, ev: Ev | str, **fields) -> dict:
        record = {"t": time.time(), "ev": str(Ev(ev)), "who": self.name, **fields}  # ValueError: not declared
        line = json.dumps(record, separators=(",", ":"), default=_plain) + "\n"
        with self._lock:
            self._fh.write(line)
        return record

    def close(self) -> None:
        self._fh.close()


def _plain(value):
    """numpy scalars and arrays -> JSON types."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot log a {type(value).__name__}")


def read_events(path: str | Path) -> Iterator[dict]:
    """Records of one JSONL file; a torn or garbled line (a killed writer) is skipped."""
    try:
        with open(path, "r", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and "ev" in rec and "t" in rec:
                    yield rec
    except FileNotFoundError:
        return


def read_run_events(run_dir: str | Path) -> list[dict]:
    """All events of a run, every process, sorted by time."""
    folder = Path(run_dir) / "events"
    records = [rec for path in sorted(folder.glob("*.jsonl")) for rec in read_events(path)]
    records.sort(key=lambda r: r["t"])
    return records

"""Runs one job: creates the run directory, starts mpirun, streams progress,
injects the scheduled kills, enforces the watchdog, and writes the summary
and the report when the job ends - also when it dies or the user interrupts.

The run directory is complete when ``summary.json`` exists; until then it
holds ``config.json``, ``command.txt``, ``mpirun.log`` and the event streams
recorded so far, which stay readable whatever happens.

mpirun is started with PR_SET_PDEATHSIG (Linux): if the launcher is SIGKILLed,
mpirun gets SIGKILL too and its ranks follow theirs (psmodes.main), so a
killed launcher (``psbench run`` or a sweep) leaves no orphan job behind.
"""
from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from psmodes.config import RunConfig
from psmodes.events import EventLog

from .faults import Injector, parse_kills
from .mpirun import mpirun_command, mpirun_env
from .runreport import write_run_report
from .summary import summarize, write_summary

FAILED_GRACE_S = 15.0  # after a rank reports a fatal failure, how long the others get to finish


class EventTail:
    """Incrementally reads new events from a run's JSONL files."""

    def __init__(self, run_dir: Path) -> None:
        self.folder = run_dir / "events"
        self.offsets: dict[Path, int] = {}

    def new(self) -> list[dict]:
        out: list[dict] = []
        for path in sorted(self.folder.glob("*.jsonl")):
            if path.name == "launcher.jsonl":
                continue
            off = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(off)
                    chunk = fh.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n") + 1  # leave a partial last line for the next read
            self.offsets[path] = off + end
            if end:
                import json

                for line in chunk[:end].splitlines():
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        return out


try:  # loaded before any fork: the child of Popen only calls prctl
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None
PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int):
    """preexec_fn for mpirun: SIGKILL it when the launcher dies (Linux)."""

    def preexec() -> None:
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
            if os.getppid() != parent_pid:  # the launcher died before prctl took effect
                os._exit(1)

    return preexec


def run_job(cfg: RunConfig, quiet: bool = False, tick=None) -> dict:
    """Runs the job of ``cfg`` to its end and returns its summary. ``tick(elapsed_s,
    ps_step)`` is called about ten times a second (a sweep's progress bar)."""
    run_dir = Path(cfg.run_dir)
    (run_dir / "events").mkdir(parents=True, exist_ok=True)
    cfg.save(run_dir / "config.json")
    cmd = mpirun_command(cfg)
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    log = EventLog(run_dir, "launcher")
    points = parse_kills(cfg.kill_ps, "ps", cfg.duration_s) + sorted(
        parse_kills(cfg.kill_replica, f"replica{cfg.replicas}", cfg.duration_s), key=lambda p: (p.at_s or 0, p.at_step or 0))
    points.sort(key=lambda p: (p.at_s if p.at_s is not None else float("inf"), p.at_step or 0))
    injector = Injector(run_dir, points, log)
    deadline = cfg.resolved_deadline()
    log.emit("launch", command=cmd, deadline_s=deadline, argv=sys.argv)
    t_start = time.time()
    with open(run_dir / "mpirun.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=mpirun_env(),
                                start_new_session=True, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with(os.getpid()))
    tail = EventTail(run_dir)
    progress = Progress(cfg, quiet)
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    exit_reason = None
    t0 = None
    step = None
    failed_at = None
    try:
        while proc.poll() is None:
            for e in tail.new():
                if e["ev"] == "train_start":
                    t0 = e["t0_ms"] / 1000.0
                elif e["ev"] in ("step", "update") and e.get("applied", True):
                    step = e["version"]
                elif e["ev"] == "failed" and failed_at is None:
                    failed_at = time.time()
                progress.event(e)
            elapsed = time.time() - t0 if t0 else None
            injector.poll(elapsed, step)
            progress.refresh(elapsed, step)
            if tick is not None:
                tick(elapsed, step)
            if time.time() - t_start > deadline:
                exit_reason = f"watchdog: the run exceeded its {deadline:.0f} s deadline and was stopped"
                break
            if failed_at and time.time() - failed_at > FAILED_GRACE_S:
                exit_reason = None  # taken from the failure event in the summary
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        exit_reason = "interrupted by the user"
    finally:
        stop_group(proc)
        progress.close()
        signal.signal(signal.SIGTERM, previous_term)
    injector.finish()
    for e in tail.new():
        progress.event(e)
    log.emit("exit", returncode=proc.returncode, reason=exit_reason)
    log.close()
    summary = summarize(run_dir, exit_reason=exit_reason, wall_s=time.time() - t_start)
    write_summary(run_dir, summary)
    write_run_report(run_dir)
    return summary


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End mpirun and every rank it started (they share its process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers (spawned replacements) too
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


class Progress:
    """One progress line: PS step, accuracy, samples/s (tqdm)."""

    def __init__(self, cfg: RunConfig, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.cfg = cfg
        self.acc = None
        self.samples = 0
        self.t_first = None
        self.rate = None
        self.bar = None
        self.last_print = 0.0
        self.step = 0
        if not self.quiet and self.tty:
            from tqdm import tqdm

            total = cfg.steps if cfg.steps else int(cfg.duration_s)
            unit = "step" if cfg.steps else "s"
            self.bar = tqdm(total=total, unit=unit, desc=f"{cfg.benchmark}/{cfg.mode}", leave=True,
                            dynamic_ncols=True)

    def event(self, e: dict) -> None:
        if e["ev"] == "eval":
            self.acc = e["accuracy"]
        elif e["ev"] == "step":
            self.samples += e.get("samples", 0)
            self.t_first = self.t_first or e["t"]
            if e["t"] > self.t_first:
                self.rate = self.samples / (e["t"] - self.t_first)
            if e.get("applied"):
                self.step = e["version"]
        elif e["ev"] in ("detect", "kill", "recovered", "failed") and not self.quiet:
            self._write(f"[{e['who']}] {e['ev']}: " + ", ".join(
                f"{k}={v}" for k, v in e.items() if k in ("via", "dead", "reason", "idle_s", "lost_steps", "role", "pid")))

    def _write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def refresh(self, elapsed, step) -> None:
        if self.quiet:
            return
        if self.bar is None:  # not a terminal: a plain line every 5 s
            if time.monotonic() - self.last_print >= 5:
                self.last_print = time.monotonic()
                acc = f"{self.acc:.3f}" if self.acc is not None else "-"
                rate = f"{self.rate:.0f}" if self.rate else "-"
                self._write(f"step {self.step}  acc {acc}  samples/s {rate}  t {elapsed or 0:.0f}s")
            return
        self.bar.n = (self.step if self.cfg.steps else int(elapsed or 0))
        post = {"step": self.step}
        if self.acc is not None:
            post["acc"] = f"{self.acc:.3f}"
        if self.rate:
            post["samples/s"] = f"{self.rate:.0f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

"""Runs one job: creates the run directory, starts mpirun, streams progress,
injects the scheduled kills, enforces the watchdog, and writes the summary
and the report when the job ends - also when it dies or the user interrupts.

The run directory is complete when ``summary.json`` exists; until then it
holds ``config.json``, ``command.txt``, ``mpirun.log`` and the event streams
recorded so far, which stay readable whatever happens.

mpirun is started with PR_SET_PDEATHSIG (:mod:`launch.remote.lifetime`): if the
launcher is SIGKILLed, mpirun gets SIGKILL too and its ranks follow theirs
(psmodes.main), SIGKILL too, which a stopped (hung) rank cannot defer, so a killed
launcher (``psbench run`` or a sweep) leaves no orphan job behind.

With ``--recovery job-restart`` one run may be several jobs: see :func:`run_job`.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from psmodes.atomic import write_text_atomic
from psmodes.config import RunConfig
from psmodes.events import EventLog

from ..analysis.runreport import write_run_report
from ..analysis.summary import summarize, write_summary
from . import crashes
from ..faultkinds import EVENTS, plan_of
from ..remote.lifetime import die_with
from ..remote.routes import close_ssh_masters, is_local, kill_route
from .clocks import measure_offset
from .hosts import placement_of
from .injector import Injector
from .mpirun import (START_RETRIES, launch_command, mpirun_env, purge_leftovers, rank_env, start_message,
                     transient_start_failure, with_rank_env)

FAILED_GRACE_S = 15.0  # after a rank reports a fatal failure, how long the others get to finish
RESTART_GRACE_S = 3.0  # the same for a job that ends to be restarted (--recovery job-restart)
LINGER_GRACE_S = 10.0  # training finished and every rank has left: how long mpirun gets to exit


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
                for line in chunk[:end].splitlines():
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        out.sort(key=lambda e: e.get("t", 0.0))  # across the ranks' files: a suspicion before the one it explains
        return out


def measure_offsets(cfg: RunConfig, placement, log) -> None:
    """Clock offsets of the run's other hosts against the launcher's clock (launch/driver/clocks.py)."""
    remote = sorted({h for _, h in placement.ranks if not is_local(h)})
    if remote:
        offsets = [measure_offset(h, kill_route(h, cfg.kill_via)) for h in remote]
        log.emit("clock_offsets", offsets=offsets)


INTERRUPTED = "interrupted by the user"  # the exit reason of a run stopped by SIGINT/SIGTERM


def run_job(cfg: RunConfig, quiet: bool = False, tick=None, report: bool = True) -> dict:
    """Runs the job of ``cfg`` to its end and returns its summary. ``tick(elapsed_s,
    ps_step)`` is called about ten times a second (a sweep's progress bar). ``report=False``
    (``--no-report``): no report.md and plot, whose matplotlib and pandas cost the launcher
    about 2 s a run on a slow machine (the tests' runs, 2026-12-05).

    ``--recovery job-restart``: when the job ends because the PS was killed and
    training is not finished, the launcher waits ``--restart-delay`` and starts
    the same command again (at most ``--max-restarts`` times); ``restart.json``
    tells the new PS to resume from the newest checkpoint on the run's clock."""
    run_dir = Path(cfg.run_dir)
    (run_dir / "events").mkdir(parents=True, exist_ok=True)
    cfg.save(run_dir / "config.json")
    placement = placement_of(cfg)
    placement.write(run_dir)
    if not quiet and (cfg.hosts or placement.notes):
        print(placement.table(), file=sys.stderr, flush=True)
    cmd = with_rank_env(launch_command(cfg), cfg)
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    log = EventLog(run_dir, "launcher")
    injector = Injector(run_dir, plan_of(cfg).fresh_points(), log, cfg.kill_via, cfg.slow_factor,
                        peer_host=next((h for _, h in placement.ranks if is_local(h)), None), workers=cfg.workers)
    deadline = cfg.resolved_deadline()
    log.emit("launch", command=cmd, deadline_s=deadline, argv=sys.argv, placement=placement.to_dict())
    measure_offsets(cfg, placement, log)
    injector.watch_hosts(h for _, h in placement.ranks)
    t_start = time.time()
    tail = EventTail(run_dir)
    progress = Progress(cfg, quiet)
    watch = Watch(cfg, injector, tail, progress, tick, t_start, deadline, crashes.CrashScan(run_dir), log)
    previous_term = signal.signal(signal.SIGTERM, raise_interrupt)
    attempt = 0
    start_failures = 0
    header = None
    proc = None
    try:
        while True:
            t_attempt = time.time()
            log_at = _size(run_dir / "mpirun.log") if header else 0
            proc = start(cmd, run_dir, cfg, header)
            watch.attempt(proc)
            stop_group(proc)
            log.emit("job_exit", attempt=attempt, returncode=proc.returncode, t_exit=time.time(),
                     finished=watch.finished)
            failure = start_failure(run_dir, log_at, watch)
            if failure:
                start_failures += 1
                log.emit("start_failed", attempt=start_failures, reason=failure)
                if start_failures > START_RETRIES:
                    watch.exit_reason = f"Open MPI failed to start the job {start_failures} times: {failure}"
                    break
                header = f"psbench: started again after a start-up failure ({start_failures})"
                if not quiet:
                    progress._write(f"[launcher] Open MPI failed to start the job ({failure}); starting it again")
                continue
            if watch.exit_reason is None and not watch.ranks.started and watch.t0 is None and not watch.finished:
                # a start-up failure starting again does not cure: no rank ran, so Open MPI's message is the reason
                why = start_message(_read_from(run_dir / "mpirun.log", log_at))
                watch.exit_reason = f"Open MPI did not start the job: {why}"
                break
            if not restartable(cfg, watch, injector, t_attempt, attempt):
                # e.g. a lost host's daemon (--kill-node); PRRTE 5 (--runtime prrte5) reports one and goes on
                if watch.exit_reason is None and not watch.finished and cfg.runtime == "pypi":
                    node_lost = any(k.get("daemons") for k in injector.done)
                    aborted = crashes.runtime_abort(_read_from(run_dir / "mpirun.log", log_at), node_lost)
                    if aborted:
                        watch.exit_reason, its_own = aborted
                        if its_own:  # a failure nobody injected: recorded like a rank's crash
                            log.emit("crash", reason=watch.exit_reason, role="mpirun", pid=proc.pid,
                                     host=socket.gethostname(), signal=None)
                crashed = crashes.launcher_signal(proc.returncode)
                if watch.exit_reason is None and not watch.finished and crashed:
                    watch.exit_reason = crashed  # mpirun's own crash: a failure nobody injected
                    log.emit("crash", reason=crashed, role="mpirun", pid=proc.pid, host=socket.gethostname(),
                             signal=-proc.returncode)
                break
            attempt += 1
            header = f"psbench: restart {attempt}"
            if not watch.sleep(cfg.restart_delay_s):
                break
            write_text_atomic(run_dir / "restart.json",
                              json.dumps({"attempt": attempt, "t0_ms": int(watch.t0 * 1000)}) + "\n")
            log.emit("restart", attempt=attempt, t_restart=time.time())
            if not quiet:
                progress._write(f"[launcher] restart {attempt}: the job ended after the PS was killed; "
                                "resuming from the newest checkpoint")
    except KeyboardInterrupt:
        watch.exit_reason = INTERRUPTED
    finally:
        if proc is not None:
            stop_group(proc)
        close_ssh_masters([h for _, h in placement.ranks if kill_route(h, cfg.kill_via) == "ssh"]
                          + [k["host"] for k in injector.done if k.get("how") == "ssh"])
        progress.close()
        signal.signal(signal.SIGTERM, previous_term)
    injector.finish()
    for e in tail.new():
        progress.event(e)
    log.emit("exit", returncode=proc.returncode if proc else None, reason=watch.exit_reason, restarts=attempt)
    log.close()
    summary = summarize(run_dir, exit_reason=watch.exit_reason, wall_s=time.time() - t_start)
    write_summary(run_dir, summary)
    if report:
        write_run_report(run_dir)
    return summary


def start(cmd: list[str], run_dir: Path, cfg: RunConfig, header: str | None) -> subprocess.Popen:
    """Starts the job; its output goes to ``mpirun.log``, after the ``header`` line of a job started
    again (a whole-job restart or a start-up failure) and the output of the jobs before it."""
    purge_leftovers()
    with open(run_dir / "mpirun.log", "ab" if header else "wb") as out:
        if header:
            out.write(f"\n==== {header} ====\n".encode())
            out.flush()
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**mpirun_env(cfg), **rank_env(cfg)},
                                start_new_session=True, stdin=subprocess.DEVNULL,
                                preexec_fn=die_with(os.getpid()))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def start_failure(run_dir: Path, log_at: int, watch: "Watch") -> str | None:
    """Why Open MPI failed to start this job, when it did so before any rank started and for a
    reason that starting it again cures (launch/driver/mpirun.py); None otherwise."""
    if watch.ranks.started or watch.t0 is not None or watch.exit_reason is not None:
        return None
    return transient_start_failure(_read_from(run_dir / "mpirun.log", log_at))


def _read_from(path: Path, offset: int, limit: int = 4 << 20) -> bytes:
    """Up to ``limit`` bytes of ``path`` from ``offset`` (this attempt's part of mpirun.log)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(limit)
    except FileNotFoundError:
        return b""


def restartable(cfg: RunConfig, watch: "Watch", injector: Injector, t_attempt: float, attempt: int) -> bool:
    """job-restart: restart when this attempt ended after a PS kill (or fence), before training finished."""
    return (cfg.recovery == "job-restart" and watch.exit_reason is None and not watch.finished
            and watch.t0 is not None and attempt < cfg.max_restarts
            and any(k["role"] == "ps" and k["t"] >= t_attempt for k in injector.deaths))


class Watch:
    """The launcher's loop over one attempt of the job: events, kills, progress, watchdog."""

    def __init__(self, cfg, injector, tail, progress, tick, t_start, deadline, crash_scan, log) -> None:
        self.cfg, self.injector, self.tail, self.progress, self.tick = cfg, injector, tail, progress, tick
        self.t_start, self.deadline = t_start, deadline
        self.crash_scan, self.log = crash_scan, log
        self.t0 = None
        self.step = None
        self.exit_reason = None
        self.finished = False
        self.failed_at = None
        self.ranks = Ranks()
        self.all_left_at = None
        self.finished_at = None  # when a worker's done (completed) was seen (the leader may have died)

    def _poll(self) -> None:
        for e in self.tail.new():
            self.ranks.event(e)
            if e["ev"] == "train_start":
                self.t0 = e["t0_ms"] / 1000.0
            elif e["ev"] in ("step", "update") and e.get("applied", True):
                self.step = e["version"]
            elif e["ev"] == "failed" and self.failed_at is None:
                self.failed_at = time.time()
            elif e["ev"] == "done" and e["who"].startswith("worker") and e.get("completed"):
                self.finished = True
                self.finished_at = self.finished_at or time.time()
                self.injector.training_over()
            elif e["ev"] == "killpoint":  # a rank stopped itself at a test kill point: kill it there
                self.injector.stopped_at(e)
            elif e["ev"] == "suspect":  # a rank waited past --suspect-after for this process: fence it
                self.injector.fence(e)
            self.progress.event(e)
        for crash in self.crash_scan.new():
            # the rank recorded nothing itself; the launcher records it. The job goes on: the survivors
            # repair it like any death (ULFM tells them), so this is no failure of the run by itself
            self.progress.event(self.log.emit("crash", reason=crashes.reason(crash), **crash))
            self.ranks.died(crash["host"], crash["pid"])
        for kill in self.injector.deaths:
            self.ranks.died(kill["host"], kill["pid"])
        elapsed = time.time() - self.t0 if self.t0 else None
        self.injector.poll(elapsed, self.step)
        self.progress.refresh(elapsed, self.step)
        if self.tick is not None:
            self.tick(elapsed, self.step)

    def _overdue(self) -> bool:
        if time.time() - self.t_start > self.deadline:
            self.exit_reason = f"watchdog: the run exceeded its {self.deadline:.0f} s deadline and was stopped"
            return True
        return False

    def attempt(self, proc: subprocess.Popen) -> None:
        self.failed_at = None
        while proc.poll() is None:
            self._poll()
            if self._overdue():
                return
            # after a failure the others get a grace period to finish on their own; a job that
            # will be restarted is going down anyway (job-restart: a PS death ends the job)
            grace = RESTART_GRACE_S if self.cfg.recovery == "job-restart" else FAILED_GRACE_S
            if self.failed_at and time.time() - self.failed_at > grace:
                return  # the reason is taken from the failure event in the summary
            if self._lingering():
                return
            self._release_after_training()
            self._pause()
        self._poll()

    def _release_after_training(self) -> None:
        """Training finished: a rank the injector stopped for good is needed by nobody to train, but
        its own end (a PS's final evaluation) and mpirun's wait for it; --suspect-after later it is
        continued. Seen in psbench chaos (chain, seed 92, trial-000): the promoted head stopped 16 ms
        after the last step, nobody waits on a PS then, and the run waited for its 198 s watchdog."""
        settle = max(self.cfg.suspect_after_s or 0.0, 1.0)
        if self.finished_at is not None and time.time() - self.finished_at >= settle:
            self.injector.release_hangs()

    def _lingering(self) -> bool:
        """Training finished and every rank that started has left, but mpirun has not exited:
        seen after a spawn whose root was killed in it (prterun logged "LAUNCHER JOB OBJECT NOT
        FOUND" and waited for that job until the watchdog). Its processes never started
        psbench; stopping mpirun stops them. The run is complete: recorded, not a failure."""
        if not (self.finished and self.ranks.all_left()):
            self.all_left_at = None
            return False
        self.all_left_at = self.all_left_at or time.time()
        if time.time() - self.all_left_at < LINGER_GRACE_S:
            return False
        self.progress.event(self.log.emit(
            "lingered", seconds=round(time.time() - self.all_left_at, 1),
            reason=f"every rank had left {LINGER_GRACE_S:.0f} s before and mpirun had not exited; it was stopped"))
        return True

    def _pause(self, seconds: float = 0.1) -> None:
        """Between polls; a pending relative kill (+10ms) is polled every 5 ms meanwhile."""
        end = time.monotonic() + seconds
        while self.injector.urgent() and time.monotonic() < end:
            self.injector.poll(time.time() - self.t0 if self.t0 else None, self.step)
            time.sleep(0.005)
        time.sleep(max(0.0, end - time.monotonic()))

    def sleep(self, seconds: float) -> bool:
        """The restart delay, watching the clock; False if the deadline passed meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self._overdue():
                return False
            if self.tick is not None:
                self.tick(time.time() - self.t0 if self.t0 else None, self.step)
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))
        return True


class Ranks:
    """Which of the job's processes are still there, from their event streams: a process
    has started when it recorded its start, and left when it recorded its usage (its last
    event, on every orderly exit) or was killed or crashed (:meth:`died`)."""

    def __init__(self) -> None:
        self.started: dict[str, tuple[str, int]] = {}  # event stream -> (short host name, pid)
        self.left: set[str] = set()
        self.dead: set[tuple[str, int]] = set()

    def event(self, e: dict) -> None:
        if e["ev"] == "start" and "pid" in e:
            self.started[e["who"]] = (_short(e.get("host")), e["pid"])
            self.left.discard(e["who"])  # the same stream in the next attempt of a restarted job
        elif e["ev"] == "usage":
            self.left.add(e["who"])

    def died(self, host: str, pid: int) -> None:
        self.dead.add((_short(host), pid))

    def all_left(self) -> bool:
        return bool(self.started) and all(who in self.left or where in self.dead
                                          for who, where in self.started.items())


def _short(host: str | None) -> str:
    return str(host or "").split(".")[0]


def raise_interrupt(signum, frame):
    """A SIGTERM handler: stop as Ctrl-C stops (the launchers' cleanup runs in their finally blocks)."""
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
    """One progress line: PS step, the workload's metric (accuracy, perplexity...), samples/s (tqdm)."""

    def __init__(self, cfg: RunConfig, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.cfg = cfg
        self.value, self.metric = None, "metric"
        self.samples = 0
        self.t_first = None
        self.rate = None
        self.bar = None
        self.last_print = 0.0
        self.step = 0
        if not self.quiet and self.tty:
            total = cfg.steps if cfg.steps else int(cfg.duration_s)
            unit = "step" if cfg.steps else "s"
            self.bar = tqdm(total=total, unit=unit, desc=f"{cfg.benchmark}/{cfg.mode}", leave=True,
                            dynamic_ncols=True)

    def event(self, e: dict) -> None:
        if e["ev"] == "eval":
            self.value, self.metric = e["value"], e.get("metric", self.metric)
        elif e["ev"] == "step":
            self.samples += e.get("samples", 0)
            self.t_first = self.t_first or e["t"]
            if e["t"] > self.t_first:
                self.rate = self.samples / (e["t"] - self.t_first)
            if e.get("applied"):
                self.step = e["version"]
        elif e["ev"] in ("detect", *EVENTS, "suspect", "fence", "recovered", "failed", "crash") and not self.quiet:
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
                value = f"{self.value:.3f}" if self.value is not None else "-"
                rate = f"{self.rate:.0f}" if self.rate else "-"
                self._write(f"step {self.step}  {self.metric} {value}  samples/s {rate}  t {elapsed or 0:.0f}s")
            return
        self.bar.n = (self.step if self.cfg.steps else int(elapsed or 0))
        post = {"step": self.step}
        if self.value is not None:
            post[self.metric] = f"{self.value:.3f}"
        if self.rate:
            post["samples/s"] = f"{self.rate:.0f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

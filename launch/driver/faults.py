"""The fault injector: SIGKILLs the current PS (or a chain replica) on schedule.

A kill point (:mod:`launch.driver.kills`) is ``AT`` = a time since training
started (``20s``, ``1.5m``), a share of ``--duration`` (``33%``: a third of the
way; lets one sweep file serve any run length), or a PS step (``step:800``).
The target is whichever process holds the role at that moment, read from the pid file it writes when it takes the role
(``<run_dir>/pids/<role>.json``). Kills are taken in order; a kill waits for
a live target that it has not killed before (the replacement, for a second
kill), and a kill never reached before the run ends is recorded as such.

A PS on another host is killed there: through ``srun --overlap`` inside a
Slurm job, through ``ssh`` otherwise (``--kill-via`` forces a route). The kill
time is taken on the launcher's clock; a remote kill also prints the host's
clock at the kill, and :func:`measure_offset` estimates each host's clock
offset so that latencies across hosts can be corrected (``summary.json``:
``clock_offsets``).
"""
from __future__ import annotations

import json
import os
import selectors
import shlex
import signal
import subprocess
import time
from pathlib import Path

from psmodes.killpoints import ENV

from .hosts import in_slurm, is_local
from .kills import KillPoint, parse_kills


def kill_point_env(cfg) -> dict[str, str]:
    """``PSBENCH_KILL_POINT`` for the ranks: the point:NAME kills of the run, in order."""
    kills = parse_kills(list(cfg.kill_ps), "ps", cfg.duration_s) + parse_kills(
        list(cfg.kill_replica), "replica", cfg.duration_s)
    names = [p.point for p in kills if p.point]
    return {ENV: ",".join(names)} if names else {}


def with_kill_points(cmd: list[str], cfg) -> list[str]:
    """mpirun: forward ``PSBENCH_KILL_POINT`` to every rank (``-x``), also on other hosts."""
    if not kill_point_env(cfg) or cfg.launcher != "mpirun":
        return cmd
    return [cmd[0], "-x", ENV, *cmd[1:]]


def read_pid_file(run_dir: Path, role: str) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "pids" / f"{role}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


KILL_SCRIPT = 'date +%s.%N && exec kill -9 "$1"'  # prints the host's clock at the kill, then kills


def kill_route(host: str, kill_via: str = "auto", env: dict | None = None) -> str:
    """How to reach ``host``: local, srun (inside a Slurm job) or ssh."""
    if kill_via != "auto":
        return kill_via
    if is_local(host):
        return "local"
    return "srun" if in_slurm(env) else "ssh"


def remote_command(route: str, host: str, argv: list[str], env: dict | None = None) -> list[str]:
    """``argv`` run on ``host`` through srun (a step that overlaps the job's) or ssh."""
    env = os.environ if env is None else env
    if route == "srun":
        return ["srun", "--overlap", f"--jobid={env.get('SLURM_JOB_ID', '')}", f"--nodelist={host}", "-N1", "-n1",
                "--quiet", "--", *argv]
    if route == "ssh":  # ssh joins its arguments into one remote shell line: quote each one
        return ["ssh", *SSH_OPTIONS, *ssh_master_options(), host, "--", shlex.join(argv)]
    raise ValueError(f"no remote route {route!r}")


SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=5"]


def ssh_master_options() -> list[str]:
    """One ssh connection per host, kept open (ControlMaster): the clock probes after the
    first and the kill reuse it, so their round trips are milliseconds, not a connection
    set-up each (which made the offsets' error bounds tenths of a second)."""
    folder = Path(f"/tmp/psbench-ssh-{os.getuid()}")
    folder.mkdir(mode=0o700, exist_ok=True)
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={folder}/%C", "-o", "ControlPersist=60"]


def close_ssh_masters(hosts, timeout: float = 5.0) -> None:
    """End the kept-open ssh connections to ``hosts`` (no process outlives the run)."""
    for host in sorted(set(hosts)):
        try:
            subprocess.run(["ssh", *ssh_master_options(), "-O", "exit", host], capture_output=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            pass


def kill_command(route: str, host: str, pid: int, env: dict | None = None) -> list[str]:
    return remote_command(route, host, ["sh", "-c", KILL_SCRIPT, "sh", str(int(pid))], env)


def sigkill(info: dict, kill_via: str = "auto") -> dict:
    """SIGKILL the process of a pid file, here or on its host. Returns how, and for a
    remote kill the host's clock at the kill (``t_remote``) and the round trip."""
    route = kill_route(info["host"], kill_via)
    if route == "local":
        os.kill(int(info["pid"]), signal.SIGKILL)
        return {"how": "local"}
    t0 = time.time()
    out = subprocess.run(kill_command(route, info["host"], info["pid"]), capture_output=True, text=True,
                         timeout=20, stdin=subprocess.DEVNULL)
    t1 = time.time()
    if out.returncode != 0:
        raise KillFailed(f"{route} kill of pid {info['pid']} on {info['host']} failed "
                         f"(exit {out.returncode}): {out.stderr.strip()[-300:]}")
    remote = _first_float(out.stdout)
    return {"how": route, "t_remote": remote, "rtt_s": round(t1 - t0, 4)}


class KillFailed(RuntimeError):
    pass


def _first_float(text: str) -> float | None:
    for word in text.split():
        try:
            return float(word)
        except ValueError:
            continue
    return None


def measure_offset(host: str, route: str, samples: int = 5, timeout: float = 15.0) -> dict:
    """The clock offset of ``host`` against this machine's clock, NTP style: one remote
    shell prints its clock each time it reads a line; per ping, offset = remote time minus
    the midpoint of the ping, and the ping with the shortest round trip wins (half of it
    bounds the error). A persistent session keeps the pings symmetric: starting a remote
    command per probe put the remote clock reading at the end of a long, one-sided delay.
    Local hosts share this clock (offset 0)."""
    if route == "local":
        return {"host": host, "route": route, "offset_s": 0.0, "error_s": 0.0}
    try:
        proc = subprocess.Popen(remote_command(route, host, ["sh", "-c", "while read x; do date +%s.%N; done"]),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return {"host": host, "route": route, "offset_s": None, "error": str(exc)}
    best, error = None, None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        for i in range(samples + 1):  # the first ping also waits for the session to start: not used
            t0 = time.time()
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            if not sel.select(timeout):
                error = f"no answer from {host} within {timeout:.0f} s"
                break
            line = proc.stdout.readline()
            t1 = time.time()
            remote = _first_float(line.decode(errors="replace"))
            if remote is None:
                error = f"unexpected answer {line[:80]!r}"
                break
            if i and (best is None or t1 - t0 < best[0]):
                best = (t1 - t0, remote - (t0 + t1) / 2)
    except (OSError, ValueError) as exc:
        error = str(exc)
    finally:
        sel.close()
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if best is None:
        stderr = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        return {"host": host, "route": route, "offset_s": None, "error": (error or stderr or "no answer")[-300:]}
    return {"host": host, "route": route, "offset_s": round(best[1], 6), "error_s": round(best[0] / 2, 6)}


class Injector:
    def __init__(self, run_dir: Path, points: list[KillPoint], log, kill_via: str = "auto") -> None:
        self.run_dir = Path(run_dir)
        self.kill_via = kill_via
        self.points = points
        self.log = log
        self.killed: set[tuple[int, str]] = set()
        self.done: list[dict] = []

    def urgent(self) -> bool:
        """A relative kill (+DUR) is next: the launcher's loop polls fast."""
        return bool(self.points) and self.points[0].after_s is not None and bool(self.done)

    def stopped_at(self, event: dict) -> None:
        """A rank stopped itself at a kill point (its ``killpoint`` event): SIGKILL it there."""
        match = next((p for p in self.points if p.point and p.point.partition("@")[0] == event.get("point")), None)
        if match is None:  # not asked for (cannot happen: the launcher arms only its points); never leave it stopped
            match = KillPoint(event.get("role", "ps"), None, None, f"point:{event.get('point')}", point=event.get("point"))
        else:
            self.points.remove(match)
        info = {"pid": event["pid"], "host": event.get("host") or "localhost", "rank": None,
                "generation": event.get("generation")}
        self._kill(info, match, None, event.get("version"), extra={"point": event.get("point")})

    def poll(self, elapsed: float | None, step: int | None) -> None:
        """Called by the launcher's loop; fires at most the next due kill."""
        if not self.points:
            return
        point = self.points[0]
        if point.after_s is not None:
            if not self.done or time.time() - self.done[-1]["t_kill"] < point.after_s:
                return
        elif not point.due(elapsed, step):
            return
        info = read_pid_file(self.run_dir, point.target)
        if info is None or (info["pid"], info["host"]) in self.killed or (
                is_local(info["host"]) and not alive(int(info["pid"]))):  # a remote pid cannot be checked here
            return  # no live target yet (e.g. the replacement is still starting): try again next poll
        self.points.pop(0)
        self._kill(info, point, elapsed, step)

    def _kill(self, info: dict, point: KillPoint, elapsed: float | None, step: int | None,
              extra: dict | None = None) -> None:
        t = time.time()
        try:
            how = sigkill(info, self.kill_via)
        except (KillFailed, OSError, subprocess.TimeoutExpired) as exc:
            self.log.emit("kill_failed", pid=info["pid"], host=info["host"], role=point.target, at=point.spec,
                          error=str(exc))
            return
        self.killed.add((info["pid"], info["host"]))
        # t_kill: the launcher's clock when the kill was sent; a remote kill also records the
        # PS host's clock when it was carried out (t_remote) and the round trip
        rec = self.log.emit("kill", t_kill=t, pid=info["pid"], host=info["host"], role=point.target,
                            rank=info.get("rank"), generation=info.get("generation"), at=point.spec,
                            elapsed_s=elapsed, step=step, signal="SIGKILL", **how, **(extra or {}))
        self.done.append(rec)

    def finish(self) -> None:
        for point in self.points:
            self.log.emit("kill_not_reached", role=point.target, at=point.spec,
                          reason="the run ended before this kill point")
        self.points = []

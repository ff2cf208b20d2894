"""How the launcher reaches a rank's host: here, through ``srun --overlap`` inside a Slurm job, or
through ``ssh`` (``--kill-via`` forces one), and how a script runs there. The fault kinds
(launch/faultkinds/) send their signals and scripts by these routes, the injector its fences, the
reachability watch its heartbeats and :mod:`launch.driver.clocks` its clock probes.
"""
from __future__ import annotations

import functools
import os
import shlex
import socket
import subprocess
from pathlib import Path

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def is_local(host: str) -> bool:
    """Whether ``host`` names this machine."""
    return host in LOCAL_NAMES or host in _own_names()


@functools.lru_cache(maxsize=1)
def _own_names() -> frozenset:
    return frozenset({socket.gethostname(), socket.getfqdn()})


def in_slurm(env: dict | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"))

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


class KillFailed(RuntimeError):
    pass


def first_float(text: str) -> float | None:
    for word in text.split():
        try:
            return float(word)
        except ValueError:
            continue
    return None


def script_command(route: str, host: str, script: str, args: list[str], env: dict | None = None) -> list[str]:
    argv = ["sh", "-c", script, "sh", *args]
    return argv if route == "local" else remote_command(route, host, argv, env)


def tied_to_session(script: str) -> str:
    """``script`` for another host, ended with the launcher's session to it: killing ssh here leaves a
    command without a terminal running there (a timed hang's sleep and SIGCONT, a slow phase's duty
    cycle outlived their run). A watcher in the script's process group writes to the session every
    half second and, once a write fails, kills the group (SIGPIPE ignored, so the write fails)."""
    return (f"( trap '' PIPE; while sleep 0.5; do echo . || kill -9 0; done ) & w=$!; "
            f"{{ {script}; }}; rc=$?; kill \"$w\" 2>/dev/null; exit $rc")

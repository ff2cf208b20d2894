"""Pid files: ``<run_dir>/pids/<role>.json`` names the process that holds a role now.

The holder writes it when it takes the role (the PS, a promoted replica, a replica, a
worker); the launcher's fault injector reads it to find its target, and a rank that
suspects a peer (:mod:`psmodes.suspicion`) reads it to name the process to fence, and
:func:`alive` tells whether a holder on this host still runs.

``<run_dir>/pids/spawned/<role>-gen<G>.json`` names a spawned replacement from before its
MPI_Init, while the survivors wait for it in ``MPI_Comm_spawn``: a replacement that dies
there (seen: a SIGSEGV inside Open MPI 5.0.11's MPI_Init) leaves that call waiting for good,
and :func:`spawned_dead` is how the survivors learn of it (:meth:`psmodes.context.Context.respawn`).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

from .atomic import write_text_atomic
from .events import Ev


def write_pid_file(ctx, role: str) -> None:
    """``role`` is held by this process from now on (``ctx``: a psmodes.context.Context)."""
    folder = Path(ctx.cfg.run_dir) / "pids"
    folder.mkdir(exist_ok=True)
    info = {"pid": os.getpid(), "host": socket.gethostname(), "rank": ctx.cluster.rank, "role": role,
            "generation": ctx.cluster.generation, "t": time.time()}
    write_text_atomic(folder / f"{role}.json", json.dumps(info) + "\n")
    ctx.log.emit(Ev.ROLE, **info)


def read_pid_file(run_dir: str | Path, role: str) -> dict | None:
    """The holder of ``role`` (pid, host, rank, generation), or None if none wrote it yet."""
    try:
        return json.loads((Path(run_dir) / "pids" / f"{role}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def pid_files(run_dir: str | Path) -> list[tuple[str, dict]]:
    """Every role's holder on record, as (role, pid file), in the roles' order."""
    out = []
    for path in sorted((Path(run_dir) / "pids").glob("*.json")):
        info = read_pid_file(run_dir, path.stem)
        if info is not None:
            out.append((path.stem, info))
    return out


def alive(pid: int) -> bool:
    """Whether process ``pid`` on this host is alive (a zombie is not)."""
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
    except FileNotFoundError:  # reaped since the signal test (seen: a zombie taken by init), or no /proc
        return not os.path.exists("/proc/self/stat")
    except OSError:
        return True


def _spawned_folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / "pids" / "spawned"


def write_spawned_pid(run_dir: str | Path, name: str) -> None:
    """A spawned replacement (``name``: ``ps-gen1``), first thing, before its MPI_Init."""
    folder = _spawned_folder(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    info = {"pid": os.getpid(), "host": socket.gethostname(), "t": time.time()}
    write_text_atomic(folder / f"{name}.json", json.dumps(info) + "\n")


def spawned_dead(run_dir: str | Path, names: list[str], stuck_after_s: float | None = None) -> list[dict]:
    """Those of the spawned replacements ``names`` known to have died (name, pid, host, t_seen):
    seen dead here (a process of this host), or marked dead by a survivor on their host
    (``<name>.dead``: the run directory is shared by the hosts, like its config). One that has
    not written its pid file yet is not known. ``stuck_after_s``: one of this host that wrote its
    pid file that long ago and is still in the spawn is stuck in its MPI_Init: SIGKILLed here and
    counted dead (``stuck``)."""
    folder, host, dead = _spawned_folder(run_dir), socket.gethostname(), []
    for name in names:
        marker = folder / f"{name}.dead"
        try:
            dead.append(json.loads(marker.read_text()))
            continue
        except (FileNotFoundError, ValueError):
            pass
        try:
            info = json.loads((folder / f"{name}.json").read_text())
        except (FileNotFoundError, ValueError):
            continue
        if info.get("host") != host:
            continue
        living = alive(info["pid"])
        stuck = living and stuck_after_s is not None and time.time() - info["t"] > stuck_after_s
        if stuck:
            try:
                os.kill(info["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        if stuck or not living:
            seen = {"name": name, "pid": info["pid"], "host": host, "t_seen": time.time(), "stuck": stuck}
            write_text_atomic(marker, json.dumps(seen) + "\n")
            dead.append(seen)
    return dead


def live_hosts_with_room(run_dir: str | Path, hosts: list[str], holders: list[str], lost: list[str],
                         n: int) -> list[str | None]:
    """A host for each of ``n`` replacements among ``hosts`` (the allocation, ``name:slots``): not one where a
    role of ``lost`` died and no role of ``holders`` (the survivors) runs, which is a lost node or, at least,
    a host where a spawn fails (dpm.c:406 with Open MPI 5.0.11); of the others, the one with the most slots left
    (the slots less the survivors there, less the replacements placed so far). None: no host is known.
    PRRTE 5.0.0rc1, told no host after a lost node, sent the launch to every daemon, the lost one too, and
    the spawn failed ("PRTE ERROR: Node has gone down"); told a live host, it spawned there
    (../shared/DESIGN.md, "Node loss in place")."""
    short = lambda name: str(name).split(".")[0]  # noqa: E731 - a pid file has the short host name
    slots = {short(spec.rpartition(":")[0]): int(spec.rpartition(":")[2]) for spec in hosts}
    load = {name: 0 for name in slots}
    alive, died = set(), set()
    for role, info in pid_files(run_dir):
        host = short(info.get("host", ""))
        if host not in load:
            continue
        if role in holders:
            load[host] += 1
            alive.add(host)
        elif role in lost:
            died.add(host)
    # a host that held ranks at the start and holds no survivor now lost them all, whoever holds their roles
    # now: a chain's promoted head writes the PS's pid file over the dead PS's, so the lost replica's role had
    # no file naming the lost host, and the spawn went there ("MPI_ERR_UNKNOWN"; fmnist-cnn, chain, nodeb lost)
    died |= {short(r["host"]) for r in _placed(run_dir)} - alive
    candidates = [h for h in slots if h in alive or h not in died]
    out: list[str | None] = []
    for _ in range(n):
        if not candidates:
            out.append(None)
            continue
        best = min(candidates, key=lambda h: (load[h] - slots[h], list(slots).index(h)))
        out.append(best)
        load[best] += 1
    return out


def _placed(run_dir: str | Path) -> list[dict]:
    """The ranks of the job's start and their hosts (the launcher's placement.json; [] without one)."""
    try:
        return json.loads((Path(run_dir) / "placement.json").read_text()).get("ranks") or []
    except (OSError, ValueError):
        return []

"""The fault injector: kills, hangs or slows the current PS (or a chain replica) on
schedule, and fences the processes the ranks suspect.

The kinds (:data:`launch.driver.kills.KINDS`): ``kill`` (SIGKILL), ``hang`` (SIGSTOP;
``~DUR``: SIGCONT DUR later, a pause that ends) and ``slow`` (for DUR, stopped and
continued on a duty cycle so that the PS runs 1/``--slow-factor`` of the time: a
degraded server). A hang or a slow phase runs as a small shell script, here or on
the target's host, so that its timing does not depend on the launcher's loop.

**Fencing.** A rank that waited past ``--suspect-after`` for a peer records a
``suspect`` event naming the peer's pid and host (:mod:`psmodes.suspicion`); the
launcher SIGKILLs exactly that process, once, by the same routes as a kill, and
records a ``fence`` event. ULFM then reports a real death and the ranks repair it.

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

import os
import selectors
import shlex
import socket
import signal
import subprocess
import time
from pathlib import Path

from psmodes.killpoints import ENV
from psmodes.pidfiles import alive, pid_files, read_pid_file
from psmodes.suspicion import FENCER_ENV

from .hosts import in_slurm, is_local
from .kills import KillPoint, schedule
from .lifetime import die_with
from .reachability import HEARTBEAT_SCRIPT, PERIOD_S, HostWatch


def rank_env(cfg) -> dict[str, str]:
    """What the ranks are told by the launcher's environment: ``PSBENCH_KILL_POINT`` (the
    point:NAME faults of the run, in order) and that the launcher fences suspects."""
    names = [p.point for p in schedule(cfg) if p.point]
    return {FENCER_ENV: "launcher", **({ENV: ",".join(names)} if names else {})}


def with_rank_env(cmd: list[str], cfg) -> list[str]:
    """mpirun: forward :func:`rank_env` to every rank (``-x``), also on other hosts
    (horovodrun forwards the launcher's whole environment itself)."""
    if cfg.launcher != "mpirun":
        return cmd
    return [cmd[0], *[arg for name in rank_env(cfg) for arg in ("-x", name)], *cmd[1:]]


KILL_SCRIPT = 'date +%s.%N && exec kill -9 "$1"'  # prints the host's clock at the kill, then kills
# $1 pid, $2 seconds (a hang: empty = until fenced): SIGSTOP, and SIGCONT when the hang ends
HANG_SCRIPT = 'date +%s.%N && kill -STOP "$1" && { [ -z "$2" ] || { sleep "$2" && kill -CONT "$1"; }; }'
# $1 pid, $2 cycles, $3 stopped and $4 running seconds of each: a PS that runs a share of the time
SLOW_SCRIPT = ('date +%s.%N; i=0; while [ "$i" -lt "$2" ] && kill -STOP "$1" 2>/dev/null; do '
               'sleep "$3"; kill -CONT "$1" || exit 1; sleep "$4"; i=$((i + 1)); done; exit 0')
# $@ pids, all on one host: a node lost. Their Open MPI daemon (their parent, where it is a prted: not on
# the launcher's host, whose ranks are mpirun's own children) dies with them, as it would with its node.
NODE_SCRIPT = ('d=""; for p in "$@"; do pp=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d " "); '
               '[ -n "$pp" ] && [ "$(cat /proc/$pp/comm 2>/dev/null)" = prted ] && d="$d $pp"; done; '
               'date +%s.%N; echo "daemons:$d"; exec kill -9 "$@" $d')
CONT_SCRIPT = 'kill -CONT "$1"'  # $1 pid: a rank stopped for good, continued once training is over
CONT_TIMEOUT_S = 10.0  # ... here, or through ssh/srun on another host
FENCE_ATTEMPT_S = 10.0  # a remote fence not done by then is given up and tried again
FENCE_RETRY_S = 1.0
FENCE_PROBE_S = 2.0  # the suspecting rank's host must answer this fast for its suspicion to count
SLOW_PERIOD_S = 0.2  # one stop-and-continue cycle: far below any --suspect-after
# $1 a peer host, $2 seconds: the link this host reaches the peer by goes down for $2 s. Detached
# (setsid): the ssh session that started it is cut off with the rest; prints the clock and the link
PARTITION_SCRIPT = (
    'addr=$(getent ahostsv4 "$1" | head -n1 | cut -d" " -f1); '
    'dev=$(ip -o route get "$addr" | sed -n "s/.* dev \\([^ ]*\\).*/\\1/p"); '
    '[ -n "$dev" ] || { echo "no route to $1" >&2; exit 3; }; date +%s.%N; echo "$dev"; '
    'setsid sh -c \'ip link set "$1" down; sleep "$2"; ip link set "$1" up\' sh "$dev" "$2" '
    '</dev/null >/dev/null 2>&1 &')


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


def kill_node(infos: list[dict], kill_via: str = "auto") -> dict:
    """SIGKILL the processes of ``infos`` (pid files of one host) at once, with that host's Open MPI
    daemon: :data:`NODE_SCRIPT`, run there. Returns how, the daemons killed and the host's clock."""
    host = infos[0]["host"]
    route = kill_route(host, kill_via)
    argv = ["sh", "-c", NODE_SCRIPT, "sh", *(str(int(i["pid"])) for i in infos)]
    t0 = time.time()
    out = subprocess.run(argv if route == "local" else remote_command(route, host, argv), capture_output=True,
                         text=True, timeout=20, stdin=subprocess.DEVNULL)
    t1 = time.time()
    if out.returncode != 0:
        raise KillFailed(f"{route} node kill on {host} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    daemons = [int(x) for line in out.stdout.splitlines() if line.startswith("daemons:") for x in line[8:].split()]
    how = {"how": route, "daemons": daemons, "rtt_s": round(t1 - t0, 4)}
    if route != "local":
        how["t_remote"] = _first_float(out.stdout)
    return how


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


class Injector:
    """Carries out a run's fault points in order, and fences the suspects the ranks name.

    ``done``: the kill records (the schedule's SIGKILLs), ``fenced``: the fence records,
    ``faults``: every record of a fault sent (kills, hangs, slow phases), in order."""

    def __init__(self, run_dir: Path, points: list[KillPoint], log, kill_via: str = "auto",
                 slow_factor: float = 4.0, peer_host: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.peer_host = peer_host  # a partition cuts the target's host off from this one (the launcher's)
        self.kill_via = kill_via
        self.slow_factor = slow_factor
        self.points = points
        self.log = log
        self.killed: set[tuple[int, str]] = set()  # killed, fenced or hung for good: not a target again
        self.done: list[dict] = []
        self.fenced: list[dict] = []
        self.collateral: list[dict] = []  # killed with the PS's node (--kill-node): pid, host, role
        self.faults: list[dict] = []
        self.running: list[tuple[subprocess.Popen, dict]] = []  # hang and slow scripts, with their records
        self.fencing: dict[tuple[int, str], dict] = {}  # remote fences on their way
        self.watches: dict[str, HostWatch] = {}  # heartbeats of the other hosts (launch/driver/reachability.py)

    def watch_hosts(self, hosts) -> None:
        """Start the heartbeats of the run's other hosts: a suspicion they raise is judged by them."""
        for host in sorted(set(hosts)):
            if not is_local(host) and host not in self.watches:
                route = kill_route(host, self.kill_via)
                self.watches[host] = HostWatch(host, script_command(route, host, HEARTBEAT_SCRIPT, [f"{PERIOD_S:g}"]))

    def urgent(self) -> bool:
        """A relative kill (+DUR) is next: the launcher's loop polls fast."""
        return bool(self.points) and self.points[0].after_s is not None and bool(self.done)

    @property
    def deaths(self) -> list[dict]:
        """Every process the launcher killed: scheduled kills, the others on a lost node, and fences."""
        return self.done + self.collateral + self.fenced

    def stopped_at(self, event: dict) -> None:
        """A rank stopped itself at a kill point (its ``killpoint`` event): SIGKILL it there
        (a hang: leave it stopped, or continue it after the hang's length)."""
        match = next((p for p in self.points if p.point and p.point.partition("@")[0] == event.get("point")), None)
        if match is None:  # not asked for (cannot happen: the launcher arms only its points); never leave it stopped
            match = KillPoint(event.get("role", "ps"), None, None, f"point:{event.get('point')}", point=event.get("point"))
        else:
            self.points.remove(match)
        info = {"pid": event["pid"], "host": event.get("host") or "localhost", "rank": None,
                "generation": event.get("generation")}
        self._fire(info, match, None, event.get("version"), extra={"point": event.get("point")})

    def fence(self, suspect: dict) -> None:
        """SIGKILL the process a rank suspects (its ``suspect`` event), once. Here at once; on
        another host in the background, tried again until it lands (:meth:`_advance_fences`): a
        host cut off the network cannot be reached until its link is back, and the launcher's
        loop must not wait for it meanwhile."""
        if suspect.get("pid") is None:
            return
        key = (suspect["pid"], suspect["host"])
        if (key in {(f["pid"], f["host"]) for f in self.fenced} or key in self.fencing
                or (key in self.killed and not self._hung(key))):
            return  # fenced (or being fenced) already, or killed by the schedule: its death is on its way
        self.fencing[key] = {"suspect": suspect, "attempt": 0, "proc": None, "t": None, "retry_at": 0.0,
                             "probe": None}
        by_host = suspect.get("by_host")
        if by_host in self.watches:  # judged by the heartbeats its host sent during the suspicion's wait
            self.fencing[key]["watch"] = self.watches[by_host]
            self.fencing[key]["probe_started"] = time.monotonic()
        elif by_host and not is_local(by_host):  # first make sure the suspecting rank is not the one cut off
            self.fencing[key]["probe"] = subprocess.Popen(
                remote_command(kill_route(by_host, self.kill_via), by_host, ["true"]), stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with(os.getpid()))
            self.fencing[key]["probe_started"] = time.monotonic()
        self._advance_fences()

    def _advance_fences(self) -> None:
        for key, f in list(self.fencing.items()):
            suspect, info = f["suspect"], {"pid": key[0], "host": key[1]}
            if f.get("watch") is not None and not self._reachable_then(key, f):
                continue
            if f["probe"] is not None and not self._probed(key, f):
                continue
            route = kill_route(info["host"], self.kill_via)
            proc = f["proc"]
            if proc is None:
                if time.monotonic() < f["retry_at"]:
                    continue
                f["attempt"] += 1
                f["t"] = time.time()
                if route == "local":
                    try:
                        os.kill(int(info["pid"]), signal.SIGKILL)
                    except ProcessLookupError:  # died meanwhile (a suspicion kept through a repair): no fence
                        self._refused(key, "the suspect was dead already")
                        continue
                    self._fenced(key, {"how": "local"})
                    continue
                f["proc"] = subprocess.Popen(kill_command(route, info["host"], info["pid"]), stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                             start_new_session=True, preexec_fn=die_with(os.getpid()))
                f["started"] = time.monotonic()
                continue
            if proc.poll() is None and time.monotonic() - f["started"] < FENCE_ATTEMPT_S:
                continue
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stdout, stderr = proc.communicate()
            if proc.returncode == 0:
                self._fenced(key, {"how": route, "t_remote": _first_float(stdout),
                                   "rtt_s": round(time.time() - f["t"], 4)})
                continue
            if proc.returncode == 1 and "No such process" in stderr:  # the host answered: it was dead already
                self._refused(key, "the suspect was dead already")
                continue
            self.log.emit("kill_failed", pid=info["pid"], host=info["host"], role=suspect.get("role"), at="fence",
                          attempt=f["attempt"], error=f"exit {proc.returncode}: {stderr.strip()[-200:]}")
            f["proc"], f["retry_at"] = None, time.monotonic() + FENCE_RETRY_S

    def _probed(self, key, f: dict) -> bool:
        """Whether the suspecting rank's host answered: a suspicion from a host that this launcher
        cannot reach comes from the side that is cut off (in a partition both sides suspect each
        other, and the cut-off PS would fence the replica that is to take over). Refused if not."""
        probe = f["probe"]
        if probe.poll() is None and time.monotonic() - f["probe_started"] < FENCE_PROBE_S:
            return False
        if probe.poll() is None:
            os.killpg(probe.pid, signal.SIGKILL)
            probe.wait()
        if probe.returncode == 0:
            f["probe"] = None
            return True
        self._refused(key, f"the suspecting rank's host {f['suspect'].get('by_host')} did not answer within "
                           f"{FENCE_PROBE_S:g} s: it is the one cut off")
        return False

    def _reachable_then(self, key, f: dict) -> bool:
        """Whether the suspecting rank's host reached this launcher throughout the suspicion's wait (its
        heartbeats: :class:`launch.driver.reachability.HostWatch`). Refused if it was cut off at any
        moment of it, or if no heartbeat made after the suspicion arrives within FENCE_PROBE_S."""
        suspect = f["suspect"]
        t1 = float(suspect.get("t_suspect") or suspect["t"])
        verdict = f["watch"].cut_off_during(t1 - float(suspect.get("waited_s") or 0.0), t1)
        if verdict is None and time.monotonic() - f["probe_started"] < FENCE_PROBE_S:
            return False
        if verdict is False:
            f["watch"] = None
            return True
        self._refused(key, f"the suspecting rank's host {suspect.get('by_host')} was cut off from this launcher "
                           "while it waited" if verdict else
                           f"the suspecting rank's host {suspect.get('by_host')} sent no heartbeat within "
                           f"{FENCE_PROBE_S:g} s: it is the one cut off")
        return False

    def _refused(self, key, reason: str) -> None:
        suspect = self.fencing.pop(key)["suspect"]
        self.log.emit("fence_refused", pid=key[0], host=key[1], role=suspect.get("role"), by=suspect.get("who"),
                      by_host=suspect.get("by_host"), t_suspect=suspect.get("t_suspect"), reason=reason)

    def _fenced(self, key, how: dict) -> None:
        f = self.fencing.pop(key)
        suspect = f["suspect"]
        self.killed.add(key)
        self.fenced.append(self.log.emit(
            "fence", t_fence=f["t"], pid=key[0], host=key[1], role=suspect.get("role"), how="launcher",
            route=how["how"], attempts=f["attempt"], by=suspect.get("who"), t_suspect=suspect.get("t_suspect"),
            waited_s=suspect.get("waited_s"), what=suspect.get("what"),
            **{k: v for k, v in how.items() if k != "how"}))

    def _hung(self, key) -> bool:
        return any((f["pid"], f["host"]) == key for f in self.faults if f["ev"] == "hang")

    def poll(self, elapsed: float | None, step: int | None) -> None:
        """Called by the launcher's loop: records the hang scripts that ended, and fires at
        most the next due fault."""
        self._reap()
        self._advance_fences()
        if not self.points:
            return
        point = self.points[0]
        if point.after_s is not None:
            if not self.done or time.time() - self.done[-1]["t_kill"] < point.after_s:
                return
        elif not point.due(elapsed, step):
            return
        info = self._waiting_spare() if point.target == "spare" else read_pid_file(self.run_dir, point.target)
        if info is None or (info["pid"], info["host"]) in self.killed or (
                is_local(info["host"]) and not alive(int(info["pid"]))):  # a remote pid cannot be checked here
            return  # no live target yet (e.g. the replacement is still starting): try again next poll
        self.points.pop(0)
        self._fire(info, point, elapsed, step)

    def _waiting_spare(self) -> dict | None:
        """A spare that still waits (``--failures spare:...``): its pid file names no process that holds
        another role now (a spare that took a role keeps its old file)."""
        files = pid_files(self.run_dir)
        busy = {(i["pid"], i["host"]) for role, i in files if not role.startswith("spare")}
        for role, info in files:
            key = (info["pid"], info["host"])
            if role.startswith("spare") and key not in busy and key not in self.killed and (
                    not is_local(info["host"]) or alive(int(info["pid"]))):
                return info
        return None

    def _fire(self, info: dict, point: KillPoint, elapsed, step, extra: dict | None = None) -> None:
        t = time.time()
        common = dict(pid=info["pid"], host=info["host"], role=point.target, rank=info.get("rank"),
                      generation=info.get("generation"), at=point.spec, elapsed_s=elapsed, step=step, **(extra or {}))
        node = self._on_host(info) if point.kind == "node" else []
        try:
            if point.kind == "kill":
                how = sigkill(info, self.kill_via)
            elif point.kind == "node":
                how = kill_node([info] + [i for _, i in node], self.kill_via)
                common["node"] = [{"role": role, "pid": i["pid"]} for role, i in node]
            else:
                how = self._start_script(info, point)
        except (KillFailed, OSError, subprocess.TimeoutExpired) as exc:
            self.log.emit("kill_failed", pid=info["pid"], host=info["host"], role=point.target, at=point.spec,
                          kind=point.kind, error=str(exc))
            return
        key = (info["pid"], info["host"])
        if point.kind == "node":  # recorded as the PS's kill; the others on its host died with it
            self.collateral += [{"pid": i["pid"], "host": i["host"], "role": role} for role, i in node]
            self.killed.update((i["pid"], i["host"]) for _, i in node)
        if point.kind in ("kill", "node"):
            self.killed.add(key)
            # t_kill: the launcher's clock when the kill was sent; a remote kill also records the
            # PS host's clock when it was carried out (t_remote) and the round trip
            rec = self.log.emit("kill", t_kill=t, signal="SIGKILL", **common, **how)
            self.done.append(rec)
        elif point.kind == "hang":
            if point.for_s is None:
                self.killed.add(key)  # stopped until fenced: the next fault waits for its replacement
            rec = self.log.emit("hang", t_hang=t, signal="SIGSTOP", for_s=point.for_s, **common, **how)
        elif point.kind == "slow":
            rec = self.log.emit("slow", t_slow=t, for_s=point.for_s, factor=self.slow_factor, period_s=SLOW_PERIOD_S,
                                **common, **how)
        else:
            rec = self.log.emit("partition", t_partition=t, for_s=point.for_s, peer=self.peer_host, **common, **how)
        self.faults.append(rec)

    def _on_host(self, info: dict) -> list[tuple[str, dict]]:
        """The other processes on ``info``'s host that hold a role now (their pid files), live ones."""
        out, seen = [], {info["pid"]}
        for role, other in pid_files(self.run_dir):
            if (other["pid"] in seen or other["host"] != info["host"] or (other["pid"], other["host"]) in self.killed
                    or (is_local(other["host"]) and not alive(int(other["pid"])))):
                continue
            seen.add(other["pid"])
            out.append((role, other))
        return out

    def _start_script(self, info: dict, point: KillPoint) -> dict:
        """The hang or slow script, started in the background, here or on the target's host."""
        route = kill_route(info["host"], self.kill_via)
        if point.kind == "partition":
            return self._partition(info, point, route)
        if point.kind == "hang":
            script, args = HANG_SCRIPT, [str(int(info["pid"])), f"{point.for_s:g}" if point.for_s else ""]
        else:
            stop = SLOW_PERIOD_S * (1 - 1 / self.slow_factor)
            cycles = max(1, round(point.for_s / SLOW_PERIOD_S))
            script, args = SLOW_SCRIPT, [str(int(info["pid"])), str(cycles), f"{stop:.3f}",
                                         f"{SLOW_PERIOD_S - stop:.3f}"]
        if route != "local":
            script = tied_to_session(script)
        proc = subprocess.Popen(script_command(route, info["host"], script, args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True, preexec_fn=die_with(os.getpid()))
        self.running.append((proc, {"pid": info["pid"], "host": info["host"], "kind": point.kind,
                                    "for_s": point.for_s, "at": point.spec}))
        return {"how": route}

    def _partition(self, info: dict, point: KillPoint, route: str) -> dict:
        """The target's host loses its link for the partition's length (a detached script there)."""
        if route == "local":
            raise KillFailed(f"a partition needs the target on another host; {info['host']} is this one")
        # in the background: the ssh session is cut off with the host and returns only when the link is back
        proc = subprocess.Popen(script_command(route, info["host"], PARTITION_SCRIPT,
                                               [self.peer_host or socket.gethostname(), f"{point.for_s:g}"]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=die_with(os.getpid()))
        self.running.append((proc, {"kind": "partition session", "for_s": None}))
        self.running.append((_Ended(point.for_s), {"pid": info["pid"], "host": info["host"], "kind": "partition",
                                                   "for_s": point.for_s, "at": point.spec}))
        return {"how": route}

    def _reap(self) -> None:
        """Scripts that ended: a hang or slow phase that ended records ``continued``."""
        for proc, what in list(self.running):
            if proc.poll() is None:
                continue
            self.running.remove((proc, what))
            if what["for_s"] is not None and proc.returncode == 0:
                self.log.emit("continued", t_continued=time.time(), **what)

    def release_hangs(self) -> None:
        """SIGCONT every rank stopped for good (a hang without an end) that is neither fenced nor
        dead, through the route a kill takes (:func:`sigkill`): called once training is over, when
        nobody needs it to train and only its own end (a PS's final evaluation, its exit, mpirun's)
        waits for it. Each records ``continued`` (``after_training``), which ends the hang in the summary."""
        gone = {(f["pid"], f["host"]) for f in self.fenced + self.done + self.collateral} | set(self.fencing)
        for fault in self.faults:
            key = (fault["pid"], fault["host"])
            if fault["ev"] != "hang" or fault.get("for_s") is not None or key in gone or fault.get("released"):
                continue
            fault["released"] = True  # tried once: a host that cannot be reached leaves the watchdog the bound
            route = kill_route(fault["host"], self.kill_via)
            try:  # here too through the script: no timing to keep, so one path for every route
                subprocess.run(script_command(route, fault["host"], CONT_SCRIPT, [str(int(fault["pid"]))]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                               timeout=CONT_TIMEOUT_S, check=True)
            except (subprocess.SubprocessError, OSError):
                continue  # dead already, or its host cannot be reached
            self.log.emit("continued", t_continued=time.time(), pid=fault["pid"], host=fault["host"], kind="hang",
                          for_s=None, at=fault.get("at"), after_training=True)

    def finish(self) -> None:
        for point in self.points:
            self.log.emit("kill_not_reached", role=point.target, at=point.spec, kind=point.kind,
                          reason="the run ended before this fault point")
        self.points = []
        for proc, _ in self.running:  # a hang or slow script of a run that ended: its target is gone too
            try:
                if proc.pid is not None:  # not a script detached on another host
                    os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        self._reap()
        self.running = []
        for f in self.fencing.values():  # the run ended before the fence landed: recorded as not reached
            for proc in (f["proc"], f["probe"]):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            self.log.emit("kill_failed", pid=f["suspect"]["pid"], host=f["suspect"]["host"], at="fence",
                          attempt=f["attempt"], error="the run ended before the fence landed")
        self.fencing = {}
        for watch in self.watches.values():
            watch.close()
        self.watches = {}


class _Ended:
    """Stands for a script that runs detached on another host: it has ended ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        self.end, self.returncode, self.pid = time.monotonic() + seconds, None, None

    def poll(self):
        if self.returncode is None and time.monotonic() >= self.end:
            self.returncode = 0
        return self.returncode

    def wait(self):
        return 0

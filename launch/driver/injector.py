"""The fault injector: carries out a run's fault plan in order (launch/faultkinds/: each kind says how it
is sent), and fences the processes the ranks suspect.

The target of a point is whichever process holds the role at that moment, read from the pid file it
writes when it takes the role (``<run_dir>/pids/<role>.json``). Faults are taken in order; a kill waits
for a live target that it has not killed before (the replacement, for a second kill), and a fault never
reached before the run ends is recorded as such (``kill_not_reached``).

**Fencing.** A rank that waited past ``--suspect-after`` for a peer records a ``suspect`` event naming
the peer's pid and host (:mod:`psmodes.suspicion`); the launcher SIGKILLs exactly that process, once,
by the same routes as a kill (launch/remote/routes.py: here, srun or ssh), and records a ``fence``
event. ULFM then reports a real death and the ranks repair it. A suspicion raised on another host is
judged by that host's heartbeats during the wait (launch/driver/reachability.py): the side that was cut
off is never the one obeyed.

Times are the launcher's clock; a remote kill also records the host's clock at the kill, and
:mod:`launch.driver.clocks` measures each host's offset (``summary.json``: ``clock_offsets``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from psmodes import stacks
from psmodes.pidfiles import alive, pid_files, read_pid_file
from psmodes.events import Ev

from ..faultkinds import KINDS, Point
from ..faultkinds.hang import CONT_SCRIPT
from ..remote.lifetime import die_with
from ..remote.routes import (KillFailed, first_float, is_local, kill_command, kill_route, remote_command,
                             script_command, tied_to_session)
from .reachability import HEARTBEAT_SCRIPT, PERIOD_S, HostWatch

CONT_TIMEOUT_S = 10.0  # a stopped rank continued once training is over: here, or through ssh/srun on another host
FENCE_ATTEMPT_S = 10.0  # a remote fence not done by then is given up and tried again
FENCE_RETRY_S = 1.0
FENCE_PROBE_S = 2.0  # the suspecting rank's host must answer this fast for its suspicion to count
BLOCKED_MARGIN_S = 0.2  # a suspect's own suspicion up to this long after the wait for it ended still clears it


class Injector:
    """Carries out a run's fault points in order, and fences the suspects the ranks name.

    ``done``: the kill records (the schedule's SIGKILLs), ``fenced``: the fence records,
    ``faults``: every record of a fault sent (kills, hangs, slow phases), in order."""

    def __init__(self, run_dir: Path, points: list[Point], log, kill_via: str = "auto",
                 slow_factor: float = 4.0, peer_host: str | None = None, workers: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.n_workers = workers  # a worker failure waits until every worker wrote its pid file
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
        self.suspicions: list[dict] = []  # every suspicion seen: a suspect that raised one itself is blocked
        self.blocked: list[tuple[dict, dict]] = []  # (the suspect's own suspicion, the one refused for it)
        self.reopened: list[dict] = []  # refused for a suspicion that turned out to come from a cut-off host

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
            match = Point(event.get("role", "ps"), None, None, f"point:{event.get('point')}", point=event.get("point"))
        else:
            self.points.remove(match)
        info = {"pid": event["pid"], "host": event.get("host") or "localhost", "rank": None,
                "generation": event.get("generation")}
        if match.target.startswith("worker") and event.get("role"):
            # a worker point names no index (the leader at 'announced', any non-leader at 'join_member'): the
            # record names the worker that stopped there, not the target's default (the last worker)
            match.target = event["role"]
        self._fire(info, match, None, event.get("version"), extra={"point": event.get("point")})

    def fence(self, suspect: dict) -> None:
        """SIGKILL the process a rank suspects (its ``suspect`` event), once. Here at once; on
        another host in the background, tried again until it lands (:meth:`_advance_fences`): a
        host cut off the network cannot be reached until its link is back, and the launcher's
        loop must not wait for it meanwhile."""
        if suspect.get("pid") is None:
            return
        blocked_on = self._waiting_itself(suspect)
        if not any(s is suspect for s in self.suspicions):  # a reopened one is there already
            self.suspicions.append(suspect)
        key = (suspect["pid"], suspect["host"])
        if (key in {(f["pid"], f["host"]) for f in self.fenced} or key in self.fencing
                or (key in self.killed and not self._hung(key))):
            return  # fenced (or being fenced) already, or killed by the schedule: its death is on its way
        if blocked_on is not None:
            self.log.emit("fence_refused", pid=key[0], host=key[1], role=suspect.get("role"), by=suspect.get("who"),
                          by_host=suspect.get("by_host"), t_suspect=suspect.get("t_suspect"),
                          reason=f"the suspect was itself waiting for {blocked_on.get('role')} "
                                 f"({blocked_on.get('what')}), whom it suspected: blocked, not hung")
            self.blocked.append((blocked_on, suspect))
            return
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

    def training_over(self) -> None:
        """Training completed: a fence still on its way (to a host that was cut off: its ssh waits for the
        link) is withdrawn, since the suspect went on to finish the run. Landed after training, it killed a
        PS in its final snapshot and the run was reported failed (psbench chaos over two hosts, chain
        trial-048: the PS's host cut off 4.8 s, suspected, the run completed 2 s before the fence landed)."""
        for key, f in list(self.fencing.items()):
            for proc in (f["proc"], f["probe"]):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if f["proc"] is not None and f["proc"].returncode == 0:
                continue  # it landed already: _advance_fences records it
            self._refused(key, "training completed before the fence landed: the suspect finished the run")

    def _waiting_itself(self, suspect: dict) -> dict | None:
        """The suspicion the suspect raised itself while the suspecting rank waited for it, if any: a
        process that suspects its own peer is alive and blocked by that peer (a chain member above a hung
        replica), and the peer is the one to fence (psmodes/suspicion.py ``delivery_wait_s``)."""
        t1 = float(suspect.get("t_suspect") or suspect["t"])
        t0 = t1 - float(suspect.get("waited_s") or 0.0)
        return next((s for s in self.suspicions if not s.get("cut_off") and s.get("by") == suspect.get("role")
                     and s.get("by_host") == suspect.get("host")
                     and t0 <= float(s.get("t_suspect") or s["t"]) <= t1 + BLOCKED_MARGIN_S), None)

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
                    dumped = self._dump_stacks(int(info["pid"]))
                    try:
                        os.kill(int(info["pid"]), signal.SIGKILL)
                    except ProcessLookupError:  # died meanwhile (a suspicion kept through a repair): no fence
                        self._refused(key, "the suspect was dead already")
                        continue
                    how = {"how": "local"}
                    if dumped:
                        how["stacks"] = stacks.dump_of(self.run_dir, info["host"], info["pid"])
                    self._fenced(key, how)
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
                self._fenced(key, {"how": route, "t_remote": first_float(stdout),
                                   "rtt_s": round(time.time() - f["t"], 4)})
                continue
            if proc.returncode == 1 and "No such process" in stderr:  # the host answered: it was dead already
                self._refused(key, "the suspect was dead already")
                continue
            self.log.emit("kill_failed", pid=info["pid"], host=info["host"], role=suspect.get("role"), at="fence",
                          attempt=f["attempt"], error=f"exit {proc.returncode}: {stderr.strip()[-200:]}")
            f["proc"], f["retry_at"] = None, time.monotonic() + FENCE_RETRY_S

    @staticmethod
    def _dump_stacks(pid: int) -> bool:
        """A running suspect (not an injected hang: a stall of psbench's own) first writes its threads'
        stacks (psmodes/stacks.py). Whether it was asked to."""
        if not stacks.running(pid):
            return False
        try:
            os.kill(pid, stacks.SIGNAL)
        except ProcessLookupError:
            return False
        time.sleep(stacks.DUMP_WAIT_S)
        return True

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
                           f"{FENCE_PROBE_S:g} s: it is the one cut off", cut_off=True)
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
                           f"{FENCE_PROBE_S:g} s: it is the one cut off", cut_off=True)
        return False

    def _refused(self, key, reason: str, cut_off: bool = False) -> None:
        suspect = self.fencing.pop(key)["suspect"]
        self.log.emit("fence_refused", pid=key[0], host=key[1], role=suspect.get("role"), by=suspect.get("who"),
                      by_host=suspect.get("by_host"), t_suspect=suspect.get("t_suspect"), reason=reason)
        if cut_off:
            # A suspicion raised on the side that was cut off shields nobody: a head cut off with its host
            # suspects its replica, and the leader's suspicion of that head, refused meanwhile as "blocked,
            # not hung" (the head's verdict was still pending), is decided again without it (test_netns:
            # nodeb cut off for 5 s; the head was never fenced and the cut-off side kept the chain).
            suspect["cut_off"] = True
            self.reopened += [s for b, s in self.blocked if b is suspect]  # decided at the next poll
            self.blocked = [(b, s) for b, s in self.blocked if b is not suspect]

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
        while self.reopened:
            self.fence(self.reopened.pop(0))
        if not self.points:
            return
        point = self.points[0]
        if point.after_s is not None:
            if not self.done or time.time() - self.done[-1]["t_kill"] < point.after_s:
                return
        elif not point.due(elapsed, step):
            return
        if point.target == "worker":  # --failures worker:...: the last worker alive, never the leader
            info = self._last_worker(point)
            if info is None:
                return
            point.target = info["role"]
        else:
            info = self._waiting_spare() if point.target == "spare" else read_pid_file(self.run_dir, point.target)
        if info is None or not self._targetable(info):
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
            if role.startswith("spare") and key not in busy and self._targetable(info):
                return info
        return None

    def _targetable(self, info: dict) -> bool:
        """Whether the process of pid file ``info`` is neither killed, fenced or hung for good by this injector
        nor dead (a remote pid cannot be checked from here)."""
        alive_here = not is_local(info["host"]) or alive(int(info["pid"]))
        return (info["pid"], info["host"]) not in self.killed and alive_here

    def _last_worker(self, point: Point) -> dict | None:
        """The live worker of the highest index, for a worker failure that is due, unless it is the only one
        left (the leader). None: not every worker has started yet, or only the leader is left: then the
        failure is skipped and recorded and the failures after it go on. A replacement (psmodes/elastic.py)
        writes its own pid file (its index, above the workers left), so it is a target once it runs."""
        workers = sorted(((int(role[len("worker"):]), role, info) for role, info in pid_files(self.run_dir)
                          if role.startswith("worker")), reverse=True)
        if len(workers) < self.n_workers:
            return None  # a worker that has not written its pid file yet
        live = [(role, info) for _, role, info in workers if self._targetable(info)]
        if len(live) > 1:
            role, info = live[0]
            return {**info, "role": role}
        self.points.pop(0)
        self.log.emit("fault_skipped", kind=point.kind, target="worker", at=point.spec,
                      reason="no worker but the leader is left")
        return None

    def _fire(self, info: dict, point: Point, elapsed, step, extra: dict | None = None) -> None:
        t = time.time()
        common = dict(pid=info["pid"], host=info["host"], role=point.target, rank=info.get("rank"),
                      generation=info.get("generation"), at=point.spec, elapsed_s=elapsed, step=step, **(extra or {}))
        kind = KINDS[point.kind]
        try:
            how = kind.inject(self, info, point)
        except (KillFailed, OSError, subprocess.TimeoutExpired) as exc:
            self.log.emit("kill_failed", pid=info["pid"], host=info["host"], role=point.target, at=point.spec,
                          kind=point.kind, error=str(exc))
            return
        key = (info["pid"], info["host"])
        if kind.takes_down or (kind.needs_replacement and point.for_s is None):
            self.killed.add(key)  # dead, or stopped until fenced: the next fault waits for its replacement
        rec = kind.event(self, t, point, common, how)
        if kind.takes_down:
            self.done.append(rec)
        self.faults.append(rec)

    def on_host(self, info: dict) -> list[tuple[str, dict]]:
        """The other processes on ``info``'s host that hold a role now (their pid files), live ones."""
        out, seen = [], {info["pid"]}
        for role, other in pid_files(self.run_dir):
            if other["pid"] in seen or other["host"] != info["host"] or not self._targetable(other):
                continue
            seen.add(other["pid"])
            out.append((role, other))
        return out

    def start_script(self, info: dict, point: Point, script: str, args: list[str]) -> dict:
        """A kind's script (a hang's, a slow phase's), started in the background, here or on the target's
        host (tied to the launcher's session there), recorded as running until it ends."""
        route = kill_route(info["host"], self.kill_via)
        if route != "local":
            script = tied_to_session(script)
        proc = subprocess.Popen(script_command(route, info["host"], script, args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True, preexec_fn=die_with(os.getpid()))
        self.running.append((proc, {"pid": info["pid"], "host": info["host"], "kind": point.kind,
                                    "for_s": point.for_s, "at": point.spec}))
        return {"how": route}

    def _reap(self) -> None:
        """Scripts that ended: ``landed``, the target host's clock when the script sent its signal (the first
        line it printed), and a hang or slow phase that ended records ``continued``."""
        for proc, what in list(self.running):
            if proc.poll() is None:
                continue
            self.running.remove((proc, what))
            t_remote = first_float(proc.stdout.read() if proc.stdout is not None else "")
            if t_remote is not None and proc.returncode == 0:
                self.log.emit(Ev.LANDED, t_remote=t_remote, **what)
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

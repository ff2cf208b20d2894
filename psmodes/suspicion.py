"""Suspicion: what a rank does when a peer that answers in milliseconds has not answered
for ``--suspect-after`` seconds.

ULFM reports a death (a SIGKILL, a crash) in tens of milliseconds, but nothing reports
a process that hangs: a stopped process, a stuck GPU or collective, a host swapping. Its
peers' waits went on until ``--peer-timeout`` (60 s) and the run failed. Now the waits
on the critical path (the workers' exchange with the PS, their reconnection and hand-over to
a replacement, the chain head's wait for its successor's acknowledgement) carry a :class:`Suspicion`. Past the deadline it records a
``suspect`` event that names the peer's pid and host, read from the pid file the peer
wrote when it took its role, and the wait goes on.

The suspect is then **fenced**: SIGKILLed before anyone takes over, so that ULFM reports
a real death and the normal repair runs. The launcher is the one that fences (it reads
the event and kills through its injector: here, over ssh or with ``srun --overlap``),
so there is one decider and it reaches any host. Without psbench's launcher (a plain
``mpirun``: ``PSBENCH_FENCER`` unset) the suspecting rank fences a peer on its own host
itself. Nobody takes over from a head that is still alive, so no two heads ever apply
updates; a false suspicion (a live but slow peer) costs a recovery, never a lost
acknowledged update. A pause that ends before the deadline is ridden out: the wait
completes and nothing is recorded. The peer timeout stays the last line of defence.

Why not a heartbeat: the waits already know, to the millisecond, how long a peer has
been silent while it owes them an answer; a heartbeat thread would be one more sender
on the critical path of every rank, and a stopped process stops its heartbeat and its
work alike.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

from . import beacon
from .events import Ev
from .pidfiles import alive, pid_files, read_pid_file

FENCER_ENV = "PSBENCH_FENCER"  # "launcher": psbench's launcher fences (launch/driver/injector.py)
# After a respawn the replacements take their cold start (here about 2 s from the spawn's return to
# their first event: the model, the data, the role's set-up), and every wait that passes through one
# of them is slow for that long: a middle replica forwarding to a new tail, the head waiting for that
# replica, the leader waiting for the head. Suspected, they were fenced one after the other (seen in
# the hang matrix: hybrid, R=2, the live middle replica fenced). No suspicion counts within this.
COLD_START_S = 10.0
# A beacon this silent is a stopped process, not a slow beat (psmodes/beacon.py beats every 0.5 s)
HUNG_SILENCE_S = 1.2


def delivery_wait_s(suspect_after_s: float, position: int, chain_length: int) -> float:
    """How long a chain member at ``position`` (0: the head) waits for its successor to take a state
    before it suspects it: half the workers' time at the head, less further down the chain. A hung
    replica blocks every member above it, each in its own forward; the one right above it must suspect
    first (the launcher then refuses the blocked members' suspicions of their live successors:
    launch/driver/injector.py). With one wait for all, psbench chaos saw the head and replica1 suspect
    after 1.5 s, 31 ms apart, and the live replica1 fenced with the hung tail (chain R=2, K=5, seed 46,
    trial-029)."""
    return suspect_after_s / 2 * (1 - position / chain_length)


class Suspicion:
    """One wait on ``peer`` (a rank of the current world); :meth:`check` is called between polls."""

    def __init__(self, ctx, peer: int, what: str, after_s: float | None = None, silent_only: bool = False,
                 route: tuple[int, ...] = ()) -> None:
        """``silent_only``: the wait may be long for a live peer (the evaluator scoring a snapshot): the
        peer is suspected only once its beacon has been silent that long too (psmodes/beacon.py).
        ``route``: the ranks before ``peer`` that the answer passes through (the chain's replicas before
        the tail, for its acknowledgement): the first whose beacon has stopped is the one suspected, and
        while none has, the peer a little after the deadline (:meth:`_on_route`)."""
        self.ctx, self.what = ctx, what
        self.silent_only = silent_only
        self.route = tuple(ctx.cluster.roles[r].label for r in route)
        self.role = ctx.cluster.roles[peer].label
        self.after_s = ctx.cfg.suspect_after_s if after_s is None else after_s
        self.t0 = time.monotonic()
        self.armed_at = max(self.t0, getattr(ctx, "cold_until", 0.0))  # not within a cold start
        self.fired = False
        ctx.open_suspicion = self  # until done(): a repair that cuts this wait short keeps its deadline

    def done(self) -> None:
        """The peer answered: nothing to suspect any more."""
        if getattr(self.ctx, "open_suspicion", None) is self:
            self.ctx.open_suspicion = None

    def through_repair(self) -> threading.Timer | None:
        """The wait was cut short by a death elsewhere, and the repair that follows waits for the
        same peer: MPI_Comm_shrink is a collective of every survivor, and a hung one never joins
        it (found by psbench chaos: the PS stopped, the tail killed 1.3 s later, every survivor in
        the shrink until the watchdog). The deadline keeps running while this process is blocked
        in the repair; the caller cancels the timer once the repair returns."""
        if self.fired or not self.after_s:
            return None
        timer = threading.Timer(max(0.0, self.armed_at + self.after_s - time.monotonic()), self.check)
        timer.daemon = True
        timer.start()
        return timer

    def _holder(self) -> tuple[float, dict | None]:
        """The peer's pid file, and how long its holder has held the role: 0 while none holds it yet (no pid
        file, or here the file of a dead holder). A replacement on a loaded machine can take longer
        than the cold start to get there (the imports, the model, a restore): it is starting, not
        hung, and a process that named no pid cannot be fenced anyway (found by psbench chaos: a
        replacement PS stopped before it answered the hand-over was never suspected, because the
        hand-over's wait carried no suspicion; with one, it must not blame a slow start)."""
        info = read_pid_file(self.ctx.cfg.run_dir, self.role)
        if info is None or _dead_here(info):
            return 0.0, info
        return max(0.0, time.time() - float(info.get("t", 0.0))), info

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def check(self) -> None:
        if self.fired or not self.after_s or time.monotonic() - self.armed_at < self.after_s:
            return
        held_s, info = self._holder()
        if held_s < self.after_s:  # the holder took its role only now: the whole deadline from then
            # unless a member on the route stopped: then it is the one, whoever holds the peer's role (a wait
            # cut by the PS's death keeps its deadline through the repair, and the worker that held the PS up
            # was found only by the shrink's watch 3 s later: psbench chaos, bounded:2, checkpoint trial-009)
            stopped = self._first_stopped([r for r in self.route if r != self.role])
            if stopped is None:
                self.armed_at = time.monotonic() - held_s
                return
            self.fired = True
            suspect(self.ctx, stopped[0], self.what, time.monotonic() - self.t0, stopped[1])
            return
        if self.silent_only and info is not None:
            silent = beacon.silent_for(self.ctx.cfg.run_dir, info["host"], info["pid"])
            if silent is not None and silent < self.after_s:
                return  # busy, not hung: its beacon goes on
        role = self.role
        if self.route:
            role, info = self._on_route(info)
            if role is None:
                return
        self.fired = True
        suspect(self.ctx, role, self.what, time.monotonic() - self.t0, info)

    def _on_route(self, info: dict | None) -> tuple[str | None, dict | None]:
        """Whom a missing answer that passes through ``route`` blames: the first member on it whose
        beacon has stopped; the peer itself if its own has, or HUNG_SILENCE_S past the deadline with every
        beacon going on (a live process that does not answer). Over TCP between two hosts, a hung middle
        replica's socket took the head's whole state, so the head's wait for its delivery ended, and the
        tail was suspected for the acknowledgement of a state it never got: the live tail was fenced
        (psbench chaos over two hosts, chain K=1 R=2, seed 46, trial-009)."""
        stopped = self._first_stopped(list(self.route), (self.role, info))
        if stopped is not None:
            return stopped
        if time.monotonic() - self.armed_at >= self.after_s + HUNG_SILENCE_S:  # a member hung late shows by then
            return self.role, info
        return None, None

    def _first_stopped(self, roles: list[str], last: tuple[str, dict | None] | None = None) -> tuple[str, dict] | None:
        """The first of ``roles`` (then ``last``: a role and its pid file) whose holder's beacon has stopped (a
        holder on this host that is dead is not: its death is on its way)."""
        run_dir = self.ctx.cfg.run_dir
        for role, held in [(r, read_pid_file(run_dir, r)) for r in roles] + ([last] if last else []):
            if held is None or _dead_here(held):
                continue
            if (beacon.silent_for(run_dir, held["host"], held["pid"]) or 0.0) >= HUNG_SILENCE_S:
                return role, held
        return None


def _dead_here(info: dict) -> bool:
    """Whether the process of pid file ``info`` is on this host and dead (its death is on its way to ULFM)."""
    return info["host"] == socket.gethostname() and not alive(int(info["pid"]))


class GroupSuspicion:
    """A wait on a collective of the workers' group (the allreduce, the weights' broadcast): which member
    holds it up cannot be told from the collective, but a stopped one's beacon is silent. Past
    ``--suspect-after`` (not within a cold start), each member whose beacon has been silent that long is
    suspected, once. Before, nobody suspected a hung worker: the others waited out the peer timeout."""

    def __init__(self, ctx, members: list[str], what: str) -> None:
        self.ctx, self.members, self.what = ctx, members, what
        self.armed_at = max(time.monotonic(), getattr(ctx, "cold_until", 0.0))
        self.suspected: set = set()

    def check(self) -> None:
        waited = time.monotonic() - self.armed_at
        if self.ctx.cfg.suspect_after_s and waited >= self.ctx.cfg.suspect_after_s:
            suspect_the_silent(self.ctx, self.what, waited, self.suspected, members=self.members)


def suspect_the_silent(ctx, what: str, waited_s: float, suspected: set, members: list[str] | None = None) -> None:
    """A collective (the repair's shrink; ``members``: of those roles only) has waited ``waited_s`` >=
    ``--suspect-after``: suspect every member whose beacon has been silent that long, once (``suspected``:
    the pids already named). The members nobody waits on otherwise, the evaluator and the spares, are
    found here."""
    run_dir = ctx.cfg.run_dir
    members = set(members) if members is not None else {role.label for role in ctx.cluster.roles
                                                         if role != ctx.cluster.me}
    for role, info in pid_files(run_dir):
        if role not in members or info["pid"] in suspected or info["pid"] == os.getpid():
            continue
        silent = beacon.silent_for(run_dir, info["host"], info["pid"])
        if silent is not None and silent >= ctx.cfg.suspect_after_s:
            suspected.add(info["pid"])
            suspect(ctx, role, what, waited_s, info)


def suspect(ctx, role: str, what: str, waited_s: float, info: dict | None) -> dict | None:
    """Record the suspicion of ``role``'s holder (``info``: its pid file, just read); fence it here
    if no launcher will."""
    if info is not None and info["pid"] == os.getpid():  # a stale file (a promotion renames roles): never itself
        info = None
    if info is None:
        ctx.log.emit(Ev.SUSPECT, role=role, what=what, waited_s=round(waited_s, 3), pid=None, host=None,
                     t_suspect=time.time(), note="no pid file: cannot be fenced")
        return None
    rec = ctx.log.emit(Ev.SUSPECT, role=role, what=what, waited_s=round(waited_s, 3), pid=info["pid"],
                       host=info["host"], generation=info.get("generation"), t_suspect=time.time(),
                       by=ctx.cluster.me.label, by_host=socket.gethostname())
    if os.environ.get(FENCER_ENV) != "launcher" and info["host"] == socket.gethostname():
        try:
            os.kill(int(info["pid"]), signal.SIGKILL)
            ctx.log.emit(Ev.FENCE, pid=info["pid"], host=info["host"], role=role, how="self", t_fence=time.time())
        except ProcessLookupError:
            pass
    return rec

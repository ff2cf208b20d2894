"""What every rank of a run shares: the config, its event log, the membership
(:class:`~psmodes.cluster.Cluster`), the workload, the torch device, and the
control channel survivors use to agree on repairs.

Control flow for repairs uses two exceptions: :class:`~psmodes.transport.PeerFailed`
(a death was detected: shrink) and :class:`RespawnNow` (the leader
announced that the missing roles are to be spawned now: everyone calls
:meth:`Context.respawn`). Waits on peers call :meth:`Context.idle` between
polls, which is where a pending announcement is noticed.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import torch
from mpi4py import MPI

from benchmarks.registry import get as get_workload

from . import elastic, killpoints, modes, transport
from .background import Background
from .cluster import Cluster, fill_from_spares, full_layout, initial_layout
from .config import RunConfig
from .divergence import Divergence
from .errors import RunFailed
from .events import Ev, EventLog
from .flatparams import FlatParams
from .messages import ACTION_NONE, ACTION_REFILL, ACTION_SPAWN, HEADER_LEN, Announce
from .optim import default_lr
from .pidfiles import live_hosts_with_room, spawned_dead
from .suspicion import COLD_START_S, suspect_the_silent

# a spawn or join still running this long after a member's death is known is given up (see respawn)
STALL_GRACE_S = 3.0
SPAWN_TRIES = 3  # a death during the spawn is repaired (shrink, spawn again) this many times in all
JOIN_TRIES = 3  # a death while the workers' group is made again is repaired (shrink, make again) this many times
# a replacement joins 3-4 s after it wrote its pid file (2 busy cores); one still in the spawn this
# long after is stuck in MPI_Init. Seen (kill-point matrix, the chain head and tail killed 10 ms apart,
# Open MPI 5.0.11, 1 run in 17): both replacements failed in MPI_Init ("OPAL ERROR: Not supported in
# ompi/dpm/dpm.c at line 406") and hung in its abort, and the survivors' spawn waited the outage timeout
JOIN_STUCK_S = 20.0
# --refill-spares: the refill's new world is made this long after a repair and after the leader's
# recovery, at the earliest. Made 0.3 s after a kill, its MPI_Comm_create_from_group never returned
# (psbench chaos, refill trials, Open MPI 5.0.11: the new spare then died of SIGSEGV in
# ompi_comm_revoke_local on the death's notice); 1.5-2 s after, it did in every run. A death's
# notices must have reached every process first.
REFILL_SETTLE_S = 2.0


def no_repair(cfg: RunConfig) -> str:
    """Why a death ends this job (mode none, or a whole-job restart by the launcher)."""
    if cfg.recovery == "job-restart":
        return "job-restart: the job ends and the launcher restarts it from the newest checkpoint"
    return "mode none has no recovery"


def refill_action(roles: list, missing: list, now: float, refill_after: float, replace_after: float) -> bool:
    """Whether a refill is due at ``now`` (monotonic) for the world's ``roles`` and the refill's ``missing`` roles.

    A lost worker is replaced ``--restart-delay`` after the loss (``replace_after``), by a spare or a spawn,
    as a dead PS is. A refill that spawns (a new world) also waits REFILL_SETTLE_S after the last repair
    (``refill_after``, a shrink included); one that spares fill in place makes no new world and does not wait.

    Tried and dropped: letting the spares fill in place while a refill's spawn waits (so that with
    --refill-spares a spare need not wait the 2 s for its successor's spawn). With two workers killed 0.1 s
    apart, the spare took the first one's place at once and the workers' group was made again with it
    (MPI_Comm_create_group) while the second was dying: the creation never returned (Open MPI 5.0.11) and the
    run ended at the peer timeout. The 2 s absorb such deaths before any join."""
    if now < replace_after:
        return False
    return not fill_from_spares(roles, missing)[2] or now >= refill_after


class RespawnNow(Exception):
    """The leader announced a respawn; the receiver must join it."""


class Context:
    def __init__(self, cfg: RunConfig, cluster: Cluster, log: EventLog) -> None:
        self.cfg = cfg
        self.mode = modes.get(cfg.mode)  # the recovery mode's hooks (psmodes/modes/)
        self.cluster = cluster
        self.log = log
        self.workload = get_workload(cfg.benchmark)
        self.base_lr = default_lr(cfg, self.workload)  # the run's; ``lr`` follows the workers left
        self.batch_size = cfg.batch_size or self.workload.batch_size
        self.device = pick_device(cfg)
        self._action_buf = np.zeros(HEADER_LEN, dtype=np.int64)  # an Announce, broadcast by the leader
        self._action_req: MPI.Request | None = None
        self._deaths = transport.DeathWatch()
        self.refilling = False  # the announcement that came was ACTION_REFILL (read by respawn)
        self.refill_after = 0.0  # no refill that spawns before this (monotonic): REFILL_SETTLE_S after a repair
        self.replace_after = 0.0  # no lost worker's replacement before this: --restart-delay after the loss
        # the worker indices a respawn gave to a new process (a spare or a spawned replacement) since the workers'
        # group last took the world's workers (Worker._take_group): a worker that died inside a refill's spawn is
        # replaced under its own index when it was the last (psmodes.elastic.replacements), so the indices alone
        # do not show that the group changed (seen: 20 worker failures in 120 s, --refill-spares; the survivors
        # kept the dead member's communicator, the replacement waited for them in MPI_Comm_create_group and the
        # run ended at the peer timeout)
        self.workers_replaced: set[int] = set()
        self.divergence = Divergence(self)  # a non-finite value, recorded once (psmodes/divergence.py)
        # a message of an older world generation, dropped with its payloads (psmodes.transport.Generations)
        transport.GENERATIONS.on_drop = lambda **what: self.log.emit(Ev.STALE_DROPPED, **what)
        self.prebuilt: FlatParams | None = None  # a spare's model, built while it waits (build_flat)
        # a replacement is itself cold at first, and so are the waits of the others on it (psmodes.suspicion)
        self.cold_until = time.monotonic() + COLD_START_S if cluster.generation else 0.0
        if cluster.generation and self.refill_expected():  # as the survivors do after this repair (respawn)
            self._post_action()

    @property
    def workers_left(self) -> int:
        """The workers the world holds now (fewer than --workers after an elastic worker's death)."""
        return sum(r.kind == "worker" for r in self.cluster.roles)

    @property
    def lr(self) -> float:
        """The learning rate now: the run's, scaled for the workers left under ``--elastic-batch local``
        (psmodes/elastic.py), the same on every rank since it is a function of the roles the repairs agreed
        on. The PS's optimizer reads it at every step, so a replay or a catch-up applies it too."""
        return self.base_lr * elastic.batch_and_lr(self.cfg, self.batch_size, self.workers_left)[1]

    # ---- timeouts
    @property
    def peer_timeout(self) -> float:
        return self.cfg.peer_timeout_s

    @property
    def outage_timeout(self) -> float:
        return self.cfg.outage_timeout_s

    # ---- repair protocol
    def after_failure(self, exc: transport.PeerFailed, via: str) -> list:
        """Shrink and post the wait for the leader's next announcement.

        No MPI_Comm_revoke: on a communicator that was merged with a spawned
        replacement, revoking it was seen (Open MPI 5.0.11) to leave later
        point-to-point messages between survivors undelivered, a hang in one run
        out of two. Instead every rank that waits on the world does so with an
        ANY_SOURCE receive, which ULFM fails with ERR_PROC_FAILED_PENDING as soon
        as any member of the communicator has died, so each rank notices on its
        own; the workers are told by the leader.

        If the leader's respawn announcement had already arrived, the leader is
        in the spawn, where it sees the same death, shrinks too and announces the
        respawn again (see :meth:`respawn`): this rank takes that announcement after
        the shrink, raises :class:`RespawnNow` and joins the spawn.
        """
        announced = self._announced()
        dead = self._shrink(exc, via)
        if announced:
            self._action_req = None
            while True:  # as the ranks in the spawn do after their shrink (respawn), a death meanwhile too
                try:
                    self.announce_again(self.refilling)
                    break
                except transport.PeerFailed as again:
                    self._shrink(again, via)
            raise RespawnNow()
        self._post_action()
        return dead

    def _shrink(self, exc: transport.PeerFailed, via: str, t_detect: float | None = None) -> list:
        """Drop the dead from the world (every survivor takes part); RunFailed when the run cannot go on.
        ``t_detect``: when the death was known, if before now."""
        t_detect = t_detect or time.time()
        workers = [r for r in self.failed_roles() if r.kind == "worker"]
        left = self.workers_left - len(workers)
        # whether the PS holds the state after the shrink (a chain promotes a replica) is decided after it
        reason = elastic.why_the_run_ends(self.cfg, workers, left)
        if workers and not left and self.cluster.me.kind != "worker":
            # every worker gone at once: most often they finished and left the job while a repair was due (two-host
            # chaos, hybrid trial-000: the PS fenced after its last answer, before its final snapshot; the evaluator
            # then blamed Horovod for their "deaths"), so the reason does not say they died
            reason = f"every worker is gone ({', '.join(r.label for r in workers)}: finished, or died at once)"
        if reason is not None:
            # said before the shrink, which would wait for workers that may be blocked in their allreduce
            self.log.emit(Ev.DETECT, via=via, error=str(exc), t_detect=t_detect, dead=[r.label for r in workers],
                          role=self.cluster.me.label, rank=self.cluster.rank)
            raise RunFailed(f"{reason} ({exc})")
        pending, self.open_suspicion = getattr(self, "open_suspicion", None), None
        timer = pending.through_repair() if pending is not None else None  # a hung peer blocks the shrink
        try:
            dead = self.watched(self.cluster.shrink, "shrink")
        finally:
            if timer is not None:
                timer.cancel()
        self.log.emit(Ev.DETECT, via=via, error=str(exc), t_detect=t_detect,
                      dead=[r.label for r in dead], role=self.cluster.me.label, rank=self.cluster.rank)
        # a shrink is a repair: no refill's new world within REFILL_SETTLE_S of it. Before, only a respawn and the
        # leader's recovery set that, so after a worker's death alone (a shrink, then the regroup) the refill spawned
        # one step later (found by tests/test_failures.py's two workers killed together: the first try ended in
        # "NBC_Progress: an error 75" on every survivor)
        self.settle_refill()
        # a worker that died in the shrink itself (known to nobody before it)
        lost = [r for r in dead if r.kind == "worker"]
        if (reason := elastic.why_the_run_ends(self.cfg, lost, self.workers_left, self.cluster.ps is not None)):
            raise RunFailed(f"{reason} ({exc})")
        self.mode.on_shrink(self.cluster, dead)  # RunFailed when no copy of the PS state survives
        if self.cluster.leader is None:
            # not known failed before the shrink: the workers had finished and left the job (a PS
            # killed after the last step, before the final snapshot), or died while the shrink ran
            raise RunFailed(f"the workers are gone (finished, or died during the repair) after {exc}; "
                            "the run cannot continue")
        return dead

    def _announced(self) -> bool:
        """Whether the leader's respawn announcement has arrived (a failed wait counts as not)."""
        if self._action_req is None:
            return False
        try:
            done = transport.test(self._action_req, "wait for repair announcement")
        except transport.PeerFailed:
            return False
        if done:
            self._action_req = None
            return self._took_announcement()
        return False

    def _took_announcement(self) -> bool:
        """Whether the completed announcement calls everyone into :meth:`respawn`."""
        action = self._announcement()
        self.refilling = action == ACTION_REFILL
        return action in (ACTION_SPAWN, ACTION_REFILL)

    def refill_expected(self) -> bool:
        """--refill-spares with spares used up, or a lost worker to replace (psmodes/elastic.py): the
        leader will announce the refill once training runs again (every survivor waits for the
        announcement meanwhile). The same on every rank: a function of the roles the repairs agreed on."""
        spares = self.cfg.refill_spares and any(r.kind == "spare" for r in self.cluster.missing(initial_layout(self.cfg)))
        return spares or (elastic.replaces(self.cfg) and self.workers_left < self.cfg.workers)

    def _missing(self, refill: bool) -> list:
        """The roles a respawn fills: those missing but workers; a refill, the spares used up too
        (--refill-spares) and the lost workers' replacements, since the workers take part in it as a group
        (psmodes/elastic.py)."""
        full = initial_layout(self.cfg) if refill and self.cfg.refill_spares else full_layout(self.cfg)
        return self.cluster.missing(full, self.cfg.workers if refill and elastic.replaces(self.cfg) else 0)

    def refill_due(self) -> bool:
        """The leader, with training running: whether to announce the refill now (:func:`refill_action`)."""
        return self.refill_expected() and refill_action(self.cluster.roles, self._missing(True), time.monotonic(),
                                                        self.refill_after, self.replace_after)

    def settle_refill(self) -> None:
        """No refill that spawns before REFILL_SETTLE_S from now (after a repair or the leader's recovery)."""
        self.refill_after = max(self.refill_after, time.monotonic() + REFILL_SETTLE_S)

    def replace_later(self) -> None:
        """A worker was lost: its replacement is due ``--restart-delay`` from now."""
        self.replace_after = max(self.replace_after, time.monotonic() + self.cfg.restart_delay_s)

    def _announcement(self) -> int:
        """The action of the leader's completed broadcast. ULFM can complete it with nothing
        received (an all-zero buffer: seen when the head and every replica had died), which
        announces nothing."""
        if not self._action_buf.any():
            return ACTION_NONE
        return Announce.from_header(self._action_buf).action

    def failed_roles(self) -> list:
        """The roles of the world's members that ULFM knows to have failed (a local call)."""
        return [self.cluster.roles[r] for r in self.cluster.known_failed() if r < len(self.cluster.roles)]

    def resilient(self, body, via: str, after_failure=None, after_respawn=None):
        """Run a role's loop ``body`` until it returns, repairing around it.

        A detected death shrinks the world (mode ``none``: the run fails); an
        announced respawn is joined. ``after_failure`` may return a result to
        end the loop (a replica promoted to head runs on as the PS).

        ``after_respawn`` runs inside the same repair loop as the body: a death during
        it (a chain head handing its state to a new tail that is killed at once) is
        repaired like any other, and it runs again once the repair is done."""
        respawned = False
        while True:
            try:
                try:
                    if respawned:
                        # may end the loop too (a replica promoted while the head died in the spawn)
                        result = after_respawn()
                        respawned = False
                        if result is not None:
                            return result
                    return body()
                except transport.PeerFailed as exc:
                    if self.cfg.dies_with_ps:
                        raise RunFailed(f"a peer died ({exc}); {no_repair(self.cfg)}") from None
                    self.after_failure(exc, via=via)  # RespawnNow: the respawn was announced already
                    if after_failure is not None and (result := after_failure()) is not None:
                        return result
            except RespawnNow:
                self.respawn()
                respawned = after_respawn is not None

    def _post_action(self) -> None:
        if self.cluster.leader is None:
            raise RunFailed("the leader worker died; the run cannot continue")
        if self.cluster.rank != self.cluster.leader:
            self._action_buf[:] = 0
            self._action_req = self.cluster.world.Ibcast(self._action_buf, root=self.cluster.leader)

    def announce_again(self, refill: bool) -> None:
        """After a shrink inside a respawn (or of a rank the announcement had reached before it got there):
        the leader announces the respawn again and every other survivor takes that announcement, so that
        a member the first one never reached joins too. Before, such a member (a spare spawned by the
        previous refill, still starting when a worker's death cut the leader's broadcast: 20 worker
        failures in 120 s, chain, --restart-delay 0) waited for an announcement while the others waited
        for it in the next attempt's agreement, and the run ended at the outage timeout. A member that
        missed the first announcement takes this one where it waits for one (:meth:`after_failure` posted
        the wait), and joins :meth:`respawn` from its start."""
        if self.cluster.rank == self.cluster.leader:
            self.announce(ACTION_REFILL if refill else ACTION_SPAWN)
            return
        self._post_action()
        transport.wait(self._action_req, self.outage_timeout, "wait for the respawn's announcement again")
        self._action_req = None
        if not self._took_announcement():
            raise RunFailed("the respawn was called off after a death in it (the leader announced no repair)")

    def announce(self, action: int = ACTION_SPAWN) -> None:
        """Leader only: tell every survivor to join :meth:`respawn` now (or, with
        ACTION_NONE at the end of a run, that no repair will come)."""
        self._action_buf[:] = Announce(action).to_header()
        self.refilling = action == ACTION_REFILL
        req = self.cluster.world.Ibcast(self._action_buf, root=self.cluster.leader)
        transport.wait(req, self.peer_timeout, "announce respawn")
        if action != ACTION_NONE:
            killpoints.reached("announced", self, action=action)

    def idle(self) -> None:
        """Between polls: raise RespawnNow once the leader's announcement arrived."""
        if self._action_req is not None and transport.test(self._action_req, "wait for repair announcement"):
            self._action_req = None
            if self._took_announcement():
                raise RespawnNow()

    def death_watch(self) -> MPI.Request:
        """For waits on one live peer that must still notice a death elsewhere (``watch=``)."""
        return self._deaths.request(self.cluster.world)

    def wait_announcement(self, timeout: float) -> None:
        """Non-workers with nothing else to do block here until RespawnNow."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.idle()
            time.sleep(0.005)
        raise transport.PeerTimeout(f"no repair announced within {timeout:.0f} s")

    def respawn(self, refill: bool | None = None) -> float:
        """Every survivor: fill the missing roles (collective), after the leader's announcement:
        from the spares first, by a spawn for the rest (:meth:`psmodes.cluster.Cluster.respawn`).
        ``refill`` (by default: the announcement said so): the spares used up too (``--refill-spares``) and
        the lost workers' replacements.

        A death during the spawn (a kill that lands while the replacement is
        starting: MPI_Comm_spawn fails with ERR_PROC_FAILED, or making the new
        world fails, see :func:`~psmodes.cluster.join`) is repaired like any
        other: the survivors shrink the world again (a chain replica may become
        the head), the leader announces the respawn again (:meth:`announce_again`) and they
        spawn what is missing now, up to :data:`SPAWN_TRIES`
        attempts in all, each bounded by the outage timeout. Open MPI 5.0.11 does not always
        fail the new world's construction: when the root died right after its spawn returned,
        some survivors' PMIx group construction waited for it for good (in most runs on a
        fresh machine). A survivor therefore gives an attempt up :data:`STALL_GRACE_S` after it
        knows of a death, and the helper thread stays behind, blocked (the next attempt, on the
        shrunk world, is not held up by it). A replacement that dies before it joins is such a
        death too, though no member of the world died: MPI_Comm_spawn waits for it for good (seen:
        a SIGSEGV in Open MPI 5.0.11's MPI_Init, chaos hybrid trial-047). The survivors see it by
        its pid file (:func:`psmodes.pidfiles.spawned_dead`) and give the attempt up at once (no
        grace: it cannot join any more); the shrink then drops nobody and the spawn is tried
        again. One that is still in its MPI_Init :data:`JOIN_STUCK_S` after its pid file was
        written is stuck there (a failed MPI_Init that hangs in its abort): killed, it is such a death. Only a death that
        leaves no copy of the PS state (chain: head and all replicas) or kills a
        worker ends the run, with the same one-line reason as a death outside
        the spawn."""
        refill, self.refilling = (self.refilling if refill is None else refill), False
        t0 = time.monotonic()
        for attempt in range(1, SPAWN_TRIES + 1):
            missing = self._missing(refill)
            root = self.cluster.me.kind == "ps" and bool(missing)  # the spawn's root
            dead_spawned: list[dict] = []  # replacements of this attempt that died before joining
            try:
                if attempt > 1:
                    self.announce_again(refill)
                self.bounded(self.cluster.agree_generation, self.outage_timeout, "agree on the generation",
                             stalled_by=self.member_died)
                if root:
                    killpoints.reached("spawn", self, attempt=attempt, missing=[r.label for r in missing])
                spawned = (lambda: killpoints.reached("in_spawn", self, attempt=attempt)) if root else None
                to_spawn = fill_from_spares(self.cluster.roles, missing)[2]
                names = [r.in_generation(self.cluster.generation + 1) for r in to_spawn]  # respawn's generation
                taken, spawned_roles = self.bounded(lambda: self.cluster.respawn(missing, self.cfg.run_dir, spawned,
                                                                                 self._spawn_hosts),
                                                    self.outage_timeout, "spawn",
                                                    stalled_by=lambda: self._stalled(names, dead_spawned))
                break
            except transport.PeerFailed as exc:
                self.log.emit(Ev.SPAWN_FAILED, attempt=attempt, error=str(exc), spawning=[r.label for r in missing],
                              died_before_joining=dead_spawned, role=self.cluster.me.label, rank=self.cluster.rank)
                if attempt == SPAWN_TRIES:
                    raise RunFailed(f"the spawn of the missing roles failed {SPAWN_TRIES} times, "
                                    f"the last time: {exc}") from None
                self._shrink(exc, via="spawn", t_detect=min((d["t_seen"] for d in dead_spawned), default=None))
        seconds = time.monotonic() - t0
        self._action_req = None
        self.workers_replaced |= {r.index for r in (*taken, *spawned_roles) if r.kind == "worker"}
        if any(r.kind != "spare" for r in spawned_roles):
            # the spawned replacements are still starting (psmodes.suspicion); a spare is warm, and
            # one spawned to refill the pool serves nobody
            self.cold_until = time.monotonic() + COLD_START_S
        self.log.emit(Ev.RESPAWNED, spawned=[r.label for r in spawned_roles], from_spares=[r.label for r in taken],
                      seconds=seconds, attempts=attempt, role=self.cluster.me.label, rank=self.cluster.rank,
                      generation=self.cluster.generation, refill=refill)
        self.settle_refill()  # also after a repair the PS survived
        if self.refill_expected():
            self._post_action()
        return seconds

    def _spawn_hosts(self, survivors: list, to_spawn: list) -> list[str | None]:
        """Where each replacement goes: under ``--runtime prrte5`` over several hosts, a host where a survivor
        runs (:func:`psmodes.pidfiles.live_hosts_with_room`); otherwise the runtime's choice (None), as
        before."""
        if self.cfg.runtime != "prrte5" or len(self.cfg.hosts) < 2:
            return [None] * len(to_spawn)
        return live_hosts_with_room(self.cfg.run_dir, self.cfg.hosts, [r.label for r in survivors],
                                    [r.label for r in to_spawn], len(to_spawn))

    def _stalled(self, spawning: list[str], dead_spawned: list[dict]) -> tuple[str, float] | None:
        """Why the spawn of ``spawning`` may not end well, and how long it still gets (None: all is
        well): a member of the world died (:data:`STALL_GRACE_S`), or a replacement died before it
        joined (no time: added to ``dead_spawned``)."""
        if (died := self.member_died()) is not None:
            return died
        dead = spawned_dead(self.cfg.run_dir, spawning, stuck_after_s=JOIN_STUCK_S)
        if dead:
            dead_spawned[:] = dead
            stuck = [d["name"] for d in dead if d.get("stuck")]
            return (f"{', '.join(d['name'] for d in dead)} died before joining"
                    + (f" ({', '.join(stuck)} killed: stuck in MPI_Init for {JOIN_STUCK_S:.0f} s)" if stuck else "")), 0.0
        return None

    def member_died(self) -> tuple[str, float] | None:
        """For :meth:`bounded`'s ``stalled_by``: a collective that a member's death may keep from returning
        (a spawn, a join, making the workers' group) is given up :data:`STALL_GRACE_S` after the death is
        known."""
        return ("a member died", STALL_GRACE_S) if self.death_noticed() else None

    def death_noticed(self) -> bool:
        """Whether a member of the world died, after driving MPI progress: ULFM takes in the
        runtime's notice of a death in the progress engine, and a thread blocked in a PMIx call
        drives none (seen: the survivors with no other MPI thread never learnt of the death,
        those with Horovod's background thread did)."""
        try:
            transport.test(self.death_watch(), "death watch")
        except transport.PeerFailed:
            return True
        except MPI.Exception:
            pass
        return bool(self.cluster.known_failed())

    def watched(self, shrink, what: str):
        """A repair's shrink (the world's, or the workers' group's: psmodes/elastic.py), watched from a
        thread of its own: once it has waited ``--suspect-after``,
        each member whose beacon went silent is suspected, once (a hung evaluator or spare, which no
        other wait finds: every survivor sat in the shrink until the watchdog); past the outage
        timeout the process records why and leaves. The shrink itself stays on this thread: run on a
        helper thread (as the spawn is), a worker died of SIGSEGV inside ULFM's agreement in the quick
        perf's checkpoint failure run, as the stateless workers' shrink on a helper thread had once."""
        t0, stop, suspected = time.monotonic(), threading.Event(), set()

        def watch() -> None:
            while not stop.wait(1.0):
                waited = time.monotonic() - t0
                if self.cfg.suspect_after_s and waited >= self.cfg.suspect_after_s:
                    suspect_the_silent(self, f"the repair's {what} (a member that never joined)", waited, suspected)
                if waited >= self.outage_timeout:
                    self.log.emit(Ev.FAILED, reason=f"PeerTimeout: {what}: not done in {self.outage_timeout:.0f} s")
                    os._exit(3)

        threading.Thread(target=watch, name="shrink-watch", daemon=True).start()
        try:
            return shrink()
        finally:
            stop.set()

    @staticmethod
    def bounded(fn, timeout: float, what: str, stalled_by=None):
        """Run a blocking collective (MPI_Comm_spawn has no timeout of its own) on a helper
        thread; PeerTimeout if it has not returned in ``timeout`` s (the run is then hung).
        ``stalled_by``: polled meanwhile; once it has said (reason, grace), PeerFailed if the call
        has not returned ``grace`` s later."""
        call = Background(fn, what)
        deadline, stalled, since = time.monotonic() + timeout, None, 0.0
        while time.monotonic() < deadline:
            if not call.running(0.05):  # its result, even one that came after a death, stands
                break
            if stalled_by is not None and stalled is None:
                stalled, since = stalled_by(), time.monotonic()
            if stalled is not None and time.monotonic() - since >= stalled[1]:
                reason, grace = stalled
                raise transport.PeerFailed(f"{what}: {reason} and the call did not return"
                                           + (f" in {grace:.0f} s" if grace else ""), MPI.ERR_PROC_FAILED)
        if call.running():
            raise transport.PeerTimeout(f"{what}: not done in {timeout:.0f} s")
        return call.result()


def build_flat(ctx: Context) -> FlatParams:
    """The workload's model as flat weights, initialised from the run's seed (the same everywhere).
    A spare builds it while it waits (``ctx.prebuilt``): the role it takes uses that one, bitwise
    the same model, and saves the build (100 ms of a takeover's 350 ms for fmnist-cnn on 2 cores)."""
    prebuilt, ctx.prebuilt = ctx.prebuilt, None
    if prebuilt is not None:
        return prebuilt
    torch.manual_seed(ctx.cfg.seed)
    return FlatParams(ctx.workload.build_model(ctx.cfg))


def pick_device(cfg: RunConfig) -> torch.device:
    """CUDA device per local rank on GPU nodes, else the CPU."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RunFailed("--device cuda but torch sees no CUDA device")
    local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def set_threads(cfg: RunConfig) -> int:
    """One torch thread per rank when ranks outnumber cores (oversubscription
    makes extra threads fight over cores), else an even share of the cores."""
    if cfg.threads_per_rank:
        n = cfg.threads_per_rank
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        # a spawned replacement sees a local size of 1, but it shares the node with the rest
        local = max(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", 1)), cfg.n_ranks)
        n = 1 if local >= cores else max(1, cores // local)
    torch.set_num_threads(n)
    return n

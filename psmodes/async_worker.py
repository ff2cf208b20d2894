"""A worker under ``--consistency async`` or ``bounded:S``.

Every worker talks to the PS on its own: it computes a gradient on the weights
it last received, pushes it (``GRAD`` with the version it was computed on),
and waits for the PS's answer: the new weights, whether the gradient was
applied, and its staleness (PS version at apply time minus the version it was
computed on). Under ``bounded:S`` the PS holds that answer back while granting
new weights could let an update become staler than S (:mod:`psmodes.async_server`).

Failures: each worker detects the PS's death itself (ULFM fails its send or its
ANY_SOURCE receive) and joins the collective shrink; worker 0 (the leader)
announces the respawn after ``--restart-delay`` and everyone joins it. After
any repair every worker says HELLO again. A gradient whose answer never came
is not re-sent: the PS that took over may hold it already (a chain head that
replicated it before dying), and sending it again could apply it twice.
In ``stateless`` mode each worker keeps computing on its last weights and
buffers its own updates (:class:`~psmodes.replay.UpdateBuffer`) until the
replacement says READY, then hands them over with its HELLO.
"""
from __future__ import annotations

import time

import torch
from mpi4py import MPI

from . import transport as tp
from .async_server import staleness_lr_scale
from .context import RespawnNow, no_repair
from .events import Ev
from .flatparams import digest
from .messages import ACTION_REFILL, DONE, FAILED, POLICY_CODES, RUNNING, Answer, Grad, Hello
from .suspicion import Suspicion
from .worker import Worker


class AsyncWorker(Worker):
    def run(self) -> None:
        ctx = self.ctx
        self.status = RUNNING
        self.samples_per_step = ctx.batch_size
        self._guarded(self._hello)
        while self.status == RUNNING:
            self._guarded(self._iteration)
        self._join_repair()
        self._end_repairs(self.state.version)
        ctx.log.emit(Ev.DONE, completed=self.status == DONE, version=self.state.version,
                     slowest_answer_s=round(self.slowest_answer_s, 4))

    def _guarded(self, step) -> None:
        """One piece of work; a detected death or an announced respawn is handled here,
        also one that happens while handling another (a replacement killed as it joins)."""
        while True:
            try:
                step()
                return
            except tp.PeerFailed as exc:
                step = lambda exc=exc: self._ps_lost(exc, time.time())  # noqa: E731
            except RespawnNow:
                step = self._respawn

    # ---- normal operation
    def _iteration(self) -> None:
        t_iter = time.perf_counter()
        if self.leader and self._respawn_due():
            self.ctx.announce()
            self._respawn()
            return
        if self.leader and self.state.ps_up and self._refill_due():
            self.ctx.announce(ACTION_REFILL)  # a lost worker's replacement (psmodes/elastic.py)
            self._respawn()
            return
        if self.state.ps_up:
            self._push(self._compute())
            return
        # the PS is down
        if self.ctx.mode.trains_through_outage:
            self._outage_step(self._compute())
            self._advance_repair()
        else:
            time.sleep(0.005)
            self._advance_repair()
            self._add_idle(time.perf_counter() - t_iter)

    def _push(self, compute_s: float) -> None:
        c, ctx = self.ctx.cluster, self.ctx
        base = self.state.version
        t_send = time.time()
        try:
            # polls for a respawn announcement too: the PS may be in the spawn, not receiving
            # a PS that answers in milliseconds and has not for --suspect-after is hung (psmodes.suspicion);
            # under bounded:S the PS may hold the answer for the slowest worker: a stopped one is blamed
            suspect = Suspicion(ctx, c.ps, f"the PS's answer to worker{self.index}", route=self._held_by())
            tp.send(c.world, Grad(base, worker=self.index), self.grad_host.numpy(), c.ps,
                    tp.TAG_TO_PS, ctx.peer_timeout, "worker sends gradient", on_idle=ctx.idle,
                    watch=ctx.death_watch(), suspect=suspect)
            self.state.pending = True
            answer = self._receive_weights(ctx.peer_timeout, "worker waits for weights", suspect)
        except tp.PeerFailed as exc:
            self._ps_lost(exc, t_send)
            return
        suspect.done()
        self.slowest_answer_s = max(self.slowest_answer_s, suspect.elapsed())
        applied = answer.applied
        staleness = answer.staleness if applied else None
        extra = {"applied_as": answer.applied_as} if applied else {}
        if applied and ctx.cfg.lr_staleness:
            extra["lr_scale"] = staleness_lr_scale(staleness, True)
        ctx.log.emit(Ev.STEP, version=self.state.version, applied=applied, staleness=staleness, base=base, **extra,
                     samples=self.samples_per_step, compute_s=round(compute_s, 6),
                     wait_s=round(time.time() - t_send, 6), loss=round(self.last_loss, 5))
        if self.state.outage is not None:
            self._recovered()
        if answer.stop:
            self.status = DONE

    def _held_by(self) -> tuple[int, ...]:
        """The route of this worker's answer (:class:`~psmodes.suspicion.Suspicion`): the PS, then the other
        workers. The PS answers one worker at a time (a send to a stopped worker holds it up) and, under
        ``bounded:S``, holds answers back for the slowest: a stopped worker is the one suspected, not the PS
        that waits for it (seen in psbench chaos: the live PS fenced for an answer it held for a hung worker,
        and for one it could not hand to a hung leader); a stopped PS first, when both are."""
        c = self.ctx.cluster
        return (c.ps, *(r for r, role in enumerate(c.roles) if role.kind == "worker" and role.index != self.index))

    def _receive_weights(self, timeout: float, what: str, suspect=None) -> Answer:
        c = self.ctx.cluster
        answer, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_FROM_PS, timeout, what, Answer, on_idle=self.ctx.idle,
                            suspect=suspect)
        self._recv_weights(suspect)
        self.state.commit(answer.version, answer.t0_ms)
        self.flat.weights.copy_(torch.from_numpy(self.weights_in))
        return answer

    def _hello(self) -> None:
        """(Re)connect to the PS; a stateless replacement gets this worker's buffer. Every repair ends here,
        so a worker that a repair dropped is dropped here from this worker's data shards too."""
        c, ctx, cfg = self.ctx.cluster, self.ctx, self.ctx.cfg
        if self._group_changed():
            self._reshard(*self._take_group())
        offer = self.mode.handover(self)  # stateless: this worker's buffer for a fresh replacement
        handover = offer is not None
        buffered, vectors = offer if handover else (0, [])
        t_connect = time.perf_counter()
        hello = Hello(self.state.version, buffered=buffered, t0_ms=self.state.t0_ms, policy=POLICY_CODES[cfg.replay],
                      vectors=len(vectors), worker=self.index)
        # the sends only: a replacement answers once every worker's hand-over is in (async_server)
        suspect = Suspicion(ctx, c.ps, f"the PS's receipt of worker{self.index}'s hello")
        tp.send(c.world, hello, None, c.ps, tp.TAG_TO_PS, ctx.peer_timeout, "worker says hello", on_idle=ctx.idle,
                watch=ctx.death_watch(), suspect=suspect)
        if handover:
            handover_s = self.mode.send_handover(self, vectors, suspect)
        suspect.done()
        version_before = self.state.version
        # the answer: a replacement that waits for every hand-over is suspected only once its beacon is silent
        # too; without the wait's suspicion, a PS hung before it answered the Hellos after a respawn was waited
        # for until the peer timeout (psbench chaos over two hosts, bounded:2 chain R=2, trial-026)
        suspect = Suspicion(ctx, c.ps, f"the PS's answer to worker{self.index}'s hello", silent_only=handover,
                            route=self._held_by())
        reply = self._receive_weights(ctx.outage_timeout, "worker waits for the PS", suspect)
        suspect.done()
        if handover:
            self.mode.handed_over(self, len(vectors), handover_s)
        self.state.ps_up = True
        if self.state.outage is not None:
            self.state.outage.lost_steps = 0 if handover else max(self.state.outage.lost_steps,
                                                            self.state.outage.version - self.state.version)
            self._add_idle(time.perf_counter() - t_connect)
        ctx.log.emit(Ev.CONNECTED, version=self.state.version, generation=c.generation, version_before=version_before)
        if reply.stop:
            self.status = DONE
            if self.state.outage is not None:
                self._recovered()  # the run ends right at the reconnection

    # ---- outages
    def _workers_lost(self, exc: tp.PeerFailed) -> None:
        """Elastic (psmodes/elastic.py): a worker died, not the PS. Every survivor notices it in its own wait,
        shrinks it and says Hello again, as after any repair; its gradient whose answer never came is not
        re-sent (see the module docstring). Its outage lasts to its first applied update after the Hello."""
        ctx = self.ctx
        self.t_group_lost = self.t_group_lost or time.perf_counter()
        lost = [r.label for r in ctx.failed_roles() if r.kind == "worker"]
        ctx.log.emit(Ev.DETECT, via=f"worker{self.index}", error=str(exc), t_detect=time.time(), dead=lost,
                     version=self.state.version, role=f"worker{self.index}")
        self.state.begin_outage(time.time())
        self.state.pending = False
        self.state.ready_req = None  # posted on the world the shrink replaces; the Hello below carries any hand-over
        t = time.perf_counter()
        dead = ctx.after_failure(exc, via=f"worker{self.index}")
        self._add_idle(time.perf_counter() - t)
        if any(r.kind == "ps" for r in dead):  # the PS died too, found by the shrink
            self._ps_lost(tp.PeerFailed("the PS died in the repair of a worker's death", MPI.ERR_PROC_FAILED),
                          time.time(), shrunk=True)
            return
        if ctx.cluster.ps is None:  # the PS was down already: its respawn is announced again when due
            self.state.repair_due = self.state.repair_due or time.monotonic() + ctx.cfg.restart_delay_s
            return
        self._announce_no_repair()
        self._hello()

    def _ps_lost(self, exc: tp.PeerFailed, t_send: float, shrunk: bool = False) -> None:
        """The PS died (``shrunk``: found by the shrink of a worker's death, which every survivor took part
        in). A worker's death alone goes to :meth:`_workers_lost`."""
        cfg, ctx = self.ctx.cfg, self.ctx
        if not shrunk and self._a_worker_died():
            self._workers_lost(exc)
            return
        ctx.log.emit(Ev.DETECT, via=f"worker{self.index}", error=str(exc), t_detect=time.time(),
                     version=self.state.version, digest=digest(self.weights_in), role=f"worker{self.index}")
        if cfg.dies_with_ps:
            ctx.log.emit(Ev.FAILED, reason=f"PS died ({exc}); {no_repair(cfg)}")
            self.status = FAILED
            return
        self.state.ps_up = False
        self.state.ready_req = None
        self.state.begin_outage(t_send)
        self._add_idle(time.time() - t_send)
        self.state.repair_due = time.monotonic() + cfg.restart_delay_s
        self.mode.on_ps_lost(self)  # stateless: the gradient the dead PS never answered is kept
        if self.mode.trains_through_outage:
            if self.state.local_opt is not None:  # its own copy moved on
                self.flat.weights.copy_(torch.from_numpy(self.weights_in))
            self._join_repair()
            if not shrunk:
                self._in_background(lambda: ctx.after_failure(exc, via=f"worker{self.index}"), "shrink")
            return
        self.state.pending = False  # not re-sent; see the module docstring
        if not shrunk:
            t = time.perf_counter()
            ctx.after_failure(exc, via=f"worker{self.index}")
            self._add_idle(time.perf_counter() - t)
        if ctx.cluster.ps is not None:  # a promoted chain head, or the PS survived a replica's death
            self._hello()

    def _outage_step(self, compute_s: float) -> None:
        if self.mode.outage_step(self, compute_s):  # local: this worker's own copy moved on
            self.flat.weights.copy_(torch.from_numpy(self.weights_in))

    def _respawn_due(self) -> bool:
        if self.state.repair_due is None or time.monotonic() < self.state.repair_due:
            return False
        if self.repair_running():
            return False  # the shrink is still running on its thread
        self._join_repair()
        self.state.repair_due = None
        return True

    def _refill_due(self) -> bool:
        """The leader: a lost worker's replacement is due (Context.refill_due), with no repair of the PS under
        way."""
        return self.state.repair_due is None and self.state.repair_call is None and self.ctx.refill_due()

    def _respawn(self) -> None:
        """Everyone joins the collective spawn of the missing roles."""
        ctx = self.ctx
        self._join_repair()
        self.state.repair_due = None
        if self.mode.trains_through_outage and not self.state.ps_up:
            self._in_background(ctx.respawn, "respawn")  # and keep training; READY follows
            return
        t = time.perf_counter()
        ctx.respawn()
        self._add_idle(time.perf_counter() - t)
        self._hello()

    def _advance_repair(self) -> None:
        """Between outage iterations: finish repair steps, notice announcements and READY."""
        if self.state.repair_call is not None:
            if self.repair_running():
                return
            kind = self.state.repair_kind
            self._join_repair()
            if kind == "respawn":
                self._reconnect_ready()
        if self.state.ready_req is not None:
            if tp.test(self.state.ready_req, "wait for the replacement PS"):
                self.state.ready_req = None
                self._hello()
            return
        if not self.leader:
            self.ctx.idle()  # raises RespawnNow once the leader announced the respawn

"""``--mode hybrid``: chain replication every K updates plus upstream backup.

Chain replication with a large K is cheap (the head ships its state every K-th
version without waiting) but loses up to 2K-1 versions when the head dies
(:mod:`.chain`). Hybrid closes that gap where the updates come from: the sync
leader keeps every gradient it sent since the newest version the chain's tail has
acknowledged (at most about K model-sized vectors; the PS's answer carries that
version as ``Answer.durable``), and when the head dies the promoted replica replays
them, in order, with the same arithmetic: training continues from exactly the last
state the workers saw, optimizer state included. 0 lost steps at about the cost of
chain with the same K.

- The tail acknowledges every state it receives; the head collects the ACKs without
  waiting (:class:`AckInbox`) and tells the leader in each answer.
- The leader's :class:`UpstreamBackup` keeps (version, gradient) for versions at or
  after the acknowledged one, and hands them to a PS that took over with its Hello
  (``Hello.vectors`` of them, for versions ``hello.version - vectors`` onwards); the
  PS applies those at or after its own version (:meth:`Hybrid.ps_catch_up`) before the
  usual reconciliation of the pending gradient.
- Sync consistency only: the leader alone sees every update, in the PS's order.
- The backup holds at most ``2K + 64`` vectors: right after a promotion with no replica
  left, nothing is acknowledged until the new tail joins (``--restart-delay``); the
  oldest then go first, which can only matter if the new head died too, when no copy
  of the state is left anyway (the run ends, as in chain mode).

The runtime modules (torch, mpi4py) are imported inside the hooks: the launcher
imports this module for the promise alone.
"""
from __future__ import annotations

from collections import deque

from .chain import ChainReplication, replicate

EXTRA_KEPT = 64


class Hybrid(ChainReplication):
    name = "hybrid"
    summary = ("chain replication every K updates plus upstream backup: the leader keeps its gradients "
               "since the tail's last ACK and a promoted replica replays them")
    replacement_starts_from = "the promoted replica's copy, caught up with the leader's kept gradients"

    def ps_versions_lost(self, cfg) -> int:
        return 0

    def lost_steps_bound_leader_lost(self, cfg) -> int | None:
        # the upstream backup died with the leader: until the PS's forced state sync with the tail answers the
        # new leader (ps_new_leader), a head death loses what chain with the same K would
        return self._with_exchange(cfg, ChainReplication.ps_versions_lost(self, cfg))

    def validate(self, cfg) -> None:
        from ..errors import ConfigError

        super().validate(cfg)
        if cfg.is_async:
            raise ConfigError(f"--mode hybrid needs --consistency sync (the leader keeps the gradients in the "
                              f"order the PS applied them), not {cfg.consistency}")

    def describe(self, cfg) -> str:
        return f"hybrid K={cfg.replicate_every} R={cfg.replicas}"

    def chaos_draw(self, cfg, rng, specs: list[str]) -> None:
        super().chaos_draw(cfg, rng, specs)
        cfg.replicate_every = rng.choice([5, 20, 100])

    # ---- PS side
    def ps_setup(self, server) -> None:
        super().ps_setup(server)
        server.acks = AckInbox()

    def ps_after_update(self, server) -> None:
        if server.opt.version % server.ctx.cfg.replicate_every == 0:
            replicate(server, wait_ack=False, ack=True)

    def ps_after_respawn(self, server):
        return lambda: replicate(server, wait_ack=False, ack=True)

    def ps_durable_version(self, server) -> int:
        return server.acks.newest(server.ctx.cluster.world)

    def ps_catch_up(self, server, hello, src: int) -> dict:
        import torch

        from .. import transport as tp

        ctx, world = server.ctx, server.ctx.cluster.world
        first = hello.version - hello.vectors
        server.ctx.divergence.note("catch-up", server.opt.version, updates=hello.vectors)
        grad = torch.zeros(server.numel)
        applied = skipped = 0
        gap = None
        for i in range(hello.vectors):  # every payload is received, whatever is applied
            tp.recv_payload(world, grad.numpy(), src, tp.TAG_HANDOVER, ctx.peer_timeout, "catch-up gradient")
            version = first + i
            if version < server.opt.version:
                skipped += 1
            elif version == server.opt.version:
                server._update(grad)
                applied += 1
            elif gap is None:  # the oldest kept gradient is newer than this copy: those steps are lost
                gap = (server.opt.version, version)
        info = {"caught_up": applied, "catch_up_skipped": skipped}
        if gap is not None:
            info["catch_up_gap"] = list(gap)
        return info

    def ps_new_leader(self, server) -> dict:
        """The dead leader's upstream backup died with it, and the new leader's starts at this version: a head
        death before the tail holds this version would lose the steps since the tail's last ACK (up to 2K-1,
        as in chain mode). So the head ships its state now and waits for the tail's ACK before it answers the
        new leader (a forced state sync): the answer says ``durable`` = this version, and the new leader's
        backup covers every step after it. 0 lost steps again from the answer on."""
        import time

        if not server.ctx.cluster.replicas:
            return {"state_sync": "no replica"}  # nothing to sync with, as after a promotion with none left
        t0 = time.perf_counter()
        replicate(server, wait_ack=False, ack=True)
        server.acks.wait_for(server, server.opt.version)
        return {"state_sync": server.opt.version, "state_sync_s": round(time.perf_counter() - t0, 6)}

    def ps_finish(self, server) -> None:
        super().ps_finish(server)
        server.acks.close()

    # ---- the leader
    def after_answer(self, worker, computed_on: int, answer, grad) -> None:
        backup = _backup(worker)
        if answer.version == computed_on + 1:
            backup.keep(computed_on, grad)
        else:  # not the step this gradient made (a reconnection that moved the version): start afresh
            backup.clear()
        backup.prune(answer.durable)

    def handover(self, worker) -> tuple[int, list] | None:
        backup = _backup(worker)
        if worker.state.outage is None or not backup.kept:  # only a PS that took over needs to catch up
            return None
        return 0, backup.vectors(upto=worker.state.version)

    def send_handover(self, worker, vectors: list, suspect=None) -> float:
        return self.send_to_ps(worker, [v.numpy() for v in vectors], "catch-up to the new head", suspect)

    def handed_over(self, worker, n_vectors: int, seconds: float) -> None:
        from ..events import Ev

        # the backup stays until the new head's chain acknowledges past it: it may die too
        worker.ctx.log.emit(Ev.CATCH_UP, vectors=n_vectors, seconds=seconds, dropped=_backup(worker).dropped)


def _backup(worker) -> "UpstreamBackup":
    backup = worker.state.upstream_backup
    if backup is None:
        k = worker.ctx.cfg.replicate_every
        backup = worker.state.upstream_backup = UpstreamBackup(2 * k + EXTRA_KEPT)
    return backup


class UpstreamBackup:
    """The leader's copies of the gradients it sent, for consecutive versions, oldest first.

    Buffers are reused (no allocation per step once it holds its working set)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.kept: deque = deque()  # (version the gradient was computed on, tensor)
        self._free: list = []
        self.dropped = 0            # kept gradients pushed out by the capacity

    def keep(self, version: int, grad) -> None:
        if self.kept and self.kept[-1][0] != version - 1:
            self.clear()  # keep the run consecutive: the PS replays versions first..first+n-1
        buf = self._free.pop() if self._free else grad.detach().clone()
        buf.copy_(grad)
        self.kept.append((version, buf))
        while len(self.kept) > self.capacity:
            self._free.append(self.kept.popleft()[1])
            self.dropped += 1

    def prune(self, durable: int) -> None:
        """Drop the gradients for versions before ``durable``: a copy of the state at ``durable``
        survives the head (-1: nothing known, keep all)."""
        while self.kept and self.kept[0][0] < durable:
            self._free.append(self.kept.popleft()[1])

    def clear(self) -> None:
        self._free.extend(buf for _, buf in self.kept)
        self.kept.clear()

    def vectors(self, upto: int) -> list:
        """The kept gradients for versions before ``upto`` (the leader's version), oldest first."""
        return [buf for version, buf in self.kept if version < upto]


class AckInbox:
    """The tail's ACKs to the head, received without waiting: one receive posted on the current
    world (posted again after a repair, like :class:`psmodes.transport.DeathWatch`)."""

    def __init__(self) -> None:
        self.durable = -1
        self._comm = None
        self._req = None
        self._buf = None

    def newest(self, comm) -> int:
        import numpy as np
        from mpi4py import MPI

        from .. import transport as tp
        from ..messages import HEADER_LEN, Ack

        if comm is not self._comm:
            self.close()
            self._comm, self._buf = comm, np.zeros(HEADER_LEN, dtype=np.int64)
            self._req = comm.Irecv(self._buf, MPI.ANY_SOURCE, tp.TAG_ACK)
        try:
            while tp.test(self._req, "tail's acknowledgement"):
                self.durable = max(self.durable, Ack.from_header(self._buf).version)
                self._req = comm.Irecv(self._buf, MPI.ANY_SOURCE, tp.TAG_ACK)
        except tp.PeerFailed:
            pass  # a death: the PS's own waits notice it and repair; the ACKs start again on the new world
        return self.durable

    def wait_for(self, server, version: int) -> None:
        """Until the tail has acknowledged ``version`` (a forced state sync): this inbox's own receive, waited
        for with the chain's suspicion of the tail and the peer timeout."""
        import time

        from .. import transport as tp
        from ..suspicion import Suspicion, delivery_wait_s

        ctx, c = server.ctx, server.ctx.cluster
        after = delivery_wait_s(ctx.cfg.suspect_after_s, 0, len(c.chain))
        suspect = Suspicion(ctx, c.replicas[-1], "the chain's acknowledgement of a state sync", after,
                            route=tuple(c.replicas[:-1]))
        deadline = time.monotonic() + ctx.peer_timeout
        while self.newest(c.world) < version:
            # the receive completes with the next ACK, which newest() then reads (and posts the next receive)
            tp.wait(self._req, max(0.0, deadline - time.monotonic()), "tail acknowledges a state sync",
                    on_idle=ctx.idle, watch=ctx.death_watch(), suspect=suspect)
        suspect.done()

    def close(self) -> None:
        from .. import transport as tp

        if self._req is not None:
            tp._cancel(self._req)
        self._comm = self._req = None

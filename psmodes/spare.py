"""A hot spare (``--spares N``): a rank started with the job that waits, warm, to take a dead
role's place, so that a repair needs no ``MPI_Comm_spawn``.

A spare is a member of the world like any other rank: it takes part in every repair (the
shrink, the announcement, the new world), and when the survivors fill the missing roles
(:meth:`psmodes.cluster.Cluster.respawn`) the spares take them first, PS first. A spare that
takes a role returns it to :mod:`psmodes.main`, which runs that role in this same process:
Python, torch, the workload and the model are set up already, which is what a spawned
replacement spends its seconds on. From then on the process is that role's replacement of
the new generation, exactly as if it had been spawned (it restores what the mode promises:
the newest checkpoint, the chain's state, the workers' hand-over).

While it waits a spare costs next to nothing: one ANY_SOURCE receive (ULFM fails it as soon
as any member dies, so the spare joins the shrink), polled every :data:`psmodes.transport.IDLE_POLL` seconds (5 ms on a takeover).
At the run's end the leader sends each spare left a :class:`~psmodes.messages.Retire`.
"""
from __future__ import annotations

import time

from mpi4py import MPI

from . import transport as tp
from .context import Context, build_flat
from .events import Ev
from .messages import Retire
from .pidfiles import write_pid_file
from .roles import Role
from .usage import cpu_s


class Spare:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.label = ctx.cluster.me.label
        ctx.prebuilt = build_flat(ctx)  # the model of the role it will take, built now (see build_flat)
        write_pid_file(ctx, self.label)
        self.t_end = time.monotonic() + ctx.cfg.resolved_deadline()

    def run(self) -> Role | None:
        """Waits until the survivors give this rank a role (returned) or the run ends (None).
        Records what the wait cost (``spare_waited``: seconds, CPU seconds), which must stay
        near nothing: the perf report checks it."""
        t0, cpu0 = time.monotonic(), cpu_s()
        try:
            return self.ctx.resilient(self._wait, via="spare", after_respawn=self._taken)
        finally:
            self.ctx.log.emit(Ev.SPARE_WAITED, wait_s=round(time.monotonic() - t0, 3),
                              cpu_s=round(cpu_s() - cpu0, 3))

    def _wait(self) -> None:
        ctx = self.ctx
        tp.recv(ctx.cluster.world, MPI.ANY_SOURCE, tp.TAG_SPARE, max(1.0, self.t_end - time.monotonic()),
                "spare waits for a role or the run's end", Retire, on_idle=ctx.idle, poll=tp.IDLE_POLL)
        return None

    def _taken(self) -> Role | None:
        me = self.ctx.cluster.me
        return None if me.kind == "spare" else me


def retire(ctx: Context, version: int) -> None:
    """Leader, at the run's end: tell every spare left that no role will come (failures ignored:
    a spare that died meanwhile is gone anyway)."""
    c = ctx.cluster
    for rank, role in enumerate(c.roles):
        if role.kind == "spare":
            try:
                tp.send(c.world, Retire(version), None, rank, tp.TAG_SPARE, ctx.peer_timeout, "retire a spare")
            except (tp.PeerFailed, tp.PeerTimeout):
                pass

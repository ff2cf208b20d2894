"""Membership: the current world communicator, who plays which role in it, and
how the survivors repair it after a death (ULFM shrink, spawn, merge).

Repair is two collective steps, both taken by every survivor:

1. :meth:`Cluster.shrink` after a failure is detected: ``MPI_Comm_shrink``
   drops the dead, survivors keep their relative order, and in ``chain`` mode
   the first surviving replica becomes the head (rank 0) with the others
   moving up the chain.
2. :meth:`Cluster.respawn` after ``--restart-delay``: ``MPI_Comm_spawn`` starts
   real new processes for the missing roles (a cold start), the inter-
   communicator is merged, and ``MPI_Comm_split`` re-orders the ranks into the
   canonical layout of :mod:`psmodes.roles`.
"""
from __future__ import annotations

import sys
import time

from mpi4py import MPI

from . import transport
from .roles import Role, layout, sort_key


class Cluster:
    def __init__(self, world: MPI.Intracomm, roles: list[Role], me: Role, generation: int = 0) -> None:
        world.Set_errhandler(MPI.ERRORS_RETURN)
        self.world = world
        self.roles = roles
        self.me = me
        self.generation = generation

    # ---- lookups
    def rank_of(self, kind: str, index: int = 0) -> int | None:
        for rank, role in enumerate(self.roles):
            if role.kind == kind and (kind in ("ps", "evaluator") or role.index == index):
                return rank
        return None

    @property
    def rank(self) -> int:
        return self.world.Get_rank()

    @property
    def ps(self) -> int:
        return 0

    @property
    def leader(self) -> int:
        return self.rank_of("worker", 0)

    @property
    def evaluator(self) -> int | None:
        return self.rank_of("evaluator")

    @property
    def replicas(self) -> list[int]:
        """Ranks of the replicas in chain order."""
        return [r for r, role in enumerate(self.roles) if role.kind == "replica"]

    # ---- repair
    def shrink(self) -> list[Role]:
        """Collective over the survivors. Returns the roles that died.

        A member that dies while the shrink runs can end up in the new world already known
        dead to this process. ULFM then never fails an ANY_SOURCE receive on the new world
        for it (its notice went to the communicators that existed when it came), so the
        ranks that wait that way would wait out their timeout (seen: chain, tail killed and
        the PS 36 ms later, in the shrink). A survivor that knows shrinks again at once; one
        that learns later is told through its ANY_SOURCE waits and joins that shrink."""
        dead: list[Role] = []
        while True:
            old = self.world
            new = transport.call(old.Shrink, "shrink")
            new.Set_errhandler(MPI.ERRORS_RETURN)
            survivors = MPI.Group.Translate_ranks(new.Get_group(), list(range(new.Get_size())), old.Get_group())
            dead += [role for r, role in enumerate(self.roles) if r not in set(survivors)]
            roles = [self.roles[r] for r in survivors]
            self.roles = _promote(roles)
            self.me = self.roles[new.Get_rank()]
            self.world = new
            if not self.known_failed():
                return dead

    def known_failed(self) -> list[int]:
        """Ranks of the world that this process knows to have failed (a local call)."""
        try:
            group = self.world.Get_failed()
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), self.world.Get_group())
        except (MPI.Exception, NotImplementedError, AttributeError):
            return []
        return [r for r in ranks if r is not None and r >= 0]

    def missing(self, full: list[Role]) -> list[Role]:
        have = set(self.roles)
        return [role for role in full if role not in have]

    def respawn(self, missing: list[Role], run_dir: str, full: list[Role]) -> float:
        """Collective over the survivors: start one process per missing role.

        Returns the seconds the collective spawn took."""
        t0 = time.monotonic()
        self.generation += 1
        if missing:
            args = [["-m", "psmodes.main", "--run-dir", run_dir, "--role", f"{r.kind}:{r.index}",
                     "--generation", str(self.generation)] for r in missing]
            inter = transport.call(self.world.Spawn_multiple, "spawn",
                                   [sys.executable] * len(missing), args, [1] * len(missing), root=0)
            merged = transport.call(inter.Merge, "merge", high=True)
            self._reorder(merged, full)
        return time.monotonic() - t0

    def _reorder(self, merged: MPI.Intracomm, full: list[Role]) -> None:
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        world = transport.call(merged.Split, "split", 0, sort_key(self.me))
        world.Set_errhandler(MPI.ERRORS_RETURN)
        self.world = world
        self.roles = sorted(full, key=sort_key)

    @classmethod
    def join_as_spawned(cls, me: Role, full: list[Role], generation: int) -> "Cluster":
        """The replacement's side of :meth:`respawn`."""
        parent = MPI.Comm.Get_parent()
        parent.Set_errhandler(MPI.ERRORS_RETURN)
        merged = transport.call(parent.Merge, "merge", high=False)
        cluster = cls.__new__(cls)
        cluster.me = me
        cluster.generation = generation
        cluster._reorder(merged, full)
        return cluster


def _promote(roles: list[Role]) -> list[Role]:
    """After a death: the first replica becomes the head if the PS died, and the
    replicas are renumbered 1..k in chain order."""
    out: list[Role] = []
    has_ps = any(r.kind == "ps" for r in roles)
    next_replica = 1
    for role in roles:
        if role.kind == "replica":
            if not has_ps:
                out.append(Role("ps"))
                has_ps = True
                continue
            out.append(Role("replica", next_replica))
            next_replica += 1
        else:
            out.append(role)
    return out


def full_layout(cfg) -> list[Role]:
    return layout(cfg.workers, cfg.n_replicas, cfg.evaluator)

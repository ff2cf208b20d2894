"""Membership: the current world communicator, who plays which role in it, and
how the survivors repair it after a death (ULFM shrink, spawn, merge).

Repair is two collective steps, both taken by every survivor:

1. :meth:`Cluster.shrink` after a failure is detected: ``MPI_Comm_shrink``
   drops the dead, survivors keep their relative order, and in ``chain`` mode
   the first surviving replica becomes the head (rank 0) with the others
   moving up the chain.
2. :meth:`Cluster.respawn` after ``--restart-delay``: ``MPI_Comm_spawn`` starts
   real new processes for the missing roles (a cold start), and
   ``MPI_Comm_create_from_group`` makes the new world of survivors and
   replacements, ranked in the canonical layout of :mod:`psmodes.roles`.
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

    def respawn(self, missing: list[Role], run_dir: str, spawned=None) -> float:
        """Collective over the survivors: start one process per missing role and
        make the new world of survivors and replacements, in canonical order.

        Returns the seconds it took. ``spawned``: called by the root once the spawn
        returned (the ``in_spawn`` kill point)."""
        t0 = time.monotonic()
        self.generation += 1
        if missing:
            args = [["-m", "psmodes.main", "--run-dir", run_dir, "--role", r.spec, "--generation",
                     str(self.generation), "--parents", ",".join(p.spec for p in self.roles),
                     "--spawned", ",".join(m.spec for m in missing)] for r in missing]
            try:
                inter = self.world.Spawn_multiple([sys.executable] * len(missing), args, [1] * len(missing), root=0)
            except MPI.Exception as exc:
                raise self._spawn_error(exc) from None
            if spawned is not None:
                spawned()
            self.world, self.roles = join(inter.Get_group(), self.roles, inter.Get_remote_group(), missing,
                                          self.generation)
        return time.monotonic() - t0

    def _spawn_error(self, exc: MPI.Exception, wait_s: float = 1.0) -> Exception:
        """What a failed MPI_Comm_spawn means: PeerFailed (repair and spawn again) when a member
        of the world died, whatever the error class. Open MPI 5.0.11 does not always say
        ERR_PROC_FAILED: with the root killed in the spawn the others got MPI_ERR_INTERN (seen in
        psbench chaos). ULFM's notice of the death may come just after the error: wait for it."""
        classified = transport.classify(exc, "spawn")
        deadline = time.monotonic() + wait_s
        while not isinstance(classified, transport.PeerFailed) and time.monotonic() < deadline:
            if self.known_failed():
                return transport.PeerFailed(f"spawn: {exc.Get_error_string()}, a member died", MPI.ERR_PROC_FAILED)
            time.sleep(0.01)
        return classified

    @classmethod
    def join_as_spawned(cls, me: Role, parents: list[Role], spawned: list[Role], generation: int) -> "Cluster":
        """The replacement's side of :meth:`respawn`."""
        parent = MPI.Comm.Get_parent()
        parent.Set_errhandler(MPI.ERRORS_RETURN)
        world, roles = join(parent.Get_remote_group(), parents, parent.Get_group(), spawned, generation)
        return cls(world, roles, me, generation)


def join(parents: MPI.Group, parent_roles: list[Role], spawned: MPI.Group, spawned_roles: list[Role],
          generation: int) -> tuple[MPI.Intracomm, list[Role]]:
    """The new world from the survivors (who spawned) and the replacements, ranked in
    canonical order, by ``MPI_Comm_create_from_group``.

    Not ``MPI_Intercomm_merge`` + ``MPI_Comm_split``: when the spawn's root died after
    the replacements had connected, Open MPI 5.0.11's merge never returned on the
    others (its context-id agreement kept retrying a failed non-blocking collective,
    "NBC_Progress: an error 75", printed millions of times), and a later spawn queued
    behind it. Creating the communicator from a group agrees through PMIx instead and
    fails at once (MPI_ERR_UNSUPPORTED_OPERATION) when a member is dead."""
    roles = parent_roles + spawned_roles
    order = sorted(range(len(roles)), key=lambda i: sort_key(roles[i]))
    group = MPI.Group.Union(parents, spawned).Incl(order)
    try:
        world = MPI.Intracomm.Create_from_group(group, f"psbench.world.{generation}")
    except MPI.Exception as exc:
        # whatever the class, the usual cause is a member that died: repair, as for a failed spawn
        raise transport.PeerFailed(f"join the new world: {exc.Get_error_string()}", MPI.ERR_PROC_FAILED) from None
    world.Set_errhandler(MPI.ERRORS_RETURN)
    return world, [roles[i] for i in order]


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

"""Membership: the current world communicator, who plays which role in it, and
how the survivors repair it after a death (ULFM shrink, spawn, merge).

Repair is two collective steps, both taken by every survivor:

1. :meth:`Cluster.shrink` after a failure is detected: ``MPI_Comm_shrink``
   drops the dead, survivors keep their relative order, and in ``chain`` mode
   the first surviving replica becomes the head (rank 0) with the others
   moving up the chain.
2. :meth:`Cluster.respawn` after ``--restart-delay``: the spares (``--spares``),
   survivors themselves, take the missing roles in canonical order (PS first);
   ``MPI_Comm_spawn`` starts real new processes for the roles no spare is left
   for (a cold start). ``MPI_Comm_create_from_group`` makes the new world of
   survivors and replacements, ranked in the canonical layout of
   :mod:`psmodes.roles`. A repair that spares cover needs no spawn and no new
   communicator at all: the spares take the roles in place, at their ranks (so
   the PS is not always rank 0: :attr:`Cluster.ps`). No new Python, no torch
   import, and none of Open MPI 5.0.11's failures in a spawn or in making a
   communicator (see :func:`join` and psmodes.context.Context.respawn).
"""
from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from . import elastic, transport
from .errors import RunFailed
from .roles import Role, layout, sort_key


class Cluster:
    def __init__(self, world: MPI.Intracomm, roles: list[Role], me: Role, generation: int = 0) -> None:
        world.Set_errhandler(MPI.ERRORS_RETURN)
        self.world = world
        self.roles = roles
        self.me = me
        self.generation = generation

    @property
    def generation(self) -> int:
        """The world generation: 0 at the start, one more at every respawn (spawned or relabelled by
        spares). Every message this process sends carries it (psmodes.transport.Generations)."""
        return transport.GENERATIONS.current

    @generation.setter
    def generation(self, value: int) -> None:
        transport.GENERATIONS.current = value

    def agree_generation(self) -> None:
        """Collective over the world, before each attempt of a respawn: take the newest generation any member has
        reached. A member that missed a failed attempt counts one fewer: seen, a spare spawned by the previous
        refill was still starting when a worker died inside the next refill's spawn; it learnt of the death
        later, shrank with the others and joined their second attempt as its first. Its replacements' names
        and the new world's (:func:`join`, ``psbench.world.<generation>``) then differed from the others', so
        every replacement waited in its MPI_Init for a world that was never made until the run ended (20
        worker failures in 120 s, --restart-delay 0, every mode). A buffer, not a pickled object (nothing
        from the network is unpickled)."""
        newest = np.array([self.generation], dtype=np.int64)
        transport.call(self.world.Allreduce, "agree on the generation", MPI.IN_PLACE, newest, op=MPI.MAX)
        self.generation = int(newest[0])

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
    def ps(self) -> int | None:
        """The PS's rank; None between its death and the repair (chain: never, a replica heads at once).
        Rank 0 after a shrink or a spawn, any rank once a spare took the role in place."""
        return self.rank_of("ps")

    @property
    def leader(self) -> int | None:
        """The rank of the worker of the lowest index: worker0, unless it died in an elastic async run
        (psmodes/elastic.py), where the next one leads (a pure function of the roles, the same everywhere)."""
        workers = [(role.index, rank) for rank, role in enumerate(self.roles) if role.kind == "worker"]
        return min(workers)[1] if workers else None

    @property
    def evaluator(self) -> int | None:
        return self.rank_of("evaluator")

    @property
    def replicas(self) -> list[int]:
        """Ranks of the replicas in chain order (by index: a spare that became the tail keeps its rank)."""
        return chain_order(self.roles)

    def successor(self) -> int | None:
        """The next rank down the chain from this one (the PS: the first replica), None at the tail."""
        chain = self.chain
        here = chain.index(self.rank) if self.rank in chain else None
        return chain[here + 1] if here is not None and here + 1 < len(chain) else None

    @property
    def chain(self) -> list[int]:
        """The PS (the head), then the replicas in chain order."""
        return ([self.ps] if self.ps is not None else []) + self.replicas

    @property
    def spawn_root(self) -> int:
        """The root of the survivors' spawn: the PS when there is one (kill points ``spawn``, ``in_spawn``)."""
        return self.ps if self.ps is not None else 0

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
        return transport.failed_ranks(self.world)

    def missing(self, full: list[Role], workers: int = 0) -> list[Role]:
        """The roles of ``full`` no member holds but workers, then the workers that bring the group back to
        ``workers`` (0: none; psmodes/elastic.py). A lost worker is replaced by one of a new index, only in
        a respawn the workers take part in as a group (a refill), never with the PS's repair: spawned in a
        repair the workers ran on a helper thread, it had no workers' group to join (seen: it stopped with
        AttributeError on its missing communicator)."""
        have = set(self.roles)
        return [role for role in full if role not in have and role.kind != "worker"] + \
            elastic.replacements(self.roles, workers)

    def respawn(self, missing: list[Role], run_dir: str, spawned=None,
                hosts_for=None) -> tuple[list[Role], list[Role]]:
        """Collective over the survivors: give the missing roles to the spares, start one
        process per role left over, and make the new world in canonical order.

        Returns (the roles spares took, the roles spawned). ``spawned``: called by the root
        once the spawn returned (the ``in_spawn`` kill point). ``hosts_for``: the host of each
        role to spawn, given the roles left (None: the runtime places them)."""
        self.generation += 1
        roles, taken, missing = fill_from_spares(self.roles, missing)
        if not missing:
            # the spares took every missing role: each survivor relabels the same world the same way
            # (a pure function of the roles the shrink agreed on); no communicator is made. Making one
            # (MPI_Comm_create_from_group) right after a death crashed Open MPI 5.0.11 (SIGSEGV in
            # ompi_comm_revoke_local, every member) or never returned (a second repair whose dead
            # member had joined the previous group), both in psbench perf
            self.roles = roles
        else:
            args = [["-m", "psmodes.main", "--run-dir", run_dir, "--role", r.spec, "--generation",
                     str(self.generation), "--parents", ",".join(p.spec for p in roles),
                     "--spawned", ",".join(m.spec for m in missing)] for r in missing]
            # the survivors as they were: their pid files are theirs (a spare that took a role here has not
            # written its new one yet)
            hosts = hosts_for(self.roles, missing) if hosts_for is not None else [None] * len(missing)
            infos = MPI.INFO_NULL
            if any(hosts):
                infos = [MPI.Info.Create() for _ in missing]
                for info, host in zip(infos, hosts):
                    if host is not None:
                        info.Set("host", host)
            try:
                inter = self.world.Spawn_multiple([sys.executable] * len(missing), args, [1] * len(missing),
                                                  info=infos, root=self.spawn_root)
            except MPI.Exception as exc:
                raise self._spawn_error(exc) from None
            if spawned is not None:
                spawned()
            self.world, self.roles = join(inter.Get_group(), roles, inter.Get_remote_group(), missing,
                                          self.generation, inter=inter, spawned_side=False)
        self.me = self.roles[self.world.Get_rank()]
        return taken, missing

    def _spawn_error(self, exc: MPI.Exception, wait_s: float = 1.0) -> Exception:
        """What a failed MPI_Comm_spawn means: PeerFailed (repair and spawn again) when a member
        of the world died, whatever the error class. Open MPI 5.0.11 does not always say
        ERR_PROC_FAILED: with the root killed in the spawn the others got MPI_ERR_INTERN (seen in
        psbench chaos). ULFM's notice of the death may come just after the error: wait for it.
        Otherwise the runtime could not start the replacement: RunFailed, a clean end with the reason
        (before, the MPI error left the rank as a bug; seen: PRRTE 5.0.0rc1 after a lost node, "PRTE ERROR:
        Node has gone down" as it sent the launch to every daemon, the lost one too)."""
        classified = transport.classify(exc, "spawn")
        deadline = time.monotonic() + wait_s
        while not isinstance(classified, transport.PeerFailed) and time.monotonic() < deadline:
            if self.known_failed():
                return transport.PeerFailed(f"spawn: {exc.Get_error_string()}, a member died", MPI.ERR_PROC_FAILED)
            time.sleep(0.01)
        if isinstance(classified, transport.PeerFailed):
            return classified
        return RunFailed(f"the runtime could not start a replacement ({exc.Get_error_string()}) and no member "
                         "died: after a lost node, give --spares on another host (docs/clusters.md)")

    @classmethod
    def join_as_spawned(cls, me: Role, parents: list[Role], spawned: list[Role], generation: int) -> "Cluster":
        """The replacement's side of :meth:`respawn`."""
        parent = MPI.Comm.Get_parent()
        parent.Set_errhandler(MPI.ERRORS_RETURN)
        world, roles = join(parent.Get_remote_group(), parents, parent.Get_group(), spawned, generation,
                            inter=parent, spawned_side=True)
        return cls(world, roles, me, generation)


# --runtime prrte5: the ranks' PMIx 5 client cannot construct a PMIx group with PRRTE 5's PMIx 7 server
# ("PMIX_ERR_BAD_PARAM in pmix_server_group.c at line 474", then ERR_PROC_FAILED in every survivor), so
# MPI_Comm_create_from_group fails there; psmodes.main sets this for such runs (join says what it costs)
MERGE_JOIN = False


def join(parents: MPI.Group, parent_roles: list[Role], spawned: MPI.Group, spawned_roles: list[Role],
         generation: int, inter: MPI.Intercomm | None = None,
         spawned_side: bool = False) -> tuple[MPI.Intracomm, list[Role]]:
    """The new world from the survivors (who spawned) and the replacements, ranked in
    canonical order, by ``MPI_Comm_create_from_group``.

    Not ``MPI_Intercomm_merge`` + ``MPI_Comm_split``: when the spawn's root died after
    the replacements had connected, Open MPI 5.0.11's merge never returned on the
    others (its context-id agreement kept retrying a failed non-blocking collective,
    "NBC_Progress: an error 75", printed millions of times), and a later spawn queued
    behind it. Creating the communicator from a group agrees through PMIx instead and
    fails at once (MPI_ERR_UNSUPPORTED_OPERATION) when a member is dead.

    The world is a Dup of the communicator made from the group, never that communicator itself.
    ULFM's agreement (every MPIX_Comm_shrink runs several) names an agreement by its
    communicator's context id and epoch and a per-communicator count, and remembers decided ones;
    in Open MPI 5.0.11 every communicator made from a group has id 0 and epoch 0 (an extended
    context id: only its low part, always 0, is read), so the shrink of one repair's world
    reused the names of the previous repair's agreements ("removing old agreement (0.0).4 from
    history, due to cycling of identifiers" in mpirun.log), and a member that asked a peer which
    had not started the new one yet got the old decision. Seen in psbench perf (chain R=2, four
    hung PSes): at the third or fourth repair some survivors returned from the shrink and the
    others never did, then crashed in ompi_comm_revoke_local. A Dup gets a context id and an epoch
    of its own. Neither communicator is freed: a freed context id is reused by the next one.

    Under :data:`MERGE_JOIN` (``--runtime prrte5``) the merge and split it is, over ``inter``: the spawn
    runs on a helper thread that a death gives up (psmodes.context.Context.respawn), so a merge that never
    returns holds up nobody but that thread."""
    roles = parent_roles + spawned_roles
    order = sorted(range(len(roles)), key=lambda i: sort_key(roles[i]))
    try:
        if MERGE_JOIN and inter is not None:
            created = inter.Merge(high=spawned_side)  # the parents first, in their order, then the spawned
            created.Set_errhandler(MPI.ERRORS_RETURN)
            world = created.Split(0, order.index(created.Get_rank()))
        else:
            group = MPI.Group.Union(parents, spawned).Incl(order)
            created = MPI.Intracomm.Create_from_group(group, f"psbench.world.{generation}")
            created.Set_errhandler(MPI.ERRORS_RETURN)
            world = created.Dup()
    except MPI.Exception as exc:
        # whatever the class, the usual cause is a member that died: repair, as for a failed spawn
        raise transport.PeerFailed(f"join the new world: {exc.Get_error_string()}", MPI.ERR_PROC_FAILED) from None
    _KEPT.append(created)  # never freed (the docstring says why)
    world.Set_errhandler(MPI.ERRORS_RETURN)
    introduce(world)
    return world, [roles[i] for i in order]


_KEPT: list[MPI.Intracomm] = []  # the communicators made from a group, kept from being freed (join)

INTRO_TIMEOUT_S = 30.0


def introduce(world: MPI.Intracomm) -> None:
    """Every member of a new world sends every other one a byte, so that each pair has a connection.
    ULFM in a spawned process learnt of a death in the job that spawned it only through a dropped
    connection (Open MPI 5.0.11; seen: a spare spawned to refill the pool waited in its ANY_SOURCE
    receive for good after the PS died, every survivor waiting for it in the shrink: it had never
    exchanged a message with the PS). A member that dies meanwhile: PeerFailed, repaired as a
    failed join."""
    me, n = world.Get_rank(), world.Get_size()
    out, into = np.zeros(1, dtype=np.uint8), np.zeros(n, dtype=np.uint8)
    reqs = [world.Isend(out, r, transport.TAG_INTRO) for r in range(n) if r != me]
    reqs += [world.Irecv(into[r:r + 1], r, transport.TAG_INTRO) for r in range(n) if r != me]
    transport.wait(reqs, INTRO_TIMEOUT_S, "introduce the members of the new world")


def chain_order(roles: list[Role]) -> list[int]:
    """The ranks of the replicas in chain order: by index, not by rank (a spare that took a
    replica's role keeps its rank)."""
    return sorted((r for r, role in enumerate(roles) if role.kind == "replica"), key=lambda r: roles[r].index)


def _promote(roles: list[Role]) -> list[Role]:
    """After a death: the first replica in chain order becomes the head if the PS died, and the
    replicas are renumbered 1..k in chain order (by index, not by rank: see Cluster.replicas)."""
    out = list(roles)
    chain = chain_order(roles)
    if chain and not any(r.kind == "ps" for r in roles):
        out[chain.pop(0)] = Role("ps")
    for n, r in enumerate(chain, start=1):
        out[r] = Role("replica", n)
    return out


def fill_from_spares(roles: list[Role], missing: list[Role]) -> tuple[list[Role], list[Role], list[Role]]:
    """The world's roles once its spares took the missing roles (in order: the PS first), the roles
    they took, and the roles left for a spawn. The same pure function on every survivor."""
    roles = list(roles)
    wanted = [r for r in missing if r.kind != "spare"]  # a spare used up is spawned again (--refill-spares)
    taken = []
    for rank, role in enumerate(roles):
        if role.kind == "spare" and wanted:
            roles[rank] = wanted.pop(0)
            taken.append(roles[rank])
    return roles, taken, [r for r in missing if r not in taken]


def full_layout(cfg) -> list[Role]:
    """The roles a run needs filled: without its spares (a used spare is not missed)."""
    return layout(cfg.workers, cfg.n_replicas, cfg.evaluator)


def initial_layout(cfg) -> list[Role]:
    """The roles of the ranks mpirun starts: the full layout and the spares."""
    return layout(cfg.workers, cfg.n_replicas, cfg.evaluator, cfg.spares)

"""``--mode chain``: chain replication of the PS state, head -> replica 1 -> ... -> tail.

Every ``--replicate-every`` K updates the head (the PS, rank 0) posts its packed state
(weights and optimizer state) to the first replica, each replica forwards it
(:mod:`psmodes.replica`), and with K=1 the tail acknowledges before the head answers
the workers: strict, no acknowledged update is ever lost. With K > 1 the head does not
wait: it ships every K-th version, the tail acknowledges it, and the head waits for that
acknowledgement only when it ships the next, so a kill can catch the newest state in
flight and at most 2K-1 versions are lost. Waiting for the send's completion alone was not
enough: over TCP a completed send may still sit in the kernel's buffers, and a head cut off
by a partition then killed applied 14 versions past its replica's copy with K=5 (chaos over
two hosts, chain trial-002 of seed 46; the promise allows 9).

When the head dies the first surviving replica is promoted in the shrink
(:meth:`psmodes.cluster.Cluster.shrink`) and runs on as the PS with its state; a new
tail is spawned after ``--restart-delay`` and gets the whole state at once.

The runtime modules (mpi4py through :mod:`psmodes.transport`) are imported inside the
hooks: the launcher imports this module for the promise alone.
"""
from __future__ import annotations

from .base import RecoveryMode


class ChainReplication(RecoveryMode):
    name = "chain"
    summary = "chain replication every K updates; a replica takes over as head"
    replacement_starts_from = "the promoted replica's copy of the state"
    options = ("replicas", "replicate_every")

    def ps_versions_lost(self, cfg) -> int:
        return 0 if cfg.replicate_every == 1 else 2 * cfg.replicate_every - 1

    def replicas(self, cfg) -> int:
        return cfg.replicas

    def validate(self, cfg) -> None:
        from ..errors import positive_int

        positive_int(cfg.replicas, "--replicas")

    def describe(self, cfg) -> str:
        return f"chain K={cfg.replicate_every} R={cfg.replicas}"

    def chaos_draw(self, cfg, rng, specs: list[str]) -> None:
        cfg.replicas = rng.choice([1, 2, 2])
        cfg.replicate_every = rng.choice([1, 1, 1, 5])
        for spec in specs:
            if not spec.startswith("+") and rng.random() < 0.3:
                cfg.kill_replica.append(spec)
            else:
                cfg.kill_ps.append(spec)

    def on_shrink(self, cluster, dead: list) -> None:
        from ..errors import RunFailed

        if not any(r.kind == "ps" for r in cluster.roles):
            # the head and every replica died before a new tail joined: no copy of the state survives
            raise RunFailed(f"chain: the head and all replicas died ({', '.join(r.label for r in dead)}); "
                            "no copy of the PS state survives")

    # ---- PS side
    def ps_setup(self, server) -> None:
        import torch

        from .. import transport as tp

        server.repl_sends = tp.PostedSends()
        server.repl_buf = torch.zeros(server.opt.state_numel)
        server.ack_pacer = tp.Pacer()  # the chain's ACK comes a steady few milliseconds after the state
        server.awaiting_ack = None  # K > 1: (world, generation, version) of the state whose ACK comes later

    def ps_after_update(self, server) -> None:
        k = server.ctx.cfg.replicate_every
        if server.opt.version % k == 0:
            replicate(server, wait_ack=k == 1, ack=True, ack_before_next=k > 1)

    def ps_after_respawn(self, server):
        # the new tail gets the whole state at once; it is still starting up: not suspected
        return lambda: replicate(server, wait_ack=True, fresh=True)

    def ps_finish(self, server) -> None:
        from .. import transport as tp
        from ..messages import Stop

        ctx, c = server.ctx, server.ctx.cluster
        if not c.replicas:
            return
        tp.wait(server.repl_sends.on(c.world), ctx.peer_timeout, "previous replication", watch=ctx.death_watch())
        previous_acknowledged(server)
        tp.send(c.world, Stop(server.opt.version), None, c.replicas[0], tp.TAG_CHAIN, ctx.peer_timeout,
                "stop the chain", watch=ctx.death_watch())


def previous_acknowledged(server, after: float | None = None) -> None:
    """K > 1: wait for the tail's ACK of the state shipped last (``server.awaiting_ack``), if it was shipped on
    this world in this generation: a repair since (a new world, or spares relabelled in place) leaves it
    unanswered for good, and a live tail would be blamed for it. It came long ago, normally: K updates."""
    from mpi4py import MPI

    from .. import transport as tp
    from ..errors import RunFailed
    from ..messages import Ack
    from ..suspicion import Suspicion

    ctx, c = server.ctx, server.ctx.cluster
    awaiting, server.awaiting_ack = server.awaiting_ack, None
    if awaiting is None or awaiting[:2] != (c.world, c.generation):
        return
    suspect = None if after is None else Suspicion(ctx, c.replicas[-1], "the previous state's acknowledgement",
                                                   after, route=tuple(c.replicas[:-1]))
    ack, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_ACK, ctx.peer_timeout, "tail acknowledges the previous state",
                     Ack, on_idle=ctx.idle, suspect=suspect)
    if suspect is not None:
        suspect.done()
    if ack.version != awaiting[2]:
        raise RunFailed(f"tail acknowledged version {ack.version}, the head shipped {awaiting[2]}")


def replicate(server, wait_ack: bool, ack: bool | None = None, fresh: bool = False,
              ack_before_next: bool = False) -> None:
    """Send the head's state down the chain (strict: and wait for the tail's ACK; ``ack``: the
    tail acknowledges, by default when the head waits for it; ``fresh``: to a replica that was
    just spawned, whose first answer is not suspected; ``ack_before_next``: the ACK is awaited
    before the next state ships, :func:`previous_acknowledged`; hybrid reads its ACKs itself).

    Every wait here also watches for a respawn announcement (``ctx.idle``): under
    ``--consistency async`` the leader announces at any time, also while the head is
    replicating, and a replica that notices it first goes into the collective spawn
    without posting the receive for this state; a head that only waited for the send
    (or the ACK) then waited for a replica that waits for it in the spawn, until the
    peer timeout. The head joins the spawn too, and after it sends the whole state again
    (``ps_after_respawn``)."""
    from mpi4py import MPI

    from .. import killpoints
    from .. import transport as tp
    from ..errors import RunFailed
    from ..messages import Ack, State
    from ..suspicion import Suspicion, delivery_wait_s

    ctx, c, opt = server.ctx, server.ctx.cluster, server.opt
    if not c.replicas:
        return
    # a successor that does not take the previous state is suspected in half the workers' time, so
    # that they do not blame the head that waits for it (psmodes.suspicion)
    after = delivery_wait_s(ctx.cfg.suspect_after_s, 0, len(c.chain))
    suspect = None if fresh else Suspicion(ctx, c.replicas[0], "the previous state's delivery", after)
    tp.wait(server.repl_sends.on(c.world), ctx.peer_timeout, "previous replication", on_idle=ctx.idle,
            watch=ctx.death_watch(), suspect=suspect)
    if suspect is not None:
        suspect.done()
    previous_acknowledged(server, None if fresh else after)
    if wait_ack and opt.n_buffers == 0:
        # the state is the weights alone (plain SGD) and nothing changes them before the ACK: sent as
        # they are, without a model-sized copy on every strict update
        payload = opt.weights
    else:
        opt.pack(server.repl_buf)
        payload = server.repl_buf
    state = State(opt.version, wait_ack if ack is None else ack, server.t0_ms)
    server.repl_sends.post(c.world, tp.isend(c.world, state, payload.numpy(), c.replicas[0], tp.TAG_CHAIN))
    if ack_before_next:
        server.awaiting_ack = (c.world, c.generation, opt.version)
    killpoints.reached("chain_forward", ctx, version=opt.version)
    if wait_ack:
        # the state not taken is the successor's; the ACK then missing is the tail's (the successor's own
        # forward suspects its successor in turn: replica.py). Blaming the successor for the ACK had the live
        # replica1 of a chain of two fenced for a hung tail; blaming the tail for the state not taken, the live
        # tail for a hung replica1 (psbench chaos, chain R=2, async, trial-005 of seed 44)
        delivery = None if fresh else Suspicion(ctx, c.replicas[0], "the state's delivery", after)
        quiet_until = 0.0 if fresh else server.ack_pacer.begin()
        tp.wait(server.repl_sends.on(c.world), ctx.peer_timeout, "replicate to the chain", on_idle=ctx.idle,
                watch=ctx.death_watch(), suspect=delivery, quiet_until=quiet_until)
        if delivery is not None:
            delivery.done()
        suspect = None if fresh else Suspicion(ctx, c.replicas[-1], "the chain's acknowledgement", after,
                                               route=tuple(c.replicas[:-1]))
        ack, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_ACK, ctx.peer_timeout, "tail acknowledges", Ack,
                         on_idle=ctx.idle, suspect=suspect, quiet_until=quiet_until)
        if not fresh:
            server.ack_pacer.arrived()
        if suspect is not None:
            suspect.done()
        if ack.version != opt.version:
            raise RunFailed(f"tail acknowledged version {ack.version}, head is at {opt.version}")

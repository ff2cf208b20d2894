"""A chain replica: receives the head's state from its predecessor, forwards it
to its successor, and (as the tail) acknowledges strict updates to the head.

It keeps the newest and the previous state, so that if it is promoted to head
it can report the weights of whichever version the leader last received
(strict chain replication: the new head's weights are bitwise those the
workers last saw). Promotion happens in :meth:`Cluster.shrink`; the replica
then turns into a :class:`~psmodes.server.ParameterServer` with its state.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from mpi4py import MPI

from . import killpoints, transport as tp
from .consistency import make_server
from .context import Context, RunFailed, build_flat
from .pidfiles import write_pid_file
from .events import Ev
from .suspicion import Suspicion, delivery_wait_s
from .messages import Ack, State, Stop
from .optim import make_optimizer


class Replica:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        flat = build_flat(ctx)
        self.numel = flat.numel
        self.opt = make_optimizer(flat.weights, ctx, flat.n_train)
        # the newest state and the one before it, as they came, and the buffer the next one comes
        # into: a new state rotates the three instead of being copied into the optimizer and the
        # previous weights on every update (two model-sized copies a strict update, on the cores the
        # workers need); the optimizer takes the newest once, on promotion
        self.incoming = torch.zeros(self.opt.state_numel)
        self.newest: tuple[int, torch.Tensor] | None = None
        self.older: tuple[int, torch.Tensor] | None = None
        self.version = -1
        self.t0_ms = 0
        # strict chain (K=1): every update waits for the tail, so the replicas wait as a PS does; with
        # K > 1 the head posts the state and goes on, and a replica may take it up to IDLE_POLL late
        self.poll = tp.DEFAULT_POLL if ctx.cfg.replicate_every == 1 else tp.IDLE_POLL
        self.pacer = tp.Pacer()
        self.pid_label = ctx.cluster.me.label
        write_pid_file(ctx, self.pid_label)

    def run(self) -> None:
        self.ctx.resilient(self._follow, via="replica", after_failure=self._after_failure,
                           after_respawn=self._after_respawn)

    def _after_failure(self) -> bool | None:
        """Promoted to head: run on as the PS with the replicated state."""
        return self._moved(replicate_first=False)

    def _after_respawn(self) -> bool | None:
        """The head died during the spawn and this replica was promoted in its repair
        (:meth:`Context.respawn`): run on as the PS, after handing its state to the
        replicas just spawned (they start empty)."""
        return self._moved(replicate_first=True)

    def _moved(self, replicate_first: bool) -> bool | None:
        """After a repair this replica is the head or sits higher up the chain. Its old pid file
        goes first: the fault injector once took a promoted head for the tail replica it had
        been and killed the head. A replica that never received any state cannot be the head."""
        ctx = self.ctx
        old = Path(ctx.cfg.run_dir) / "pids" / f"{self.pid_label}.json"
        try:
            if json.loads(old.read_text()).get("pid") == os.getpid():  # not a newer process's file
                old.unlink()
        except (OSError, ValueError):
            pass
        if ctx.cluster.me.kind == "ps":
            if self.version < 0:
                raise RunFailed("chain: the head died before the new replica received any state; "
                                "no copy of the PS state survives")
            self._run_as_head(replicate_first)
            return True
        self.pid_label = ctx.cluster.me.label
        write_pid_file(ctx, self.pid_label)
        return None

    def _run_as_head(self, replicate_first: bool) -> None:
        ctx = self.ctx
        ctx.log.emit(Ev.PROMOTED, version=self.version, role="ps")
        self.opt.unpack(self.newest[1], self.version)
        prev = None if self.older is None else (self.older[0], self.older[1][:self.opt.weights.numel()])
        server = make_server(ctx, opt=self.opt, prev=prev, t0_ms=self.t0_ms, fresh=False)
        if replicate_first:  # the replicas just spawned start empty: the mode's after-respawn sends them the state
            send_state = server.mode.ps_after_respawn(server)
            ctx.resilient(send_state, via="ps", after_respawn=send_state)
        server.run()

    def _follow(self) -> bool:
        """Follow the chain until STOP (True)."""
        ctx = self.ctx
        while True:
            c = ctx.cluster
            msg, pred = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_CHAIN, ctx.outage_timeout, "replica waits for state",
                                State, Stop, on_idle=ctx.idle, poll=self.poll, quiet_until=self.pacer.begin())
            self.pacer.arrived()
            generation = tp.GENERATIONS.last_received  # forwards and the ACK belong to the head's generation
            succ = c.successor()
            if isinstance(msg, Stop):
                if succ is not None:
                    tp.send(c.world, msg, None, succ, tp.TAG_CHAIN, ctx.peer_timeout, "forward stop",
                            watch=ctx.death_watch(), generation=generation)
                ctx.log.emit(Ev.DONE, version=self.version, completed=True)
                return True
            version = msg.version
            if succ is None:
                killpoints.reached("tail_receive", ctx, version=version)
            tp.recv_payload(c.world, self.incoming.numpy(), pred, tp.TAG_CHAIN, ctx.peer_timeout, "replica receives state",
                            watch=ctx.death_watch())
            # forward (or acknowledge) first, keep the copies while it travels: the head waits for the
            # tail's ACK on every strict update, so this replica's own bookkeeping stays off that path
            if succ is not None:
                reqs = tp.isend(c.world, msg, self.incoming.numpy(), succ, tp.TAG_CHAIN, generation)
            elif msg.ack:
                reqs = tp.isend(c.world, Ack(version), None, c.ps, tp.TAG_ACK, generation)
            else:
                reqs = []
            spare = self.older[1] if self.older is not None else torch.empty_like(self.incoming)
            self.older, self.newest, self.incoming = self.newest, (version, self.incoming), spare
            self.version, self.t0_ms = version, msg.t0_ms
            # a successor that does not take the state is suspected as the head suspects its own, a little
            # sooner the further down the chain: the hung one is the one fenced, wherever it is in the chain
            suspect = Suspicion(ctx, succ, "the state's delivery",
                                delivery_wait_s(ctx.cfg.suspect_after_s, c.chain.index(c.rank), len(c.chain))) \
                if succ is not None else None
            tp.wait(reqs, ctx.peer_timeout, "replica forwards" if succ is not None else "tail acknowledges",
                    on_idle=ctx.idle, watch=ctx.death_watch(), suspect=suspect)
            if suspect is not None:
                suspect.done()

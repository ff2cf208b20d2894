"""What a worker keeps across failures, in one typed object (``Worker.state``), as Horovod's elastic
``State`` is: the figures a death must not lose or apply twice, and the two moves that change them as a
whole.

- :meth:`WorkerState.commit`: the PS answered; its version is the workers' now, nothing is pending or
  in flight (a Hello's answer too).
- :meth:`WorkerState.restore`: the leader died (psmodes/elastic.py); the worker that leads now starts
  from the last control header every worker holds, with nothing in flight, so a gradient the dead
  leader had sent is applied once (the PS answers its Hello with its weights) or not at all.

The leader's exchange with the PS uses most of it; every worker of a stateless run trains through an
outage with its buffer and local optimizer (async: each worker speaks to the PS itself). A replacement
starts from a fresh one: the PS's weights reach it in the regroup's broadcast (sync) or in the answer to
its own Hello (async), and their version with them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from mpi4py import MPI

from . import transport as tp
from .background import Background
from .messages import Control
from .optim import FlatOptimizer
from .outage import Outage
from .replay import UpdateBuffer
from .suspicion import Suspicion


@dataclass
class InFlight:
    """The leader's gradient on its way to the PS, not answered yet (pipelined exchange)."""
    version: int         # the weights it was computed on
    reqs: list           # its header's and payload's sends
    suspect: Suspicion   # the wait for its answer is watched from the send on
    error: tp.PeerFailed | None = None  # its post failed after the header had promised it (Worker._post)


@dataclass
class WorkerState:
    # ---- the exchange with the PS (sync: the leader's)
    version: int = -1     # the PS version of the workers' weights (-1: no PS met yet: its first contact)
    t0_ms: int = 0        # the PS's training start, as its answers carry it
    ps_up: bool = False
    pending: bool = False  # the last gradient sent may be the PS's, unanswered: a Hello re-sends it
    sent_grad: torch.Tensor | None = None  # that gradient, kept until it is answered
    in_flight: InFlight | None = None  # pipelined: the gradient sent and not answered yet
    held: int | None = None  # pipelined: the version the gradient every worker holds was computed on
    held_valid: bool = True  # ... and that gradient is the group's average (no regroup voided it)
    reuse: bool = False      # the next step sends that gradient instead of computing one
    # ---- a PS outage
    outage: Outage | None = None  # from the failure to the first update after it (Ev.RECOVERED)
    buffer: UpdateBuffer | None = None        # stateless: the updates made while the PS is down
    local_opt: FlatOptimizer | None = None    # stateless --replay local: the workers' own optimizer meanwhile
    repair_due: float | None = None           # monotonic: the respawn is announced then (the restart delay)
    repair_call: Background | None = None     # a repair step running on a helper thread (stateless)
    repair_kind: str = ""
    ready_req: MPI.Request | None = None      # stateless: the wait for the replacement's READY
    # ---- hybrid: the gradients sent since the tail's last ACK (psmodes/modes/hybrid.py, the leader's)
    upstream_backup: object | None = None

    def commit(self, version: int, t0_ms: int) -> None:
        """The PS answered: ``version`` is the workers' now; nothing is pending or in flight."""
        self.version, self.t0_ms = version, t0_ms
        self.pending, self.in_flight = False, None

    def restore(self, header: Control, ps_up: bool, restart_delay_s: float) -> None:
        """A worker that leads now that the leader died: from the version of the last header, which every
        worker holds, with nothing pending, in flight or held. With the PS down too (a mode that waits out
        the outage: psmodes/elastic.py) the repair is this leader's now, the restart delay afresh (the dead
        leader's schedule died with it)."""
        self.version, self.t0_ms = header.version, header.t0_ms
        self.pending, self.in_flight, self.held = False, None, None
        self.ps_up = ps_up
        self.repair_due = None if ps_up else time.monotonic() + restart_delay_s

    def begin_outage(self, t_start: float, version: int | None = None) -> None:
        """A failure at ``t_start`` (time.time()) with the workers at ``version`` (default: this state's):
        the outage from then to the first update after it, unless one is open already (a failure within an
        outage prolongs it)."""
        if self.outage is None:
            self.outage = Outage(t_start=t_start, t_detect=time.time(),
                                 version=self.version if version is None else version)

    def end_outage(self) -> None:
        """The first update after the outage was applied: what it kept for the PS is the PS's."""
        self.outage, self.buffer, self.local_opt = None, None, None

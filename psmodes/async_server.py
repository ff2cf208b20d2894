"""The parameter server under ``--consistency async`` and ``bounded:S``.

Gradients are applied as they arrive, one PS version each, from whichever
worker sent them. Each worker has at most one gradient in flight (it waits
for the answer before computing the next), so serving arrivals in order is
fair: no worker can starve another. Every applied update records its
staleness: the PS version at apply time minus the version the gradient was
computed on; ``--lr-staleness`` scales the step by 1/staleness (Zhang et al.,
"Staleness-aware async-SGD"; staleness 0 and 1 keep the full rate).

``bounded:S`` (stale-synchronous parallel) holds back the answer, i.e. new
weights, from a worker while granting them could let some update become staler
than S. A gradient computed on version b is applied at a version at most
(V - b) + (the number of other workers computing), because each of those pushes
at most once before it needs new weights itself. The PS grants weights only
while, for the worker computing on the oldest version b_min,

    (V - b_min) + (workers computing, counting the new one) - 1 <= S

so no applied update is staler than S. A straggler makes the fast workers wait
for it; with equally fast workers and S >= workers - 1 nobody waits. When no
one is computing the first grant is always allowed, so the bound cannot
deadlock.

After any repair every worker says HELLO again and the PS starts its
bookkeeping afresh. A stateless replacement collects every worker's hand-over
(its weights and its own buffered updates) before it answers anyone: it takes
the freshest worker's weights (``local``: the mean of the workers' copies) and
applies all buffered updates with the replay policy.
"""
from __future__ import annotations

import time

from . import killpoints, transport as tp
from .events import Ev
from .messages import Answer, Grad, Hello, Ready, generation_of, parse
from .server import ParameterServer
from .suspicion import Suspicion, suspect_the_silent


def staleness_lr_scale(staleness: int, enabled: bool) -> float:
    """--lr-staleness: the learning rate divided by the staleness (0 and 1 keep it)."""
    return 1.0 / staleness if enabled and staleness > 1 else 1.0


class AsyncParameterServer(ParameterServer):
    def __init__(self, ctx, **kwargs) -> None:
        super().__init__(ctx, **kwargs)
        self.bound = ctx.cfg.staleness_bound
        self.stopped_workers: set[int] = set()
        self.readied: set[int] = set()  # the workers told READY (a stateless replacement: psmodes/modes/stateless.py)
        self.heard: dict[int, float] = {}
        self.suspected: set[int] = set()  # the pids of workers suspected (once each)
        self.next_check = 0.0

    def _serve(self) -> None:
        ctx, c = self.ctx, self.ctx.cluster
        self.computing: dict[int, int] = {}    # worker index -> version of the weights it computes on
        self.waiting: list[tuple] = []         # answers held back: (index, rank, applied, staleness, version it made)
        self.handovers: dict = {}  # a replacement awaiting them: worker index -> hand-over
        self.asked_in: dict[int, int] = {}  # worker index -> the world generation of its last request
        workers = [r for r, role in enumerate(c.roles) if role.kind == "worker"]
        indices = {c.roles[r].index for r in workers}  # fewer after an elastic worker's death (psmodes/elastic.py)
        self.heard = dict.fromkeys(indices, time.monotonic())  # worker index -> when its last message came
        if self.awaiting_handover:
            # each worker trains on until it hears this, once: after a repair while this replacement awaits the
            # hand-overs (a worker's death), the others say Hello with theirs anyway, and a second READY came
            # where a worker waited for the Hello's answer (psbench chaos, async stateless, trial-000)
            for rank in workers:
                if c.roles[rank].index not in self.readied:
                    tp.send(c.world, Ready(), None, rank, tp.TAG_FROM_PS, ctx.peer_timeout, "PS ready")
                    self.readied.add(c.roles[rank].index)
        inbox = tp.FairInbox(c.world, workers, tp.TAG_TO_PS)
        try:
            while not indices <= self.stopped_workers:
                hdr, src = inbox.get(ctx.outage_timeout, "PS waits for the workers", on_idle=self._idle)
                if generation_of(hdr) > tp.GENERATIONS.current:
                    self._repair_first(hdr, src)  # raises RespawnNow
                msg = parse(hdr, Hello, Grad)
                self.heard[msg.worker] = time.monotonic()
                self.asked_in[msg.worker] = generation_of(hdr)  # its answer belongs to that generation
                if isinstance(msg, Hello):
                    self._hello_from(msg, src)
                else:
                    self._gradient(msg, src)
                self._answer_waiting()
        finally:
            inbox.close()
        self._finish()

    def _idle(self) -> None:
        super()._idle()
        self._suspect_hung_workers()

    def _suspect_hung_workers(self) -> None:
        """A worker this PS has not heard from for ``--suspect-after``, whose beacon has been as silent, is
        hung: suspected (the launcher fences it; psmodes/suspicion.py). Nobody else waits for it: the
        others go on without it (async) or wait for it at the bound (``bounded:S``) or at the run's end."""
        after, now = self.ctx.cfg.suspect_after_s, time.monotonic()
        if not after or now < self.next_check:
            return
        self.next_check = now + 0.05
        cold = self.ctx.cold_until  # a replacement PS's own start-up is not the workers' silence
        quiet = [f"worker{i}" for i, t in self.heard.items()
                 if now - max(t, cold) >= after and i not in self.stopped_workers]
        if quiet:
            suspect_the_silent(self.ctx, "the worker's next gradient", now - min(self.heard.values()),
                               self.suspected, members=quiet)

    # ---- gradients and answers
    def _gradient(self, grad: Grad, src: int) -> None:
        index = grad.worker
        tp.recv_payload(self.ctx.cluster.world, self.grad.numpy(), src, tp.TAG_TO_PS, self.ctx.peer_timeout,
                        "PS receives gradient")
        self.computing.pop(index, None)
        if self.stopped:  # the run has ended; this one is not applied
            self.waiting.append((index, src, 0, -1, -1))
            return
        staleness = self.opt.version - grad.version
        scale = staleness_lr_scale(staleness, self.ctx.cfg.lr_staleness)
        self._update(self.grad, scale)
        if self.opt.version % 10 == 0:
            self.ctx.log.emit(Ev.UPDATE, version=self.opt.version)
        self._check_stop()
        self.waiting.append((index, src, 1, staleness, self.opt.version))

    def _check_stop(self) -> None:
        if not self.t0_ms:  # training has not started
            return
        self.stopped = self.stopped or self.ends_training

    def _may_grant(self) -> bool:
        if self.bound is None or self.stopped:
            return True
        v = self.opt.version
        oldest = min([v, *self.computing.values()])
        return (v - oldest) + len(self.computing) <= self.bound

    def _answer_waiting(self) -> None:
        self._check_stop()
        while self.waiting and self._may_grant():
            index, rank, applied, staleness, applied_as = self.waiting.pop(0)
            answer = Answer(self.opt.version, self.stopped, self.t0_ms, weights=True, staleness=staleness,
                            applied_as=applied_as if applied else -1)
            reqs = tp.isend(self.ctx.cluster.world, answer, self.opt.weights.numpy(), rank, tp.TAG_FROM_PS,
                            generation=self.asked_in.get(index))
            killpoints.reached("send_weights", self.ctx, version=self.opt.version, worker=index)
            # a worker may already be in an announced respawn: notice it here too; one that stopped before it
            # took its answer holds this PS up (every worker waits for it), so it is suspected
            suspect = Suspicion(self.ctx, rank, f"worker{index}'s receipt of its answer")
            tp.wait(reqs, self.ctx.peer_timeout, "PS sends weights", on_idle=self.ctx.idle,
                    watch=self.ctx.death_watch(), suspect=suspect)
            suspect.done()
            if self.stopped:
                self.stopped_workers.add(index)
            else:
                self.computing[index] = self.opt.version
            self._took_over()

    # ---- connections
    def _hello_from(self, hello: Hello, src: int) -> None:
        ctx = self.ctx
        index, version = hello.worker, hello.version
        if self.t0_ms == 0:
            if version < 0:  # the first contact of the run
                self.t0_ms = int(time.time() * 1000)
                ctx.log.emit(Ev.TRAIN_START, t0_ms=self.t0_ms)
            else:
                self.t0_ms = hello.t0_ms
        self.computing.pop(index, None)
        if self.awaiting_handover:
            self.handovers[index] = self.mode.receive_handover(self, hello, src)
            if len(self.handovers) == len(self.heard):  # every worker the world holds
                self.mode.apply_handovers(self, list(self.handovers.values()))
                for i in sorted(self.handovers):
                    self.waiting.append((i, self.handovers[i].rank, 0, -1, -1))
                self.handovers = {}
            return
        ctx.log.emit(Ev.HELLO, worker=index, leader_version=version, ps_version=self.opt.version,
                     lost_steps=max(0, version - self.opt.version) if version >= 0 else 0)
        self.started = True
        self.waiting.append((index, src, 0, -1, -1))

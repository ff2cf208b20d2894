"""``--mode stateless``: the PS keeps no durable state; the workers train through its
outage and hand their work to the replacement (arXiv 2406.05546, "Training Through Failure").

While the PS is down every worker keeps computing gradients on the last weights it
received and buffers them (:class:`psmodes.replay.UpdateBuffer`; ``--replay local``:
it also applies them to its own copy). The repair steps (shrink, spawn) run on a
helper thread meanwhile. A replacement PS starts empty, says READY, and takes the
hand-over with each worker's Hello: the weights, then the buffered updates, which it
applies with the replay policy (:func:`psmodes.replay.apply_buffered`). The sync leader
is one worker handing over; under async every worker hands over its own buffer and the
PS merges them: the same code (:func:`apply_handovers`) for both. A worker keeps its
buffer until the replacement answered, so a replacement that dies while replaying gets
it replayed by the next one: every buffered update is applied exactly once, and no
step the workers saw is lost.

The runtime modules (torch, mpi4py) are imported inside the hooks: the launcher
imports this module for the promise alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import RecoveryMode


@dataclass
class Handover:
    """What one worker gives a fresh replacement PS."""
    worker: int
    rank: int
    version: int     # the version of the weights it computed on (or, local, stepped from)
    buffered: int    # updates it buffered
    policy: str
    weights: object  # torch.Tensor
    vectors: list    # the buffered updates as the policy keeps them


class Stateless(RecoveryMode):
    name = "stateless"
    summary = "the workers train through the outage; the replacement applies their buffered updates"
    replacement_starts_from = "the workers' hand-over: their weights and buffered updates"
    trains_through_outage = True
    options = ("replay", "max_buffered")

    def describe(self, cfg) -> str:
        return f"stateless replay={cfg.replay}"

    def chaos_draw(self, cfg, rng, specs: list[str]) -> None:
        from ..messages import POLICY_CODES

        cfg.kill_ps = list(specs)
        cfg.replay = rng.choice(tuple(POLICY_CODES))

    # ---- worker side
    def on_ps_lost(self, worker) -> None:
        import torch

        from ..replay import UpdateBuffer
        from ..optim import make_optimizer

        cfg = worker.ctx.cfg
        if worker.state.buffer is None:
            worker.state.buffer = UpdateBuffer(cfg.replay, worker.numel, cfg.max_buffered, worker.flat.n_train)
            if cfg.replay == "local":
                # the workers' own copy: the last weights received, stepped in place (fresh optimizer state)
                worker.state.local_opt = make_optimizer(torch.from_numpy(worker.weights_in), worker.ctx,
                                                        worker.flat.n_train)
        if worker.state.pending:  # the gradient the dead PS never answered is the first buffered update
            self._keep(worker)
            worker.state.pending = False

    def outage_step(self, worker, compute_s: float) -> bool:
        from ..events import Ev

        changed = self._keep(worker)
        worker.ctx.log.emit(Ev.STEP, version=worker.state.version, applied=False, buffered=worker.state.buffer.count,
                            samples=worker.samples_per_step, compute_s=round(compute_s, 6),
                            loss=round(worker.last_loss, 5))
        return changed

    @staticmethod
    def _keep(worker) -> bool:
        """Buffer this step's gradient; True when the worker's weights changed (local)."""
        worker.state.buffer.add(worker.grad_host)
        if worker.state.local_opt is not None:
            worker.state.local_opt.step(worker.grad_host)  # steps weights_in, the worker's own copy, in place
            return True
        return False

    def handover(self, worker) -> tuple[int, list] | None:
        if worker.ctx.cluster.generation > 0 and worker.state.buffer is not None:
            return worker.state.buffer.count, worker.state.buffer.vectors()
        return None

    def send_handover(self, worker, vectors: list, suspect=None) -> float:
        # the frozen last weights, or (local) the worker's stepped copy: both are weights_in
        return self.send_to_ps(worker, [worker.weights_in, *(v.numpy() for v in vectors)],
                               "hand-over to the replacement PS", suspect)

    def handed_over(self, worker, n_vectors: int, seconds: float) -> None:
        """The replacement answered, so it applied the buffer. Until then the buffer is kept, so a
        replacement that dies while replaying it gets it replayed by the next one (exactly once)."""
        from ..events import Ev

        buf, cfg = worker.state.buffer, worker.ctx.cfg
        worker.ctx.log.emit(Ev.HANDOVER, buffered=buf.count, dropped=buf.dropped, policy=cfg.replay,
                            staleness=buf.staleness, vectors=n_vectors, seconds=seconds)
        if worker.state.outage is not None:
            worker.state.outage.buffered += buf.count
            worker.state.outage.dropped += buf.dropped
        worker.state.buffer, worker.state.local_opt = None, None  # handed over: never sent twice

    # ---- PS side
    def ps_restore(self, server) -> None:
        server.awaiting_handover = True  # weights and updates come from the workers

    def receive_handover(self, server, hello, src: int) -> Handover:
        import torch

        from .. import transport as tp
        from ..messages import POLICY_NAMES

        ctx, world = server.ctx, server.ctx.cluster.world
        weights = torch.zeros(server.numel)
        tp.recv_payload(world, weights.numpy(), src, tp.TAG_HANDOVER, ctx.peer_timeout, "hand-over weights")
        vectors = []
        for _ in range(hello.vectors):
            vec = torch.zeros(server.numel)
            tp.recv_payload(world, vec.numpy(), src, tp.TAG_HANDOVER, ctx.peer_timeout, "hand-over updates")
            vectors.append(vec)
        return Handover(hello.worker, src, hello.version, hello.buffered, POLICY_NAMES[hello.policy], weights, vectors)

    def apply_handovers(self, server, items: list[Handover]) -> dict:
        """The freshest worker's weights (``local``: the mean of the workers' copies), then every
        buffered update with the replay policy."""
        import torch

        from ..divergence import TAKEOVER
        from ..events import Ev
        from ..replay import apply_buffered

        opt = server.opt
        items = sorted(items, key=lambda it: it.worker)
        policy = items[0].policy
        if policy == "local" and len(items) > 1:  # each worker stepped its own copy: take their mean
            opt.weights.copy_(torch.stack([it.weights for it in items]).mean(dim=0))
        else:
            opt.weights.copy_(max(items, key=lambda it: it.version).weights)
        opt.version = max(it.version for it in items)
        count = sum(it.buffered for it in items)
        div = server.ctx.divergence
        div.note("handover", opt.version, workers=len(items))
        div.check_weights(opt.weights, opt.version, where=TAKEOVER)
        div.note("replay", opt.version + count, updates=count, policy=policy)  # the version it ends at
        vectors = [v for it in items for v in it.vectors]
        if policy in ("paper", "mean") and len(vectors) > 1:  # per-worker sums: add them up in place
            total = vectors[0]
            for v in vectors[1:]:
                total.add_(v)
            vectors = [total]
        staleness = apply_buffered(opt, policy, count, vectors, hook=server.replay_hook)
        server.awaiting_handover = False
        server.started = True
        workers = {"workers": len(items)} if server.ctx.cfg.is_async else {}
        server.ctx.log.emit(Ev.REPLAYED, applied=count, policy=policy, version=opt.version, staleness=staleness,
                            **workers)
        server.after_update()
        return {"replayed": count, "policy": policy, "staleness": staleness, "vectors": len(vectors)}

"""The evaluator rank: scores the PS's weight snapshots on the test set.

The PS pushes a snapshot every ``--eval-interval`` seconds when the evaluator
is free (it never waits for it), so evaluation costs the workers nothing but
the CPU this rank uses. Periodic evaluations use a fixed, seeded subset of
``--eval-samples`` test images; the final one uses the whole test set. The score is the workload's metric
(accuracy for a classifier, perplexity for a language model).
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import torch
from mpi4py import MPI

from . import transport as tp
from .background import Background
from .context import Context
from .events import Ev
from .flatparams import FlatParams
from .messages import Snapshot
from .pidfiles import write_pid_file


def _model(ctx: Context) -> FlatParams:
    torch.manual_seed(ctx.cfg.seed)
    flat = FlatParams(ctx.workload.build_model(ctx.cfg))
    flat.model.eval()
    return flat


def score(ctx: Context, flat: FlatParams, x: np.ndarray, y: np.ndarray, **batching) -> float:
    """The workload's metric (accuracy, perplexity, ...: benchmarks/metrics.py) of ``flat`` on (x, y)."""
    return ctx.workload.metric.score(flat.model, ctx.workload.to_inputs, x, y, **batching)


def evaluate_full(ctx: Context, weights: torch.Tensor) -> float:
    flat = _model(ctx)
    flat.weights.copy_(weights)
    x, y = ctx.workload.load_test(ctx.cfg)
    return score(ctx, flat, x, y)


def emit_eval(ctx: Context, value: float, **fields) -> None:
    """One evaluation: the metric's value under ``value``, its name under ``metric``."""
    ctx.log.emit(Ev.EVAL, value=value, metric=ctx.workload.metric.name, **fields)
    ctx.divergence.check_value(value, fields.get("ps_step", -1))


# A death elsewhere is repaired by every survivor together (MPI_Comm_shrink, then the spawn), the
# evaluator included, and one busy scoring joins only when it is done: a ResNet-18's 2000 test images
# took 18 s on 2 busy cores, and chain's takeover waited 3.5 s of them, checkpoint's up to 13 s (found
# in the workloads sweep). A periodic evaluation runs on a helper thread, in batches of about BATCH_S
# seconds, while this thread watches for a death or a repair announcement as every waiting rank does;
# on one the snapshot is given up at the next batch (the next one comes from the repaired PS). Seen
# after the change: the evaluator, 5 s into a ResNet-18 evaluation, joined the shrink before the
# leader (still computing its 1.3 s step) had noticed the death.
BATCH_S = 0.1
FIRST_BATCH = 100
# the evaluator runs at a lower priority: it shares the cores with the workers, and a late score is no
# worse a score (each is stamped with its snapshot's time); on idle cores it runs as fast as before
NICENESS = 10


class Abandoned(Exception):
    """Raised between batches of an evaluation that a death or a repair cut short."""


class Evaluator:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.flat = _model(ctx)
        self.x, self.y = ctx.workload.load_test(ctx.cfg)
        n = min(ctx.cfg.eval_samples, len(self.y))
        subset = np.random.default_rng(ctx.cfg.seed).permutation(len(self.y))[:n]
        self.sub_x, self.sub_y = self.x[subset], self.y[subset]
        self.batch = FIRST_BATCH

    def run(self) -> None:
        write_pid_file(self.ctx, "evaluator")  # the injector's target (--failures evaluator:...)
        os.nice(NICENESS)
        self.ctx.resilient(self._loop, via="evaluator")

    def _loop(self) -> bool:
        ctx = self.ctx
        while True:
            c = ctx.cluster
            snap, sender = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_EVAL, ctx.outage_timeout + ctx.cfg.eval_interval_s,
                                   "evaluator waits for a snapshot", Snapshot, on_idle=ctx.idle, poll=tp.IDLE_POLL)
            # from the snapshot's sender, not c.ps: a spare that took the PS's role in place may send
            # before this process has seen the leader's announcement and relabelled its world, when its
            # roles still have no PS (seen in CI: Irecv from None, TypeError, node loss, stateless)
            tp.recv_payload(c.world, self.flat.weights.numpy(), sender, tp.TAG_EVAL, ctx.peer_timeout,
                            "evaluator receives")
            final = snap.final
            t0 = time.perf_counter()
            if final:  # no new snapshot would come: a repair waits for the final score (its PS is done)
                value = score(ctx, self.flat, self.x, self.y)
            else:
                value = self._score_watched()
                per_item = (time.perf_counter() - t0) / max(len(self.sub_y), 1)
                self.batch = int(min(1000, max(8, BATCH_S / max(per_item, 1e-9))))
            emit_eval(ctx, value, ps_step=snap.version, final=final, t_snapshot=snap.t_ms / 1000.0,
                      t0_ms=snap.t0_ms, samples=len(self.y) if final else len(self.sub_y),
                      eval_s=time.perf_counter() - t0)
            if final:
                ctx.log.emit(Ev.DONE, completed=True)
                return True

    def _score_watched(self) -> float:
        """The subset's score, computed on a helper thread while this one polls for a death
        (PeerFailed) or the leader's announcement (RespawnNow), which abandon it."""
        ctx, stop = self.ctx, threading.Event()

        def between() -> None:
            if stop.is_set():
                raise Abandoned()

        call = Background(lambda: score(ctx, self.flat, self.sub_x, self.sub_y, batch=self.batch, between=between),
                          "evaluation")
        try:
            while call.running(tp.IDLE_POLL):
                ctx.idle()
                tp.test(ctx.death_watch(), "evaluator scores a snapshot")
        except BaseException:
            stop.set()
            # it stops at the next batch; the next snapshot is received into its model
            if call.running(ctx.peer_timeout):
                raise tp.PeerTimeout(f"an abandoned evaluation did not stop in {ctx.peer_timeout:.0f} s") from None
            raise
        return call.result()

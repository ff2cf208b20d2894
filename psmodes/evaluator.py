"""The evaluator rank: scores the PS's weight snapshots on the test set.

The PS pushes a snapshot every ``--eval-interval`` seconds when the evaluator
is free (it never waits for it), so evaluation costs the workers nothing but
the CPU this rank uses. Periodic evaluations use a fixed, seeded subset of
``--eval-samples`` test images; the final one uses the whole test set. The score is the workload's metric
(accuracy for a classifier, perplexity for a language model).
"""
from __future__ import annotations

import time

import numpy as np
import torch
from mpi4py import MPI

from . import transport as tp
from .context import Context
from .events import Ev
from .flatparams import FlatParams
from .messages import Snapshot


def _model(ctx: Context) -> FlatParams:
    torch.manual_seed(ctx.cfg.seed)
    flat = FlatParams(ctx.workload.build_model(ctx.cfg))
    flat.model.eval()
    return flat


def score(ctx: Context, flat: FlatParams, x: np.ndarray, y: np.ndarray) -> float:
    """The workload's metric (accuracy, perplexity, ...: benchmarks/metrics.py) of ``flat`` on (x, y)."""
    return ctx.workload.metric.score(flat.model, ctx.workload.to_inputs, x, y)


def evaluate_full(ctx: Context, weights: torch.Tensor) -> float:
    flat = _model(ctx)
    flat.weights.copy_(weights)
    x, y = ctx.workload.load_test(ctx.cfg)
    return score(ctx, flat, x, y)


def emit_eval(ctx: Context, value: float, **fields) -> None:
    """One evaluation: the metric's value under ``value``, its name under ``metric``."""
    ctx.log.emit(Ev.EVAL, value=value, metric=ctx.workload.metric.name, **fields)


class Evaluator:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.flat = _model(ctx)
        self.x, self.y = ctx.workload.load_test(ctx.cfg)
        n = min(ctx.cfg.eval_samples, len(self.y))
        subset = np.random.default_rng(ctx.cfg.seed).permutation(len(self.y))[:n]
        self.sub_x, self.sub_y = self.x[subset], self.y[subset]

    def run(self) -> None:
        self.ctx.resilient(self._loop, via="evaluator")

    def _loop(self) -> bool:
        ctx = self.ctx
        while True:
            c = ctx.cluster
            snap, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_EVAL, ctx.outage_timeout + ctx.cfg.eval_interval_s,
                              "evaluator waits for a snapshot", Snapshot, on_idle=ctx.idle)
            tp.recv_payload(c.world, self.flat.weights.numpy(), c.ps, tp.TAG_EVAL, ctx.peer_timeout, "evaluator receives")
            final = snap.final
            t0 = time.perf_counter()
            value = score(ctx, self.flat, self.x, self.y) if final else score(ctx, self.flat, self.sub_x, self.sub_y)
            emit_eval(ctx, value, ps_step=snap.version, final=final, t_snapshot=snap.t_ms / 1000.0,
                      t0_ms=snap.t0_ms, samples=len(self.y) if final else len(self.sub_y),
                      eval_s=time.perf_counter() - t0)
            if final:
                ctx.log.emit(Ev.DONE, completed=True)
                return True

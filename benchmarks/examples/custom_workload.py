"""A workload from outside psbench, complete and runnable as it is:

    psbench run --benchmark benchmarks/examples/custom_workload.py:workload --mode chain --duration 20s --kill-ps 8s

``workload()`` returns a :class:`benchmarks.registry.Workload`: a name, its defaults (learning
rate, batch size per worker), whether it needs ``--data-dir``, and four functions of the run's
configuration ``cfg`` (a psmodes.config.RunConfig: ``cfg.seed``, ``cfg.data_dir``, ...):

- ``build_model(cfg)``: a ``torch.nn.Module`` that maps a batch of inputs to class logits
  (B, C). Every rank builds it with the same seed, so the initial weights agree; its
  trainable parameters are what the PS holds.
- ``load_train(cfg)`` / ``load_test(cfg)``: ``(inputs, labels)`` numpy arrays; each worker
  trains on its strided shard of the training set, the evaluator scores the test set.
- ``to_inputs(batch)``: a numpy batch of inputs -> the tensor the model takes.

Optional: ``loss`` (default cross-entropy over the last axis), ``metric`` (a
``benchmarks.metrics.Metric``: what the evaluator scores and which way is better; default
accuracy, ``PERPLEXITY`` for a language model), ``optimizer`` (the PS's default: ``sgd``,
``momentum`` or ``adamw``; ``lr`` is that optimizer's) and ``requires`` (modules to check
for before mpirun starts). Load data from local files only: the ranks have no network.

Here: a two-layer MLP on points of three interleaved spirals (no files needed).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from benchmarks.registry import Workload

CLASSES, TURNS = 3, 1.5


def _spirals(n: int, seed: int):
    rng = np.random.default_rng(seed)
    label = rng.integers(0, CLASSES, n)
    r = rng.uniform(0.05, 1.0, n)
    angle = r * TURNS * 2 * np.pi + label * 2 * np.pi / CLASSES + rng.normal(0, 0.15, n)
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1).astype(np.float32)
    return x, label.astype(np.int64)


def _model(cfg) -> nn.Module:
    return nn.Sequential(nn.Linear(2, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def workload() -> Workload:
    return Workload(
        name="spirals-mlp", description="a 2-layer MLP on three interleaved spirals (an example workload)",
        lr=0.3, batch_size=64, needs_data=False,
        build_model=_model,
        load_train=lambda cfg: _spirals(30000, 1),
        load_test=lambda cfg: _spirals(3000, 2),
        to_inputs=lambda batch: torch.from_numpy(np.ascontiguousarray(batch)),
    )

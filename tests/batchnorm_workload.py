"""A workload with model buffers for the tests (``--benchmark tests/batchnorm_workload.py:workload``):
the synthetic benchmark's teacher-labelled data through an MLP with BatchNorm1d, whose running
statistics and batch count must travel with the PS's state."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from benchmarks.registry import SYNTH_CLASSES, SYNTH_FEATURES, Workload, _synthetic_set


def workload() -> Workload:
    return Workload(
        name="batchnorm-mlp", description="an MLP with BatchNorm1d on the synthetic data (tests)",
        lr=0.05, batch_size=32, needs_data=False,
        build_model=lambda cfg: nn.Sequential(nn.Linear(SYNTH_FEATURES, 256), nn.BatchNorm1d(256), nn.ReLU(),
                                              nn.Linear(256, SYNTH_CLASSES)),
        load_train=lambda cfg: _synthetic_set(cfg, 20000, 1),
        load_test=lambda cfg: _synthetic_set(cfg, 2000, 2),
        to_inputs=lambda batch: torch.from_numpy(np.ascontiguousarray(batch)),
    )

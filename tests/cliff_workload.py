"""A workload whose model diverges after a replay, reliably (``--benchmark tests/cliff_workload.py:workload``).

A regressor with one weight ``a`` (starting at 0) fitted to targets of 1 by its mean squared error,
scored by a lower-is-better mean absolute error, with a cliff in its loss: past ``a = 1.1`` the loss
grows as ``exp(1000 (a - 1.1))``, which overflows just past 1.19 (the way an unstable recurrent
model blows up once a step throws it too far). Plain SGD at 0.01 walks ``a`` up to 1 and never
past it: each step closes 2 % of the gap. A stateless replay with ``--replay sequential`` applies
every buffered gradient, all computed on the weights frozen at the PS's death, so ``a`` moves as
far as up to 256 steps would have moved it from there, with the gap never closing: killed at step
40-150, the replay throws ``a`` past the cliff and the next gradient is infinite.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from benchmarks.metrics import Metric
from benchmarks.workload import Workload

CLIFF = 1.1


class Offset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a.expand(x.shape[0]) + 0.0 * x[:, 0]


def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).mean() + (torch.exp(1000.0 * torch.relu(out - CLIFF)) - 1.0).mean()


def _abs_error(out, y):
    return float((out - y).abs().sum()), len(y)


MAE = Metric("mae", False, "{:.4f}", _abs_error)


def _data(cfg, n: int):
    return np.zeros((n, 1), dtype=np.float32), np.ones(n, dtype=np.float32)


def workload() -> Workload:
    return Workload(
        name="cliff", description="one weight, a cliff in the loss past 1.1 (tests: a replay that diverges)",
        lr=0.01, batch_size=8, needs_data=False, build_model=lambda cfg: Offset(),
        load_train=lambda cfg: _data(cfg, 4096), load_test=lambda cfg: _data(cfg, 256),
        to_inputs=lambda batch: torch.from_numpy(np.ascontiguousarray(batch)),
        loss=loss, metric=MAE,
    )

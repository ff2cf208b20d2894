"""What a workload is: the one type every built-in and every user's factory returns.

Its own module so that the workload modules (benchmarks/vision.py, benchmarks/textlm.py) and
the registry that names them both import it without a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .metrics import ACCURACY, Metric, cross_entropy


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    lr: float
    batch_size: int
    needs_data: bool
    build_model: Callable  # (cfg) -> torch.nn.Module
    load_train: Callable   # (cfg) -> (inputs ndarray, labels ndarray)
    load_test: Callable    # (cfg) -> (inputs ndarray, labels ndarray)
    to_inputs: Callable    # ndarray batch -> torch tensor
    loss: Callable = cross_entropy  # (outputs, targets) -> the scalar the workers differentiate
    metric: Metric = ACCURACY        # what the evaluator scores, and which way is better
    optimizer: str = "sgd"           # the PS's optimizer without --optimizer (lr is this optimizer's)
    requires: tuple = ()             # modules it imports that a lean install may lack (torchvision)

"""Models used by the benchmarks.

``FashionCNN`` is the network of the study (arXiv 2406.05546): conv 3x3x16 ->
ReLU -> maxpool 2 -> conv 3x3x32 -> ReLU -> maxpool 2 -> fc 512 -> ReLU ->
dropout 0.25 -> fc 10. ``SyntheticMLP`` is a stack of square linear layers
whose width is chosen to reach a requested parameter count, for throughput
and scaling tests that need no data set.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class FashionCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 7 * 7, 512), nn.ReLU(), nn.Dropout(0.25), nn.Linear(512, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class SyntheticMLP(nn.Module):
    """in_features -> hidden x depth -> classes, sized to about ``params``."""

    def __init__(self, params: int, in_features: int = 64, classes: int = 10, depth: int = 2) -> None:
        super().__init__()
        # params ~= in*h + (depth-1)*h*h + h*classes; solve for h
        a, b, c = depth - 1, in_features + classes + depth, -params
        hidden = int((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)) if a else max(1, params // (b))
        hidden = max(hidden, 8)
        layers: list[nn.Module] = [nn.Linear(in_features, hidden), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        layers.append(nn.Linear(hidden, classes))
        self.net = nn.Sequential(*layers)
        self.in_features = in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

"""The PS's optimizer state and update rule: SGD with optional momentum on one
flat weight vector (the same arithmetic as ``torch.optim.SGD`` with
dampening 0, no Nesterov), kept as plain tensors so that checkpoints and chain
replication copy exactly what the update uses."""
from __future__ import annotations

import torch


def sgd_step_(weights: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    """The step itself, in place. The PS and (sync, no momentum) every worker run exactly
    this on the same bytes, so their copies of the weights stay bitwise equal."""
    weights.add_(grad, alpha=-lr)


class FlatSGD:
    def __init__(self, weights: torch.Tensor, lr: float, momentum: float = 0.0) -> None:
        self.weights = weights
        self.lr = lr
        self.momentum = momentum
        self.buf = torch.zeros_like(weights) if momentum else torch.zeros(0)
        self.has_buf = False
        self.version = 0

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        if self.momentum:
            if self.has_buf:
                self.buf.mul_(self.momentum).add_(grad)
            else:
                self.buf.copy_(grad)
                self.has_buf = True
            grad = self.buf
        sgd_step_(self.weights, grad, self.lr * lr_scale)
        self.version += 1

    # replication / checkpoint state: weights followed by the momentum buffer
    @property
    def state_numel(self) -> int:
        return self.weights.numel() + self.buf.numel()

    def pack(self, out: torch.Tensor) -> None:
        n = self.weights.numel()
        out[:n].copy_(self.weights)
        if self.buf.numel():
            out[n:].copy_(self.buf)

    def unpack(self, src: torch.Tensor, version: int) -> None:
        n = self.weights.numel()
        self.weights.copy_(src[:n])
        if self.buf.numel():
            self.buf.copy_(src[n:])
            self.has_buf = version > 0
        self.version = int(version)

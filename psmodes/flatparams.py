"""A model's parameters and gradients as views into two flat float32 buffers.

The PS, the allreduce, the replication chain and the checkpoints all move one
contiguous vector instead of a list of tensors: one message per exchange, no
per-step concatenation or copies, and a buffer numpy/MPI can use directly.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn


class FlatParams:
    def __init__(self, model: nn.Module) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        self.numel = sum(p.numel() for p in params)
        self.weights = torch.zeros(self.numel, dtype=torch.float32)
        self.grads = torch.zeros(self.numel, dtype=torch.float32)
        offset = 0
        for p in params:
            n = p.numel()
            self.weights[offset:offset + n].copy_(p.data.reshape(-1))
            p.data = self.weights[offset:offset + n].view_as(p)
            p.grad = self.grads[offset:offset + n].view_as(p)
            offset += n
        self.model = model

    @property
    def weights_np(self) -> np.ndarray:
        return self.weights.numpy()

    @property
    def grads_np(self) -> np.ndarray:
        return self.grads.numpy()


def digest(array) -> str:
    """Short SHA-256 of a buffer's bytes, for bitwise-equality checks in events."""
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().numpy()
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]

"""A model's parameters and gradients as views into two flat float32 buffers.

The PS, the allreduce, the replication chain and the checkpoints all move one
contiguous vector instead of a list of tensors: one message per exchange, no
per-step concatenation or copies, and a buffer numpy/MPI can use directly.

Each parameter's gradient is copied into its slice of the gradient buffer by a hook the
moment backward has produced it (and then dropped), instead of being accumulated into a
slice that was zeroed before: a copy reads the new gradient and writes the slice once,
where zeroing and accumulating wrote it twice and read it once more (fmnist-cnn, one
worker's forward + backward: 7.75 ms against plain torch's 7.43 ms zeroed, 7.66 ms copied,
issue #18). One backward per step, then: nothing accumulates across two.

The model's buffers (BatchNorm's running mean and variance and its batch count) are
the tail of the same vector, after the ``n_train`` trainable parameters, so they go
wherever the weights go: to the PS, its checkpoints, the replicas, a stateless
hand-over, the evaluator. A worker puts its buffers' current values in the tail of
its gradient (:meth:`FlatParams.capture_buffers`); sync averages them with the
gradients (as DDP users get with SyncBatchNorm's statistics, not DDP's default of
rank 0's), async sends each worker's own, and the update copies the tail instead of
stepping it (psmodes/optim.py). The batch count is kept as float32 (exact below 2^24
batches). A model without buffers has an empty tail: nothing changes for it.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn


class FlatParams:
    def __init__(self, model: nn.Module) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        buffers = [(m, name, b) for m in model.modules() for name, b in m._buffers.items() if b is not None]
        self.n_train = sum(p.numel() for p in params)
        self.numel = self.n_train + sum(b.numel() for *_, b in buffers)
        # on the model's device: views of CPU buffers moved a CUDA model's weights back to the host
        # (seen on the first GPU run: "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor)")
        device = params[0].device if params else torch.device("cpu")
        self.weights = torch.zeros(self.numel, dtype=torch.float32, device=device)
        self.grads = torch.zeros(self.numel, dtype=torch.float32, device=device)
        self._slices: list[tuple[int, int]] = []  # each parameter's (start, end) in the flat vectors
        self._landed = [0] * len(params)  # the last backward (its number) that gave each its gradient
        self._backwards = 0
        offset = 0
        for i, p in enumerate(params):
            n = p.numel()
            self.weights[offset:offset + n].copy_(p.data.reshape(-1))
            p.data = self.weights[offset:offset + n].view_as(p)
            self._slices.append((offset, offset + n))
            p.grad = None
            # registered first, so it runs before any hook registered later on the same parameter
            # (the allreduce's, psmodes/allreduce.py, which averages the slice this one wrote)
            p.register_post_accumulate_grad_hook(self._hook(i))
            offset += n
        # Each buffer is a view of its own ``weights.data``: the same memory, but a version counter of
        # its own. Views of one tensor share one counter, so BatchNorm's in-place update of its running
        # statistics in one layer bumped the version of the tensors an earlier layer had saved for
        # backward (its weight, its running statistics): "modified by an inplace operation", seen with
        # torchvision's ResNet-18, the first model with more than one BatchNorm.
        for module, name, b in buffers:
            n = b.numel()
            view = self.weights.data[offset:offset + n]
            view.copy_(b.detach().reshape(-1).to(torch.float32))
            module._buffers[name] = view.view(b.shape)
            offset += n
        self.model = model

    def _hook(self, i: int):
        lo, hi = self._slices[i]

        def landed(p: torch.Tensor) -> None:
            self.grads[lo:hi].view_as(p).copy_(p.grad)
            p.grad = None
            self._landed[i] = self._backwards
        return landed

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``: every parameter's gradient lands in :attr:`grads`; a parameter that
        got none this time (unused by this forward) gets zeros, as an accumulated buffer had."""
        self._backwards += 1
        loss.backward()
        for i, step in enumerate(self._landed):
            if step != self._backwards:
                lo, hi = self._slices[i]
                self.grads[lo:hi].zero_()

    def use_grads(self, grads: torch.Tensor) -> None:
        """Make ``grads`` (``numel`` float32 on the model's device) the buffer that the next backward
        writes."""
        self.grads = grads

    @property
    def has_buffers(self) -> bool:
        return self.numel > self.n_train

    def capture_buffers(self) -> None:
        """The gradient's tail := the buffers as this step's forward left them."""
        self.grads[self.n_train:].copy_(self.weights[self.n_train:])

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

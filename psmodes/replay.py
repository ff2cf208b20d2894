"""Stateless mode: what the workers keep while the PS is down, and how the
replacement PS applies it (``--replay``).

- ``paper``: gradients computed on the frozen last weights are summed in place
  (O(model) memory) and applied at once; with more than 50 pending the step is
  scaled by 50/n, the "reduced learning rate" of the study.
- ``mean``: the running mean of the buffered gradients, applied once.
- ``sequential``: every buffered gradient applied in order, one PS step each.
- ``staleness``: like sequential, the i-th (1-based) scaled by 1/i, its
  staleness against the frozen weights it was computed on.
- ``local``: the workers keep training on their own copy (the leader applies
  each averaged gradient locally); the PS takes their current weights back.

Every policy counts PS versions as one per buffered gradient, so ``--steps``
still counts gradients consumed. ``sequential`` and ``staleness`` keep at most
``max_buffered`` gradients (each O(model)); later ones are counted as dropped.
"""
from __future__ import annotations

import torch

PAPER_THRESHOLD = 50


class UpdateBuffer:
    """The leader's side: accumulate averaged gradients while the PS is down."""

    def __init__(self, policy: str, numel: int, max_buffered: int = 256, trainable: int | None = None) -> None:
        self.policy = policy
        self.numel = numel
        self.trainable = numel if trainable is None else trainable  # past it: the model's buffers
        self.max_buffered = max_buffered
        self.count = 0
        self.dropped = 0
        self.staleness: list[int] = []
        self.total = torch.zeros(numel) if policy in ("paper", "mean") else None
        self.items: list[torch.Tensor] = []

    def add(self, grad: torch.Tensor) -> bool:
        if self.policy in ("paper", "mean"):
            t = self.trainable
            self.total[:t].add_(grad[:t])
            self.total[t:].copy_(grad[t:])  # BatchNorm's statistics: the newest, not a sum
        elif self.policy in ("sequential", "staleness"):
            if len(self.items) >= self.max_buffered:
                self.dropped += 1
                return False
            self.items.append(grad.detach().clone())
        self.count += 1
        self.staleness.append(self.count)  # against the frozen weights: 1, 2, 3, ...
        return True

    def vectors(self) -> list[torch.Tensor]:
        """What travels to the replacement PS."""
        if self.policy in ("paper", "mean"):
            return [self.total] if self.count else []
        return self.items


def apply_buffered(opt, policy: str, count: int, vectors: list[torch.Tensor], hook=None) -> list[int]:
    """The PS's side. Returns the staleness of each applied update. ``hook(i, n)``
    is called before the i-th (1-based) of the n steps taken (a test kill point)."""
    if not count:
        return []
    hook = hook or (lambda i, n: None)
    if policy == "paper":
        scale = 1.0 if count <= PAPER_THRESHOLD else PAPER_THRESHOLD / count
        hook(1, 1)
        opt.step(vectors[0], lr_scale=scale)
        opt.version += count - 1
    elif policy == "mean":
        hook(1, 1)
        opt.step(vectors[0], lr_scale=1.0 / count)
        opt.version += count - 1
    elif policy in ("sequential", "staleness"):
        for i, grad in enumerate(vectors, start=1):
            hook(i, len(vectors))
            opt.step(grad, lr_scale=1.0 / i if policy == "staleness" else 1.0)
        opt.version += count - len(vectors)  # dropped ones still count as consumed steps
    elif policy == "local":
        hook(1, 1)
        opt.version += count  # applied on the workers already; the weights came with the hand-over
    return list(range(1, count + 1))

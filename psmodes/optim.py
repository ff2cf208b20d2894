"""The PS's optimizers: their state and update rule on one flat weight vector, kept as
plain tensors so that checkpoints, chain replication and the evaluator copy exactly what
the update uses.

- ``sgd`` (``--momentum 0``): ``w -= lr * g``. The PS and (sync) every worker run exactly
  :func:`sgd_step_` on the same bytes, so their copies stay bitwise equal and the PS
  answers a gradient with its version only.
- ``momentum`` (or ``sgd`` with ``--momentum M``): ``torch.optim.SGD``'s rule with
  dampening 0, no Nesterov; one model-sized buffer of state.
- ``adamw``: ``torch.optim.AdamW``'s rule (decoupled weight decay, bias-corrected first and
  second moments, eps 1e-8); two model-sized buffers, so a checkpoint or a replication
  moves three times the weights: the case where the state is what makes recovery costly.

The state travels as one flat vector: the weights, then the optimizer's buffers
(:meth:`FlatOptimizer.pack` / :meth:`FlatOptimizer.unpack`), and the step count is the
PS version. A stateless replacement starts from the workers' weights with fresh buffers:
no copy of the PS's optimizer state survives the PS in that mode (the README says so).
"""
from __future__ import annotations

import torch

DEFAULT_MOMENTUM = 0.9  # --optimizer momentum without --momentum
ADAMW_LR = 1e-3        # --optimizer adamw without --lr (the workloads' defaults are SGD's)


def sgd_step_(weights: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    """The step itself, in place. The PS and (sync, plain SGD) every worker run exactly
    this on the same bytes, so their copies of the weights stay bitwise equal."""
    weights.add_(grad, alpha=-lr)


class FlatOptimizer:
    """Weights plus ``n_buffers`` model-sized state buffers, updated in place."""
    n_buffers = 0

    def __init__(self, weights: torch.Tensor, lr: float) -> None:
        self.weights = weights
        self.lr = lr
        self.buffers = [torch.zeros_like(weights) for _ in range(self.n_buffers)]
        self.version = 0

    @property
    def workers_can_apply(self) -> bool:
        """Whether a worker can apply an update from the averaged gradient alone (no state)."""
        return self.n_buffers == 0

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        raise NotImplementedError

    @property
    def state_numel(self) -> int:
        return self.weights.numel() * (1 + self.n_buffers)

    @property
    def state(self) -> torch.Tensor:
        """The buffers as one vector (empty for plain SGD): what a checkpoint keeps beside the weights."""
        return torch.cat(self.buffers) if self.buffers else torch.zeros(0)

    def load_state(self, state: torch.Tensor, version: int) -> None:
        n = self.weights.numel()
        for i, buf in enumerate(self.buffers):
            buf.copy_(state[i * n:(i + 1) * n])
        self.version = int(version)

    def pack(self, out: torch.Tensor) -> None:
        n = self.weights.numel()
        out[:n].copy_(self.weights)
        for i, buf in enumerate(self.buffers):
            out[(i + 1) * n:(i + 2) * n].copy_(buf)

    def unpack(self, src: torch.Tensor, version: int) -> None:
        n = self.weights.numel()
        self.weights.copy_(src[:n])
        self.load_state(src[n:], version)


class FlatSGD(FlatOptimizer):
    def __init__(self, weights: torch.Tensor, lr: float, momentum: float = 0.0) -> None:
        self.n_buffers = 1 if momentum else 0
        super().__init__(weights, lr)
        self.momentum = momentum

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        if self.momentum:
            buf = self.buffers[0]
            if self.version > 0:  # torch.optim.SGD: the first step's buffer is the gradient itself
                buf.mul_(self.momentum).add_(grad)
            else:
                buf.copy_(grad)
            grad = buf
        sgd_step_(self.weights, grad, self.lr * lr_scale)
        self.version += 1


class FlatAdamW(FlatOptimizer):
    n_buffers = 2  # the first and second moments

    def __init__(self, weights: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 weight_decay: float = 0.01, eps: float = 1e-8) -> None:
        super().__init__(weights, lr)
        self.betas, self.weight_decay, self.eps = betas, weight_decay, eps
        self._denom = torch.zeros_like(weights)

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        m, v = self.buffers
        b1, b2 = self.betas
        lr = self.lr * lr_scale
        t = self.version + 1
        self.weights.mul_(1 - lr * self.weight_decay)
        m.lerp_(grad, 1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        torch.sqrt(v, out=self._denom).div_((1 - b2 ** t) ** 0.5).add_(self.eps)
        self.weights.addcdiv_(m, self._denom, value=-lr / (1 - b1 ** t))
        self.version = t


def make_optimizer(weights: torch.Tensor, ctx) -> FlatOptimizer:
    """The run's optimizer over ``weights`` (``ctx``: a psmodes.context.Context, for lr and cfg)."""
    cfg = ctx.cfg
    if cfg.optimizer == "adamw":
        return FlatAdamW(weights, ctx.lr, cfg.adam_betas, cfg.weight_decay)
    momentum = cfg.momentum or (DEFAULT_MOMENTUM if cfg.optimizer == "momentum" else 0.0)
    return FlatSGD(weights, ctx.lr, momentum)

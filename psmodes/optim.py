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
PS version. The weights' tail past ``trainable`` holds the model's buffers (BatchNorm's
statistics, psmodes/flatparams.py): an update copies it from the gradient's tail, where
the workers put theirs, and steps only the trainable part. A stateless replacement starts from the workers' weights with fresh buffers:
no copy of the PS's optimizer state survives the PS in that mode (docs/modes.md says so).
"""
from __future__ import annotations

import torch

DEFAULT_MOMENTUM = 0.9  # --optimizer momentum without --momentum
ADAMW_LR = 1e-3        # --optimizer adamw without --lr on a workload whose default is SGD
SGD_LR = 0.01          # --optimizer sgd or momentum without --lr on a workload whose default is adamw


def sgd_step_(weights: torch.Tensor, grad: torch.Tensor, lr: float, trainable: int | None = None) -> None:
    """The step itself, in place. The PS and (sync, plain SGD) every worker run exactly
    this on the same bytes, so their copies of the weights stay bitwise equal."""
    t = weights.numel() if trainable is None else trainable
    weights[:t].add_(grad[:t], alpha=-lr)
    follow_buffers_(weights, grad, t)


def follow_buffers_(weights: torch.Tensor, grad: torch.Tensor, trainable: int) -> None:
    """The model's buffers are not stepped: they take the values the workers sent."""
    if trainable < weights.numel():
        weights[trainable:].copy_(grad[trainable:])


class FlatOptimizer:
    """Weights plus ``n_buffers`` state buffers the size of the trainable part, updated in place."""
    n_buffers = 0

    def __init__(self, weights: torch.Tensor, lr, trainable: int | None = None) -> None:
        self.weights = weights
        self.trainable = weights.numel() if trainable is None else trainable
        self.params = weights[:self.trainable]
        self._lr = lr  # a number, or a function of nothing (the run's rate now: psmodes.context.Context.lr)
        self.buffers = [torch.zeros(self.trainable) for _ in range(self.n_buffers)]
        self.version = 0

    @property
    def lr(self) -> float:
        return self._lr() if callable(self._lr) else self._lr

    @property
    def workers_can_apply(self) -> bool:
        """Whether a worker can apply an update from the averaged gradient alone (no state)."""
        return self.n_buffers == 0

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        raise NotImplementedError

    @property
    def state_numel(self) -> int:
        return self.weights.numel() + self.trainable * self.n_buffers

    @property
    def state(self) -> torch.Tensor:
        """The buffers as one vector (empty for plain SGD): what a checkpoint keeps beside the weights."""
        return torch.cat(self.buffers) if self.buffers else torch.zeros(0)

    def load_state(self, state: torch.Tensor, version: int) -> None:
        t = self.trainable
        for i, buf in enumerate(self.buffers):
            buf.copy_(state[i * t:(i + 1) * t])
        self.version = int(version)

    def pack(self, out: torch.Tensor) -> None:
        n, t = self.weights.numel(), self.trainable
        out[:n].copy_(self.weights)
        for i, buf in enumerate(self.buffers):
            out[n + i * t:n + (i + 1) * t].copy_(buf)

    def unpack(self, src: torch.Tensor, version: int) -> None:
        n = self.weights.numel()
        self.weights.copy_(src[:n])
        self.load_state(src[n:], version)


class FlatSGD(FlatOptimizer):
    def __init__(self, weights: torch.Tensor, lr, momentum: float = 0.0, trainable: int | None = None) -> None:
        self.n_buffers = 1 if momentum else 0
        super().__init__(weights, lr, trainable)
        self.momentum = momentum

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        g = grad[:self.trainable]
        if self.momentum:
            buf = self.buffers[0]
            if self.version > 0:  # torch.optim.SGD: the first step's buffer is the gradient itself
                buf.mul_(self.momentum).add_(g)
            else:
                buf.copy_(g)
            g = buf
        self.params.add_(g, alpha=-self.lr * lr_scale)
        follow_buffers_(self.weights, grad, self.trainable)
        self.version += 1


class FlatAdamW(FlatOptimizer):
    n_buffers = 2  # the first and second moments

    def __init__(self, weights: torch.Tensor, lr, betas: tuple[float, float] = (0.9, 0.999),
                 weight_decay: float = 0.01, eps: float = 1e-8, trainable: int | None = None) -> None:
        super().__init__(weights, lr, trainable)
        self.betas, self.weight_decay, self.eps = betas, weight_decay, eps
        self._denom = torch.zeros(self.trainable)

    def step(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        m, v = self.buffers
        g, w = grad[:self.trainable], self.params
        b1, b2 = self.betas
        lr = self.lr * lr_scale
        t = self.version + 1
        w.mul_(1 - lr * self.weight_decay)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        torch.sqrt(v, out=self._denom).div_((1 - b2 ** t) ** 0.5).add_(self.eps)
        w.addcdiv_(m, self._denom, value=-lr / (1 - b1 ** t))
        follow_buffers_(self.weights, grad, self.trainable)
        self.version = t


def default_lr(cfg, workload) -> float:
    """``--lr``, else the workload's when it runs with its own optimizer (an SGD lr for SGD or momentum),
    else the optimizer's default (an SGD workload under adamw: ADAMW_LR)."""
    if cfg.lr is not None:
        return cfg.lr
    adam, workload_adam = cfg.optimizer == "adamw", workload.optimizer == "adamw"
    if adam == workload_adam:
        return workload.lr
    return ADAMW_LR if adam else SGD_LR


def make_optimizer(weights: torch.Tensor, ctx, trainable: int | None = None) -> FlatOptimizer:
    """The run's optimizer over ``weights``, whose first ``trainable`` elements are the parameters
    (the rest the model's buffers); ``ctx``: a psmodes.context.Context, for cfg and the learning rate,
    read at every step (it follows the workers left: ``--elastic-batch local``)."""
    cfg = ctx.cfg
    lr = lambda: ctx.lr  # noqa: E731
    if cfg.optimizer == "adamw":
        return FlatAdamW(weights, lr, cfg.adam_betas, cfg.weight_decay, trainable=trainable)
    momentum = cfg.momentum or (DEFAULT_MOMENTUM if cfg.optimizer == "momentum" else 0.0)
    return FlatSGD(weights, lr, momentum, trainable)

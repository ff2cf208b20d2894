"""What a workload is scored by, and which way is better: the one place that knows.

A workload declares a :class:`Metric` (and a training loss). The evaluator
scores snapshots with it; ``summary.json`` records its name and direction
(``metric``), and everything downstream (reports, findings, plots, ``compare``,
chaos's tolerance invariant, the time to ``--target``) asks this module, never
the metric's name, whether a value is better, worse or has reached a target.
Nothing here imports torch at module level: the launcher reads directions
without it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Metric:
    name: str                # "accuracy", "perplexity", ...: the reports' words
    higher_is_better: bool
    fmt: str                 # how the reports print one value
    batch_total: Callable    # (outputs, targets) -> (sum over the batch's items, items)
    finish: Callable = float  # the mean over all items -> the metric (perplexity: exp)
    default_target: float | None = None  # the report's --target when none is given

    def score(self, model, to_inputs: Callable, x: np.ndarray, y: np.ndarray, batch: int = 1000,
              between: Callable | None = None) -> float:
        """The metric of ``model`` over (x, y), in batches, without gradients; ``between()`` is
        called after each batch (it may raise to abandon the evaluation)."""
        import torch

        total, items = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(y), batch):
                out = model(to_inputs(x[start:start + batch]))
                s, n = self.batch_total(out, torch.from_numpy(np.ascontiguousarray(y[start:start + batch])))
                total, items = total + s, items + n
                if between is not None:
                    between()
        return self.finish(total / max(items, 1))

    def better(self, a: float, b: float) -> bool:
        return a > b if self.higher_is_better else a < b

    def reached(self, value: float, target: float) -> bool:
        """``value`` meets ``target``: at or above it, or at or below it for a metric to minimise."""
        return value >= target if self.higher_is_better else value <= target

    def drop(self, before: float, after: float) -> float:
        """How much worse ``after`` is than ``before`` (negative: it is better)."""
        return before - after if self.higher_is_better else after - before

    def valid_target(self, target: float) -> str | None:
        """Why ``target`` cannot be a target of this metric, or None."""
        if self.name == "accuracy" and not 0 < target <= 1:
            return f"--target must be an accuracy in (0, 1], got {target}"
        if target <= 0 or not math.isfinite(target):
            return f"--target must be a positive {self.name}, got {target}"
        return None

    @property
    def axis_label(self) -> str:
        """The y axis of a plot of this metric."""
        return f"test {self.name}" + ("" if self.higher_is_better else " (lower is better)")

    def as_dict(self) -> dict:
        return {"name": self.name, "higher_is_better": self.higher_is_better}


def _correct(out, y):
    return float((out.argmax(dim=1) == y).sum()), len(y)


def _token_nll(out, y):
    return float(cross_entropy(out, y, reduction="sum")), y.numel()


ACCURACY = Metric("accuracy", True, "{:.3f}", _correct, default_target=0.70)
PERPLEXITY = Metric("perplexity", False, "{:.2f}", _token_nll, finish=math.exp)
METRICS = {m.name: m for m in (ACCURACY, PERPLEXITY)}


def of_summary(summary: dict) -> Metric:
    """The metric a run's ``summary.json`` was scored by (accuracy for runs from before it was recorded)."""
    declared = (summary or {}).get("metric") or {}
    known = METRICS.get(declared.get("name", "accuracy"))
    if known is not None:
        return known
    # a user's workload with a metric of its own: its name and direction are all the launcher needs
    return Metric(declared["name"], bool(declared.get("higher_is_better", True)), "{:.4g}", _correct)


def cross_entropy(logits, targets, reduction: str = "mean"):
    """The training loss of a classifier: logits (B, C), or (B, T, V) for a language model
    (``reduction="sum"``: the perplexity's total over every token)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)

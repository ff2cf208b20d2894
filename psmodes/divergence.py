"""Divergence: a non-finite value in the model is an outcome of the run, not a number to report.

A user's GRU regressor under ``--mode stateless`` with the paper's replay went from an MAE of
0.25 to NaN after a replay of 367 buffered updates, and the run was reported ``completed``
with ``final_metric: NaN`` (and its setback "regained" 11.8 s later: a NaN compares as not
worse). Every place where a non-finite value can enter the model checks for one:

- the PS, after every update it applies (:meth:`psmodes.server.ParameterServer.after_update`):
  the averaged gradient (sync) or a worker's (async) when it made the weights non-finite, else
  the weights themselves (an overflow in the optimizer);
- a replay, a hand-over, a restore from a checkpoint, a promoted replica's take-over, a
  catch-up: the same check, with what preceded it recorded (:meth:`Divergence.note`);
- the evaluated metric (:func:`psmodes.evaluator.emit_eval`).

The first one a process sees is recorded once, as a ``diverged`` event: ``where``, the PS
``version``, and ``preceded_by`` (the last recovery action of this PS and the updates since, or
plain training). ``--on-diverge stop`` (the default) ends the run: the PS answers with
``stop``, training ends as at its last step, and the summary says ``exit_reason: diverged``,
``completed: false`` (launch/analysis/summary.py). ``continue`` trains on, recorded the same.

The check is one reduction over the weights per update (``sum``: NaN and inf propagate through
it), about 40 us for fmnist-cnn's 0.8M parameters against a 0.3 ms SGD step. torch is not imported
here: the launcher reads :func:`describe`.
"""
from __future__ import annotations

import math

from .events import Ev

# where a non-finite value was found
GRADIENT = "gradient"   # the gradient the PS was given (sync: the workers' average)
UPDATE = "update"       # the weights after the PS's update of finite weights with a finite gradient
METRIC = "metric"       # the evaluated metric
TAKEOVER = "takeover"   # the weights a PS took over with (restore, promotion, hand-over)


def finite(t) -> bool:
    """No NaN or inf in the tensor ``t``: one reduction, no temporary of its size."""
    return math.isfinite(float(t.sum()))


class Divergence:
    """One process's watch for a non-finite value (see the module docstring)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.record: dict | None = None
        self._preceded: dict = {"what": "training"}

    @property
    def stops_run(self) -> bool:
        """Training must end: a divergence was recorded and ``--on-diverge stop``."""
        return self.record is not None and self.ctx.cfg.on_diverge == "stop"

    def note(self, what: str, version: int, **details) -> None:
        """A recovery action that changed the weights other than by one update (a replay, a
        restore, a hand-over, a take-over, a catch-up): what a later divergence names as its cause."""
        self._preceded = {"what": what, "version": int(version), **details}

    def check_weights(self, weights, version: int, grad=None,
                      where: str = UPDATE) -> bool:
        """True when the weights are finite; else records the divergence (once) and returns False.
        ``grad``: the gradient just applied, to tell a non-finite gradient from an overflow."""
        if finite(weights):
            return True
        if grad is not None and not finite(grad):
            where = GRADIENT
        self._record(where, version)
        return False

    def check_value(self, value: float, version: int, where: str = METRIC) -> bool:
        """As :meth:`check_weights`, for one number (the metric)."""
        try:
            ok = math.isfinite(float(value))
        except (TypeError, ValueError):
            return True  # not a number at all: nothing to judge
        if not ok:
            self._record(where, version, value=str(value))
        return ok

    def _record(self, where: str, version: int, **extra) -> None:
        if self.record is not None:
            return
        preceded = dict(self._preceded)
        if "version" in preceded:
            preceded["updates_since"] = max(0, int(version) - preceded["version"])
        self.record = self.ctx.log.emit(Ev.DIVERGED, where=where, version=int(version), preceded_by=preceded,
                                        policy=self.ctx.cfg.on_diverge, **extra)


def describe(record: dict) -> str:
    """A diverged event in words, for the summary's exit reason and the reports."""
    where = {GRADIENT: "gradient", UPDATE: "weights after an update", METRIC: "evaluated metric",
             TAKEOVER: "weights taken over"}.get(record.get("where"), str(record.get("where")))
    text = f"non-finite {where} at version {record.get('version')}"
    return f"{text} {preceded_text(record.get('preceded_by') or {})}"


def preceded_text(preceded: dict) -> str:
    """``after a replay of 367 buffered updates (policy paper), 3 updates before`` and the like."""
    what = preceded.get("what", "training")
    if what == "training":
        return "in plain training (no recovery before it)"
    since = preceded.get("updates_since")
    when = "" if since is None else (", at once" if since == 0 else f", {since} update{'s' if since > 1 else ''} later")
    if what == "replay":
        return f"after a replay of {preceded.get('updates')} buffered updates (policy {preceded.get('policy')}){when}"
    if what == "restore":
        return f"after a restore from checkpoint version {preceded.get('from_version')}{when}"
    if what == "catch-up":
        return f"after a catch-up of {preceded.get('updates')} kept updates{when}"
    return f"after a {what}{when}"

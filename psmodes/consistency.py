"""The consistency models: which PS and worker a run's ``--consistency`` uses.

- ``sync`` (Horovod-style): the workers allreduce their gradients and the leader
  alone talks to the PS, one exchange a step (:mod:`psmodes.server`, :mod:`psmodes.worker`).
- ``async`` and ``bounded:S``: every worker talks to the PS on its own and the PS
  grants new weights under the staleness bound (:mod:`psmodes.async_server`,
  :mod:`psmodes.async_worker`).

Both call the same recovery-mode hooks (:mod:`psmodes.modes`), so a mode is written once.
"""
from __future__ import annotations

from .async_server import AsyncParameterServer
from .async_worker import AsyncWorker
from .server import ParameterServer
from .worker import Worker


def make_server(ctx, **kwargs) -> ParameterServer:
    """The PS for this run's consistency model (``kwargs``: a promoted replica's state)."""
    return (AsyncParameterServer if ctx.cfg.is_async else ParameterServer)(ctx, **kwargs)


def make_worker(ctx, worker_comm) -> Worker:
    return (AsyncWorker if ctx.cfg.is_async else Worker)(ctx, worker_comm)

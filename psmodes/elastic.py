"""Elastic workers (issue #46, first part): when a worker's death is survived, and the workers' group
made again without it.

A worker holds nothing the PS lacks, so the survivors only have to agree that it is gone and average
over the ones left. What is built: a worker that is not the leader dies (SIGKILL, or a crash nobody
injected), in sync consistency; every survivor of the world shrinks it (the PS, replicas, evaluator
and spares notice the death in their own waits; the workers are told by the leader's control header,
``ACT_REGROUP``); the workers shrink their own communicator, psbench's MPI allreduce goes on over it,
and the leader says Hello to the PS again (a gradient it had sent is reconciled as after a PS death:
applied once). The run goes on with fewer workers down to ``--min-workers``.

Not built yet, so such a death still ends the run cleanly, with a reason that says which:

- Horovod's allreduce: it does not reliably outlive a worker's death. In 4 of 9 runs of
  tests/probes/horovod_after_shrink.py Horovod's coordinator (the leader) died of SIGSEGV in its
  background loop (docs/openmpi.md item 14). Elastic runs use ``--allreduce mpi``.
- the pipelined exchange (its gradient in flight and the gradient every worker holds would have to be
  reconciled with a group that changed under them): ``--exchange blocking``;
- async and bounded consistency, where every worker talks to the PS itself;
- the leader's own death (worker0: the announcements, the exchange and hybrid's upstream backup are
  its alone);
- replacements: a lost worker is not spawned again, nor taken by a spare (``Cluster.missing``).

The decision is a pure function of the configuration and the roles the shrink agreed on, the same on
every survivor.
"""
from __future__ import annotations

from .roles import Role


def unsupported(cfg) -> str | None:
    """Why no worker's death can be survived in this run (None: a worker other than the leader can be)."""
    if cfg.consistency != "sync":
        return f"--consistency {cfg.consistency}: elastic async workers are not built yet"
    if cfg.allreduce != "mpi":
        return ("Horovod's coordinator may die with the worker (docs/openmpi.md item 14): survive a worker's "
                "death with --allreduce mpi --exchange blocking")
    if cfg.exchange != "blocking":
        return "the pipelined exchange is not elastic yet: survive a worker's death with --exchange blocking"
    return None


def why_the_run_ends(cfg, lost: list[Role], workers_left: int) -> str | None:
    """Why losing the workers ``lost`` ends the run, with ``workers_left`` workers left (None: it goes on)."""
    if not lost:
        return None
    names = ", ".join(r.label for r in lost)
    reason = unsupported(cfg)
    if reason is None and any(r.index == 0 for r in lost):
        reason = "the leader's (worker0's) death is not survived yet"
    if reason is None and workers_left < cfg.min_workers:
        reason = f"{workers_left} worker(s) left, fewer than --min-workers {cfg.min_workers}"
    return None if reason is None else f"{names} died; {reason}, so the run ends"


def survivable(cfg) -> bool:
    """Whether a worker other than the leader may die and the run go on."""
    return unsupported(cfg) is None and cfg.workers > cfg.min_workers

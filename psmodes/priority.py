"""The sync PS's place in the CPU scheduler when a host's ranks outnumber its cores.

The workers' steps are synchronous: a worker that loses its core for a moment delays
every worker by that moment. The PS needs about 0.7 ms of CPU in an 11 ms fmnist-cnn step
(its SGD step, its polls, its answer), and at normal priority the kernel hands it a core
the moment it wakes, preempting a worker (a process that burnt 0.4 / 0.8 ms every 11 ms
beside two Horovod workers on 2 cores cost them 2.7 / 5.5 % of their samples/s; at
SCHED_IDLE 1.3 %). With the pipelined exchange the PS's answer is needed a step later, so
the PS can wait for a core that a worker leaves idle (their waits for the allreduce and the
control header): Linux's ``SCHED_IDLE`` runs a thread only when no normal one wants that
core.

The PS switches once it serves steady updates (its first gradient after a Hello): a PS that
takes over (a replacement's catch-up, a hand-over's replay) does so at normal priority,
while the workers may be training through the outage. An unprivileged thread cannot leave
``SCHED_IDLE`` (RLIMIT_NICE is usually 0), so the PS stays there; whenever the workers
need it they wait for it, which leaves it their cores. The prices: what the PS does after an update
(a checkpoint's copy, a replication's send) also waits for an idle core, up to the leader's
wait for the answer, so a checkpoint can become durable a step later (a test that killed the
PS one step after a checkpoint once resumed from the one before); and on a machine whose
cores are busy with work of others such a PS gets almost no CPU (a normal process on every
core leaves it a fraction of a percent): ``--ps-priority normal`` there.
"""
from __future__ import annotations

import os


def ps_yields(cfg) -> bool:
    """Whether this run's sync PS goes to ``SCHED_IDLE`` (``--ps-priority``). auto: when this host's
    ranks outnumber its cores and the run has no evaluator, the one rank that computes for long
    stretches (a whole score) without waiting for the PS: with it on the cores, an idle-class PS
    would answer while it scores only on what the workers leave, a step late or worse."""
    if cfg.ps_priority == "auto":
        from .context import ranks_and_cores

        ranks, cores = ranks_and_cores(cfg)
        return ranks > cores and not cfg.evaluator
    return cfg.ps_priority == "idle"


def yield_cores() -> bool:
    """The calling thread to ``SCHED_IDLE``, for good; False where the system has no such class."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        return False
    return True

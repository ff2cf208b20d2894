"""Where the ranks run on the CPU: the sync PS's scheduling class (``--ps-priority``: normal,
or idle), and each worker on a core of its own where ranks outnumber cores (``--pin-workers``).

The workers' steps are synchronous: a worker that loses its core for a moment delays
every worker by that moment. The PS needs about 0.7 ms of CPU in an 11 ms fmnist-cnn step
(its SGD step, its polls, its answer), and at normal priority the kernel hands it a core
the moment it wakes, preempting a worker (a process that burnt 0.4 / 0.8 ms every 11 ms
beside two Horovod workers on 2 cores cost them 2.7 / 5.5 % of their samples/s; at
``SCHED_IDLE`` 1.3 %). With the pipelined exchange the PS's answer is needed a step later,
so ``--ps-priority idle`` lets the PS wait for a core that a worker leaves idle (their waits
for the allreduce and the control header): Linux's ``SCHED_IDLE`` runs a thread only when no
normal one wants that core.

Not the default, measured (psbench perf's throughput runs, 2 workers on 2 cores, every
no-failure variant with an idle-class PS, 5-6 repetitions, 2026-12-05): ``none`` gains 4 %
(``none`` at normal priority 0.960 of it; 8 % in another session), but every mode whose PS works after an update
loses, because that work (the strict chain's replication and its wait for the tail, a
checkpoint's copy, hybrid's vectors, an MPI receive without the mailbox) now also waits for
an idle core, up to the leader's wait for the answer: chain K=1 / ``none`` 0.869 with one
replica and 0.788 with two (0.971 / 0.914 at normal priority), hybrid K=100 0.932 (0.995),
``none`` without the mailbox 0.931 (0.992). A benchmark that compares recovery modes must
not speed up its baseline alone, so normal stays the default; idle is for runs of ``none``
or ``stateless`` on a host whose ranks outnumber its cores.

The PS switches once it serves steady updates (its first gradient after a Hello): a PS that
takes over (a replacement's catch-up, a hand-over's replay) does so at normal priority. An
unprivileged thread cannot leave ``SCHED_IDLE`` (RLIMIT_NICE is usually 0), so the PS stays
there. On a machine whose cores are busy with work of others an idle-class PS gets almost
no CPU (a normal process on every core leaves it a fraction of a percent).
"""
from __future__ import annotations

import os

# the cores this process may use, kept where pin_worker pinned its main thread (None: not pinned)
_ALL_CORES: set[int] | None = None


def unpin_thread() -> None:
    """The calling thread on every core the process may use again, where its worker is pinned.

    A thread inherits the affinity of the thread that starts it, so a helper thread that a pinned
    worker starts (a repair step, a bounded MPI_Comm_spawn) would share the worker's one core with
    it: a spawn that blocks in Open MPI's progress loop then competes for that core with the main
    thread's polls (--pin-workers auto: the stuck-replacement test, see pin_worker)."""
    if _ALL_CORES is not None:
        try:
            os.sched_setaffinity(0, _ALL_CORES)  # 0: this thread (Linux)
        except OSError:
            pass


def yield_cores() -> bool:
    """The calling thread to ``SCHED_IDLE``, for good; False where the system has no such class."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        return False
    return True


def pin_worker(cfg, worker_comm, threads: int) -> int | None:
    """This worker to a core of its own (the core it now runs on, or None): where this host's
    ranks outnumber the cores it may use (so it runs one torch thread, ``threads``) and its
    workers do not (``--pin-workers auto``). Not the default: it makes ``none`` faster and a strict
    chain with two replicas no faster (reports/perf-pinned-chain), and a kill-point test of a
    replacement stuck before MPI_Init still fails now and then with it: 5 of 86 runs before the
    worker's helper threads were unpinned (:func:`unpin_thread`: the first attempt's spawn, blocked
    for good, spins in Open MPI's progress loop, and it shared the pinned worker's one core with the
    main thread), 1 of 140 after (Fisher's p = 0.03): the second spawn attempt's replacement stuck in
    its MPI_Init while one worker's main thread went 66 s without a poll. Not understood further.

    psbench starts its ranks with ``--bind-to none`` (three processes on two cores cannot each
    have one), so the kernel moved a worker that the PS preempted to the other worker's core,
    and both ran slower until the balancer moved one back. Pinned, a preempted worker waits on
    its own core for the PS's fraction of a millisecond. On 2 cores (fmnist-cnn, 2 workers,
    alternating ``psbench perf --only throughput`` sessions, 2026-12-05): ``none`` / Horovod
    0.946 pinned against 0.928 unpinned, median of 10 and 9; with an idle-class PS 0.968-0.978
    against 0.925-0.966; paired within 6 repetitions (reports/perf-pinned-chain), pinned over
    unpinned 1.020 for ``none`` and 1.003 for a strict chain with two replicas. mpirun binds a
    plain Horovod job of 2 ranks on 2 cores to a core each by default too. The PS, replicas,
    evaluator and spares are not pinned. A collective on the workers' communicator (auto): every
    worker calls it."""
    import numpy as np
    from mpi4py import MPI

    if cfg.pin_workers == "off" or not hasattr(os, "sched_setaffinity"):  # the same for every worker
        return None
    # by host name, not with a new communicator (MPI_Comm_split_type): a freed one's context id is
    # reused by the next communicator made, and the repairs make many. Raw bytes: nothing from the
    # network is unpickled
    me, n = worker_comm.Get_rank(), worker_comm.Get_size()
    name = np.zeros(MPI.MAX_PROCESSOR_NAME, dtype=np.uint8)
    encoded = MPI.Get_processor_name().encode()[:MPI.MAX_PROCESSOR_NAME]
    name[:len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    names = np.zeros((n, MPI.MAX_PROCESSOR_NAME), dtype=np.uint8)
    worker_comm.Allgather(name, names)
    same = [bool((names[r] == name).all()) for r in range(n)]
    index, workers_here = sum(same[:me]), sum(same)
    cores = sorted(os.sched_getaffinity(0))
    # the job's ranks on this host as the launcher placed them (none said: not pinned); not the
    # run's rank count that set_threads takes, so that hosts of one machine (network namespaces,
    # a one-node Slurm cluster's "nodes") with few ranks each do not pin their workers to the same cores
    ranks_here = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", 0))
    if threads != 1 or ranks_here <= len(cores) or workers_here > len(cores):
        return None
    global _ALL_CORES
    try:
        os.sched_setaffinity(0, {cores[index]})  # this thread, and the threads it starts (unpin_thread)
    except OSError:
        return None
    _ALL_CORES = set(cores)
    return cores[index]

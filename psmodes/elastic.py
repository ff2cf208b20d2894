"""Elastic workers (issue #46): when a worker's death is survived, the workers' group made again without
it, and its replacement.

A worker holds nothing the PS lacks, so the survivors only have to agree that it is gone and average
over the ones left. What is built: a worker dies (SIGKILL, a hang fenced, or a crash nobody injected),
the leader too.

- Sync: every survivor of the world shrinks it (the PS, replicas, evaluator and spares notice the death
  in their own waits; the workers are told by the leader's control header, ``ACT_REGROUP``); the
  workers shrink their own communicator, psbench's MPI allreduce goes on over it, and the leader says
  Hello to the PS again (a gradient it had sent is reconciled as after a PS death: applied once).
  When the leader dies, the others see it in their wait for its control header; after the shrinks the
  worker of the lowest index left leads (``Cluster.leader``) from the version every worker holds (the
  last header's) and says Hello without a pending gradient: the PS answers with its weights, so a
  gradient the dead leader had sent is applied once (the PS is a version ahead) or not at all.
  The pipelined exchange: a gradient in flight when the group broke is re-sent with the Hello as one the
  workers applied (the PS applies it unless it had); the one the workers computed meanwhile is void.
- Async and bounded: every worker waits for the PS's answer with an ANY_SOURCE receive, which ULFM
  fails at any member's death, so each survivor notices it itself, joins the world's shrink and says
  Hello again, as after any repair (psmodes/async_worker.py). The PS starts its bookkeeping afresh, so
  the bound of ``bounded:S`` counts the survivors only. A hung worker is suspected by the PS, for which
  every worker's next gradient is awaited (psmodes/async_server.py). The leader may die too: its only
  duty here is to announce repairs, and the worker of the lowest index left takes it over
  (``Cluster.leader``, a function of the roles the shrink agreed on); every worker set its own time
  for a respawn when it saw the PS die, so a repair that was due is announced by the new leader.

Either way the data is sharded again over the survivors (a fresh shuffle, the same on each) and the
run goes on with fewer workers down to ``--min-workers``.

Replacements (unless ``--no-replace-workers``): ``--restart-delay`` after the loss, and once training runs
again, the leader announces a refill (``ACTION_REFILL``, as ``--refill-spares`` does) and every member joins
the respawn (psmodes/context.py): a spare takes the lost worker's place in place, or a process is spawned.
It is a worker of a new index, above every worker left (:func:`replacements`), so it never leads while an
older worker lives: the leader's state (its version, the gradient the PS may hold) is not a newcomer's. In
sync the workers make their group again with it (``MPI_Comm_create_group`` over the world) and it takes the
PS's weights from the leader's next broadcast, the header after the leader's Hello; in async it says Hello to
the PS itself. A worker holds nothing the PS lacks, so that is all it needs.

Not built yet, so such a death still ends the run cleanly, with a reason that says which:

- sync over Horovod's allreduce: it does not reliably outlive a worker's death. In 4 of 9 runs of
  tests/probes/horovod_after_shrink.py Horovod's coordinator (the leader) died of SIGSEGV in its
  background loop (docs/openmpi.md item 14). Elastic runs use ``--allreduce mpi``.
- in sync stateless, the leader's death while the PS is down: the updates buffered through the outage for
  the replacement's replay were the leader's alone.

In the modes that wait out a PS's outage (checkpoint; chain and hybrid when no replica is left), the leader may
die while the PS is down too (a node loss takes both): the next worker leads, starts the restart delay afresh
(the old leader's schedule died with it) and announces the respawn; its Hello to the replacement says the version
of the last header, and the steps the replacement lacks are recorded as lost, as after any PS death.

Hybrid's upstream backup (the gradients since the tail's last ACK) was the dead leader's alone: the PS
answers the new leader's Hello only after a forced state sync with the tail (``Hybrid.ps_new_leader``), so
hybrid's 0 lost steps hold again from that answer on. Between the leader's death and that answer a head
death loses the steps since the tail's last ACK (recorded as the Hello's ``lost_steps``), as in chain mode.

The decision is a pure function of the configuration and the roles the shrink agreed on, the same on
every survivor.
"""
from __future__ import annotations

import zlib

from .roles import Role


def unsupported(cfg) -> str | None:
    """Why no worker's death can be survived in this run (None: a worker other than the leader can be)."""
    if cfg.dies_with_ps:
        return f"{cfg.recovery if cfg.recovery == 'job-restart' else 'mode ' + cfg.mode}: any death ends the job"
    if cfg.is_async:  # every worker talks to the PS on its own: nothing to regroup but the data's shards
        return None
    if cfg.allreduce != "mpi":
        return ("Horovod's coordinator may die with the worker (docs/openmpi.md item 14): survive a worker's "
                "death with --allreduce mpi")
    return None


def why_the_run_ends(cfg, lost: list[Role], workers_left: int, ps_up: bool = True) -> str | None:
    """Why losing the workers ``lost`` ends the run, with ``workers_left`` workers left (None: it goes on).
    ``ps_up``: a PS holds the state now (a chain's promoted head does), not a repair under way."""
    if not lost:
        return None
    names = ", ".join(r.label for r in lost)
    reason = unsupported(cfg)
    if reason is None and not cfg.is_async and any(r.index == 0 for r in lost):
        reason = leader_death_unsupported(cfg, ps_up)
    if reason is None and workers_left < cfg.min_workers:
        reason = f"{workers_left} worker(s) left, fewer than --min-workers {cfg.min_workers}"
    return None if reason is None else f"{names} died; {reason}, so the run ends"


# the sync leader's death not survived (psbench chaos reads it: a run it ends broke no promise)
LEADER_PS_DOWN = "the PS was down: the updates buffered through the outage were the leader's (worker0's) alone"


def leader_death_unsupported(cfg, ps_up: bool) -> str | None:
    """Sync: why the leader's death cannot be survived (None: the next worker leads and says Hello to the PS,
    which answers with its weights, so a gradient the dead leader had sent is applied once or not at all;
    hybrid's PS syncs its state with the tail first, ``Hybrid.ps_new_leader``). With the PS down, only where the
    workers train through the outage (stateless: the buffered updates were the leader's)."""
    if not ps_up and cfg.recovery_mode.trains_through_outage:
        return LEADER_PS_DOWN
    return None


def batch_and_lr(cfg, batch_size: int, workers_left: int) -> tuple[int, float]:
    """Each worker's batch and the factor on the learning rate with ``workers_left`` of ``--workers`` (sync,
    ``--elastic-batch``): ``local`` keeps the batch and scales the rate by workers_left / workers (the linear
    scaling rule of "Accurate, Large Minibatch SGD", arXiv 1706.02677); ``global`` keeps the global batch
    (each survivor's batch grows to batch x workers / workers_left, rounded) and the rate. Async and bounded:
    every update is one worker's batch, so neither changes."""
    if cfg.is_async or workers_left >= cfg.workers:
        return batch_size, 1.0
    if cfg.elastic_batch == "global":
        return max(1, round(batch_size * cfg.workers / workers_left)), 1.0
    return batch_size, workers_left / cfg.workers


def survivable(cfg) -> bool:
    """Whether a worker (in sync: other than the leader) may die and the run go on."""
    return unsupported(cfg) is None and cfg.workers > cfg.min_workers


def replaces(cfg) -> bool:
    """Whether a lost worker is replaced (a spare, or a spawned process: see the module docstring)."""
    return cfg.replace_workers and survivable(cfg)


def replacements(roles: list[Role], workers: int) -> list[Role]:
    """The worker roles that bring the world's workers back to ``workers``: new indices above every worker
    left, so that a replacement never leads while an older worker lives; a pure function of the roles the
    repairs agreed on, the same on every survivor."""
    left = [role.index for role in roles if role.kind == "worker"]
    start = max(left, default=-1) + 1
    return [Role("worker", start + k) for k in range(workers - len(left))]


def shuffle_seed(cfg, generation: int, group: list[int]) -> int:
    """The data's shuffle once the group changed: a function of the world's generation and the group's
    workers (the same on every member, a newcomer too, and new with every change of the group)."""
    return cfg.seed + zlib.crc32(f"{generation}:{','.join(map(str, group))}".encode())

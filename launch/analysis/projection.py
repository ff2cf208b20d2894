"""ETTR at a cluster's scale: a seeded discrete-event simulation of failures arriving per node and a
recovery mode's reaction to each, with the closed forms it must agree with where they apply.

The model, per recovery mode (:class:`Recovery`, built from what psbench measured:
launch/experiments/project.py):

- the job trains in steps; a **failure** arrives at one of its nodes (each node's times between
  failures exponential or Weibull with the given shape, renewed at each failure: the node is
  replaced); the whole synchronous job stops for the mode's **outage** (failure to the first update
  applied after it: detection and repair, with a hot spare while one is left, else a spawned
  replacement; a failure within an outage starts it again), plus a **replay** where the mode replays
  what it buffered;
- a mode that resumes from a checkpoint (**rollback**) also loses the work since the newest
  checkpoint, taken every ``interval_s`` of training; a relaxed chain loses up to K updates
  (``lost_s`` per failure, its mean);
- ``overhead`` is the steady share of step time the mode costs without failures (replication,
  checkpoint copies): it is not in ETTR (the time is spent training) but in the effective
  throughput, ETTR x (1 - overhead), and so in the time to train;
- spares: ``spares`` hot standbys; one that took a role is replaced by a spawn ``refill_s`` later
  (infinite: never, a run without ``--refill-spares``).

A failure that arrives during an outage starts it again (a node of the cluster failed), or, ``defer``,
lands at its end and starts another there: psbench's injector does that with a failure aimed at the
PS, which it can kill only once a replacement holds the role (the MTBF study's runs: a kill drawn 0.4 s
into a 2.2 s outage landed as the replacement came up). :func:`replay_arrivals` takes a measured run's
own failure times instead of drawing them, so a prediction and a measurement can be compared run by
run, without the draw's noise.

ETTR is psbench's (launch/analysis/ettr.py): (wall - outages - lost compute) / wall. With exponential
failures at rate L, an outage R and no spares, the expected ETTR has a closed form (renewal reward):
without rollback it is exp(-L R); with a checkpoint every D of training it is
L D exp(-L R) / (exp(L D) - 1) (work is done in segments of D, each retried until it completes
between failures; a failure in an outage starts the outage again). :func:`closed_form` gives it and
the tests check the simulation against it. Young/Daly's interval, sqrt(2 x checkpoint cost x MTBF),
is :func:`young_daly_s`.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from .stats import t_quantile

# arXiv 2410.21680 (Meta's research clusters): a job of 16,384 GPUs sees a failure every 1.8 h, one of
# 131,072 every 14 min; both are about 30,000 GPU-hours per failure (29,491 and 30,583)
PUBLISHED_GPU_MTTF_H = 30_000.0
MIN_FAILURES = 1000  # simulated failures per point, at least
RUNS = 20            # simulated runs per point: the spread across them is the CI's
BURN_IN_MTTFS = 5    # a Weibull node's renewals start this many of its mean lifetimes before the job


@dataclass(frozen=True)
class Target:
    """The cluster a projection is for."""
    gpus: int
    gpus_per_node: int = 8
    gpu_mttf_h: float = PUBLISHED_GPU_MTTF_H  # GPU-hours per failure; a node fails gpus_per_node times as often
    shape: float = 1.0                        # Weibull shape of a node's times between failures (1: exponential)
    spares: int = 0

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    @property
    def node_mttf_s(self) -> float:
        return self.gpu_mttf_h * 3600.0 / self.gpus_per_node

    @property
    def mtbf_s(self) -> float:
        """The job's mean time between failures (any node)."""
        return self.node_mttf_s / self.nodes


@dataclass(frozen=True)
class Recovery:
    """What a mode costs at the target, in seconds of wall time (see the module docstring)."""
    mode: str
    outage_s: float                 # a spawned replacement: failure to the first update after it
    spare_outage_s: float | None = None  # the same with a hot spare (None: the mode gains nothing from one)
    refill_s: float = 0.0           # a spare that took a role is spawned again this much later
    rollback: bool = False          # a failure loses the work since the newest checkpoint
    interval_s: float | None = None  # checkpoint interval, training time
    lost_s: float = 0.0             # work lost per failure apart from a rollback (mean)
    replay_s: float = 0.0           # per failure, after the outage
    overhead: float = 0.0           # steady share of step time
    notes: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Projection:
    ettr: float          # mean over the simulated runs
    ettr_ci: float       # half-width of the 95 % interval of that mean (t over the runs)
    effective: float     # ETTR x (1 - overhead): the share of failure-free throughput the job keeps
    failures: int        # simulated, in all runs
    mtbf_s: float
    horizon_s: float     # of each simulated run


def young_daly_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimal checkpoint interval, sqrt(2 x checkpoint cost x MTBF)."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def closed_form(rec: Recovery, mtbf_s: float) -> float:
    """The expected ETTR with exponential failures of mean ``mtbf_s`` and no spares (module docstring)."""
    lam = 1.0 / mtbf_s
    restart = rec.outage_s + rec.replay_s
    if rec.rollback:
        d = rec.interval_s
        return lam * d * math.exp(-lam * restart) / math.expm1(lam * d)
    if rec.lost_s:
        raise ValueError("no closed form with lost work but no rollback")
    return math.exp(-lam * restart)


class _Failures:
    """The failure times of a job's nodes: each node's own renewal process, merged in time order."""

    def __init__(self, target: Target, rng: np.random.Generator) -> None:
        self.rng, self.shape = rng, target.shape
        # a Weibull of this scale has the node's mean time to failure
        self.scale = target.node_mttf_s / math.gamma(1.0 + 1.0 / target.shape)
        if target.shape == 1.0:  # exponential: the merged process is Poisson, one stream suffices
            self.rate, self.heap = target.nodes / target.node_mttf_s, None
            self.t = 0.0
        else:
            # each node at a random age: its renewals run from well before the job starts (a cluster's
            # nodes are not all new at once; started together, shape < 1 made the first days all infant
            # failures)
            t = -BURN_IN_MTTFS * target.node_mttf_s + np.zeros(target.nodes)
            while (t < 0).any():
                due = t < 0
                t[due] += self.scale * rng.weibull(target.shape, int(due.sum()))
            self.heap = [(float(x), i) for i, x in enumerate(t)]
            heapq.heapify(self.heap)

    def next(self) -> float:
        if self.heap is None:
            self.t += float(self.rng.exponential(1.0 / self.rate))
            return self.t
        t, node = heapq.heappop(self.heap)
        heapq.heappush(self.heap, (t + self.scale * float(self.rng.weibull(self.shape)), node))
        return t


def _one_run(rec: Recovery, target: Target, horizon_s: float, next_failure,
             defer: bool = False) -> tuple[float, int]:
    """One simulated run of ``horizon_s`` whose failures come from ``next_failure()`` (ascending times):
    (ETTR, failures). ``defer``: see the module docstring."""
    spares = target.spares if rec.spare_outage_s is not None else 0
    refills: list[float] = []  # when each spare that took a role is back in the pool
    t, down, lost, n = 0.0, 0.0, 0.0, 0  # t: training resumed here (after the last outage)
    tf = next_failure()
    while tf < horizon_s:
        if rec.rollback:  # checkpoints every interval since the resume: the work since the newest is lost
            done = tf - t
            lost += done - math.floor(done / rec.interval_s) * rec.interval_s
        lost += min(rec.lost_s, tf - t)
        n += 1
        began = start = tf
        while True:  # the outage, started again by every failure within it
            while refills and refills[0] <= start:
                heapq.heappop(refills)
                spares += 1
            if spares:
                spares -= 1
                heapq.heappush(refills, start + rec.refill_s)
                outage = rec.spare_outage_s
            else:
                outage = rec.outage_s
            end = start + outage + rec.replay_s
            tf = next_failure()
            if tf >= end:
                break
            n += 1
            start = end if defer else tf
        end = min(end, horizon_s)
        down += end - began
        t = end
    return max(0.0, (horizon_s - down - lost) / horizon_s), n


def project(rec: Recovery, target: Target, seed: int = 0, runs: int = RUNS,
            min_failures: int = MIN_FAILURES, horizon_s: float | None = None, defer: bool = False) -> Projection:
    """ETTR of ``rec`` at ``target``: ``runs`` simulated runs, long enough for ``min_failures`` failures
    in all (62.5 mean times between failures each, at least), from ``seed``. ``horizon_s``: runs of
    this length instead (a measured run's), as many as ``min_failures`` takes. ``defer``: failures
    during an outage land at its end (the module docstring)."""
    mtbf = target.mtbf_s
    if horizon_s is not None:
        horizon, runs = horizon_s, max(runs, math.ceil(1.25 * min_failures * mtbf / horizon_s))
    else:
        horizon = max(50.0, 1.25 * min_failures / runs) * mtbf
    rng = np.random.default_rng(seed)
    results = [_one_run(rec, target, horizon, _Failures(target, rng).next, defer) for _ in range(runs)]
    values = np.array([e for e, _ in results])
    half = float(t_quantile(runs) * values.std(ddof=1) / math.sqrt(runs)) if runs > 1 else float("nan")
    mean = float(values.mean())
    return Projection(ettr=mean, ettr_ci=half, effective=mean * (1.0 - rec.overhead),
                      failures=int(sum(n for _, n in results)), mtbf_s=mtbf, horizon_s=horizon)


def replay_arrivals(rec: Recovery, arrivals: list[float], horizon_s: float, spares: int = 0,
                    defer: bool = True) -> float:
    """The ETTR the model gives a run of ``horizon_s`` whose failures came at ``arrivals`` (seconds
    since training started, as a measured run recorded them), with ``spares`` hot spares."""
    times = iter(sorted(arrivals))
    return _one_run(rec, Target(gpus=1, gpus_per_node=1, spares=spares), horizon_s,
                    lambda: next(times, math.inf), defer)[0]

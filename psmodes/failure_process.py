"""Failures as a process: ``--failures TARGET:DIST:PARAMS[:KIND]``, failures that arrive at random
with a mean time between them, instead of one scheduled by hand.

- ``ps:exp:30s``: the PS fails with exponential inter-arrival times of mean 30 s (a Poisson process);
- ``replica:weibull:2m:0.7``: Weibull inter-arrival times of scale 2 min and shape 0.7 (shape < 1:
  failures come in bursts, as production clusters see them; 1 is exponential);
- ``any:exp:20s:hang``: KIND ``kill`` (SIGKILL, the default) or ``hang`` (SIGSTOP until fenced).

TARGET is ``ps``, ``replica`` (the chain's tail), ``evaluator``, ``spare`` (a standby that took no
role yet), ``worker`` (the last worker still alive, never the leader: where the run's workers are
elastic, psmodes/elastic.py; a failure due when only the leader is left is skipped and recorded) or
``any`` (one of those the run has, drawn per failure).

The arrival times are drawn from ``--failure-seed`` (default: the run's seed), one stream per spec
and another for the targets of ``any``, so every mode of a sweep meets the same arrival times
(common random numbers: the differences are the modes'). The draw covers ``--duration`` and is
recorded, resolved, in ``config.json`` (``failure_schedule``) and ``summary.json``; the injector
carries each failure out at its time like a ``--kill-ps 12.5s`` (launch/faultkinds/plan.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import elastic
from .durations import parse_duration
from .errors import ConfigError

TARGETS = ("ps", "replica", "evaluator", "spare", "worker", "any")
DISTRIBUTIONS = ("exp", "weibull")
SYNTAX = "TARGET:exp:MEAN[:KIND] or TARGET:weibull:SCALE:SHAPE[:KIND], e.g. ps:exp:30s"


@dataclass(frozen=True)
class FailureProcess:
    target: str
    distribution: str
    scale_s: float     # exp: the mean; weibull: the scale
    shape: float       # weibull's shape (exp: 1)
    kind: str
    spec: str

    @property
    def mean_s(self) -> float:
        """The mean time between failures (a Weibull's: scale x Gamma(1 + 1/shape))."""
        return self.scale_s * math.gamma(1.0 + 1.0 / self.shape)


def parse(spec: str) -> FailureProcess:
    """One ``--failures`` spec; ConfigError (one line) for anything else."""
    parts = [p.strip() for p in str(spec).split(":")]
    if len(parts) < 3:
        raise ConfigError(f"--failures {spec!r}: write {SYNTAX}")
    target, dist = parts[0], parts[1]
    if target not in TARGETS:
        raise ConfigError(f"--failures {spec!r}: unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    if dist not in DISTRIBUTIONS:
        raise ConfigError(f"--failures {spec!r}: unknown distribution {dist!r}; choose exp or weibull ({SYNTAX})")
    n_params = 1 if dist == "exp" else 2
    params, rest = parts[2:2 + n_params], parts[2 + n_params:]
    if len(params) < n_params or len(rest) > 1:
        raise ConfigError(f"--failures {spec!r}: write {SYNTAX}")
    scale = parse_duration(params[0], f"--failures {spec!r}: the {'mean' if dist == 'exp' else 'scale'}")
    shape = 1.0
    if dist == "weibull":
        try:
            shape = float(params[1])
        except ValueError:
            shape = -1.0
        if not shape > 0:
            raise ConfigError(f"--failures {spec!r}: the Weibull shape must be a positive number, got {params[1]!r}")
    kind = rest[0] if rest else "kill"  # which kinds a process may draw is the launcher's registry's (launch/faultkinds/)
    return FailureProcess(target, dist, scale, shape, kind, str(spec))


def parse_all(specs: list[str]) -> list[FailureProcess]:
    return [parse(part) for spec in specs for part in str(spec).split(",") if part.strip()]


def targets_of(cfg) -> list[str]:
    """The roles a failure may hit in this run (what ``any`` draws from)."""
    out = ["ps"]
    if cfg.n_replicas:
        out.append("replica")
    if cfg.evaluator:
        out.append("evaluator")
    if cfg.spares:
        out.append("spare")
    if elastic.survivable(cfg):
        out.append("worker")
    return out


def draw(cfg) -> list[dict]:
    """The failures of a run, in time order: ``{"t_s", "target", "kind", "spec"}`` (seconds since
    training started); ConfigError for a process the run cannot have."""
    import numpy as np

    processes = parse_all(cfg.failures)
    if not processes:
        return []
    if not cfg.duration_s:
        raise ConfigError("--failures needs --duration: failures arrive on the run's clock (a --steps run has no "
                          "fixed length)")
    present = targets_of(cfg)
    for p in processes:
        if p.target not in present and p.target != "any":
            need = {"replica": "--mode chain or hybrid", "evaluator": "an evaluator (drop --no-evaluator)",
                    "spare": "--spares N", "worker": f"elastic workers, which this run's are not: "
                    f"{elastic.unsupported(cfg) or f'--workers {cfg.workers} leaves none above --min-workers'}"
                    }[p.target]
            raise ConfigError(f"--failures {p.spec}: a {p.target} failure needs {need}")
    seed = cfg.seed if cfg.failure_seed is None else cfg.failure_seed
    out = []
    for i, p in enumerate(processes):
        arrivals = np.random.default_rng([seed, i, 0])   # the same times in every mode
        targets = np.random.default_rng([seed, i, 1])    # any: which role, its own stream
        t = 0.0
        while True:
            gap = arrivals.exponential(p.scale_s) if p.distribution == "exp" else p.scale_s * arrivals.weibull(p.shape)
            t += float(gap)
            if t >= cfg.duration_s:
                break
            target = p.target if p.target != "any" else present[int(targets.integers(len(present)))]
            out.append({"t_s": round(t, 3), "target": target, "kind": p.kind, "spec": p.spec})
    return sorted(out, key=lambda f: f["t_s"])

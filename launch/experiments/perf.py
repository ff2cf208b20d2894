"""``psbench perf``: what fault tolerance costs, measured side by side in one session.

    psbench perf                       # the full set (about an hour on 2 cores), reports/perf/report.md
    psbench perf --quick --out DIR     # a small version of every section (a few minutes; the tests)
    psbench perf --from RUNS_DIR       # re-render the report from a finished (or cut) measurement

Sections, each a set of real runs (mpirun, ULFM, real SIGKILLs):

- **throughput**: ``--mode none`` against a plain Horovod trainer with no PS
  (:mod:`benchmarks.horovod_reference`), and every recovery mode against
  ``none``, on the same model, batch, workers and data with no failure. The
  variants run interleaved, repetition by repetition, so drift of the machine
  hits all of them alike; each ratio is taken within a repetition (paired)
  and reported as the median and range over the repetitions.
- **scale**: the same paired comparison (the Horovod reference, ``none``,
  strict chain) at more workers (4) and bigger models (the ``synthetic`` MLP
  at 10M and 100M parameters), so the report shows how the PS's overhead
  grows with the workers and with the bytes each update moves.
- **failures**: per mode and kind of fault, one run with several faults of
  the PS: SIGKILLs, hangs (SIGSTOP, fenced after ``--suspect-after``), slow
  phases (ridden out) and SIGKILLs sent from outside psbench (unplanned);
  detection latency (fault to the first rank that noticed: a hang, its
  suspicion), recovery (fault to the first applied step after it), worker
  idle seconds, lost steps.
- **scaling**: the ``synthetic`` MLP from about 1M to 100M parameters: the
  PS's median time per update (receive, apply, send) and the checkpoint write
  time, against the floor ``bytes moved / memory bandwidth`` (bandwidth
  measured here with a large numpy copy).
- **memory**: peak RSS per role; the stateless leader's buffer under each
  replay policy (``paper``/``mean`` aggregate in place, ``sequential``/
  ``staleness`` are bounded by ``--max-buffered``).
- **CPU**: every rank's CPU time against its wall time, to show that ranks
  waiting on MPI do not spin a core.

Evaluation is off in every run (``--no-evaluator``): an evaluator rank would
compete for the cores with the workers, and the reference trainer has none.
Everything measured is written to ``<runs>/perf.json`` after each run, so a
measurement that dies leaves what it recorded; ``--from`` renders it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import fmnist, registry
from psmodes.atomic import write_text_atomic
from psmodes.config import ConfigError, RunConfig
from psmodes.events import read_run_events
from psmodes.suspicion import COLD_START_S

from ..analysis.records import records_json
from ..analysis.machine import machine_info
from ..analysis.perfreport import write_perf_report
from ..driver.mpirun import find_mpirun, mpirun_env, purge_leftovers
from ..driver.runner import INTERRUPTED, raise_interrupt, run_job, stop_group
from ..faultkinds import PERF_KINDS
from .chaos import OutsideKiller

# (label, RunConfig fields) of the no-failure throughput variants; "none" is the baseline
THROUGHPUT = [
    ("none", {}),
    ("checkpoint K=100", {"mode": "checkpoint", "checkpoint_every": 100}),
    ("checkpoint K=10", {"mode": "checkpoint", "checkpoint_every": 10}),
    ("chain K=1 R=1", {"mode": "chain", "replicate_every": 1, "replicas": 1}),
    ("chain K=1 R=2", {"mode": "chain", "replicate_every": 1, "replicas": 2}),
    ("chain K=100 R=1", {"mode": "chain", "replicate_every": 100, "replicas": 1}),
    ("chain K=100 R=2", {"mode": "chain", "replicate_every": 100, "replicas": 2}),
    ("stateless", {"mode": "stateless"}),
    ("hybrid K=100 R=1", {"mode": "hybrid", "replicate_every": 100, "replicas": 1}),
    # what the pipelined exchange (the default where it applies) buys: the same runs, blocking
    ("none, blocking", {"exchange": "blocking"}),
    ("chain K=1 R=1, blocking", {"mode": "chain", "replicate_every": 1, "replicas": 1, "exchange": "blocking"}),
    # what the gradient mailbox (psmodes/mailbox.py, the default on one host) buys: pipelined, over MPI
    ("none, no mailbox", {"mailbox": False}),
    # what the PS's idle scheduling class (psmodes/priority.py, not the default) buys none and costs a strict chain
    ("none, PS idle-class", {"ps_priority": "idle"}),
    ("chain K=1 R=1, PS idle-class", {"mode": "chain", "replicate_every": 1, "replicas": 1, "ps_priority": "idle"}),
    # what a core of its own for each worker (--pin-workers auto, psmodes/priority.py, not the default) buys
    ("none, workers pinned", {"pin_workers": "auto"}),
    ("chain K=1 R=2, workers pinned", {"mode": "chain", "replicate_every": 1, "replicas": 2, "pin_workers": "auto"}),
]
# --quick's: the baseline and a mode with a replica rank (every mode's runs are the tests' elsewhere)
QUICK_VARIANTS = ("none", "chain K=1 R=1")
QUICK_FAILURE_MODES = ("checkpoint",)  # --quick's failure section: the tests kill every mode elsewhere
FAILURE_MODES = {"checkpoint": {}, "chain": {"replicas": 2}, "stateless": {},  # mode -> its options
                 "hybrid": {"replicas": 2, "replicate_every": 100}}
FAILURE_KINDS = tuple(PERF_KINDS)  # the kinds measured (launch/faultkinds/: perf_repairs); outside: an unplanned SIGKILL
SLOW_S = 3.0  # each slow phase of the failure runs, at the default --slow-factor
# the worker failure rows (issue #46; psmodes/elastic.py): (fault, leader or not, replacement). Three workers,
# sync over psbench's MPI allreduce and the blocking exchange (hybrid's leader row: the PS's forced state sync
# with the tail is in it)
WORKER_ROWS = (("kill", False, "spare"), ("kill", False, "spawn"), ("kill", True, "spawn"), ("hang", False, "spare"))
MEMORY_POLICIES = ("paper", "mean", "sequential", "staleness")
# the throughput at scale: (label, the run's workload and workers) against the plan's benchmark at its
# workers in the throughput section; the variants compared at each point, with the reference
SCALE_POINTS = [("4 workers", {"workers": 4}),
                ("synthetic 10M, 2 workers", {"benchmark": "synthetic", "model_params": 10_000_000, "workers": 2}),
                ("synthetic 100M, 2 workers", {"benchmark": "synthetic", "model_params": 100_000_000, "workers": 2})]
QUICK_SCALE_POINTS = [("synthetic 1M, 4 workers", {"benchmark": "synthetic", "model_params": 1_000_000, "workers": 4})]
SCALE_VARIANTS = ("none", "chain K=1 R=1")
QUICK_SCALE_VARIANTS = ("none",)
SCALE_UPDATE_BYTES = 8e9  # a scale point's steps: about this many gradient bytes, within [MIN_SCALE_STEPS, --steps]
MIN_SCALE_STEPS = 30
SECTIONS = ("throughput", "scale", "failures", "scaling", "memory")
PAUSE_S = 3.0  # between two measured runs (--quick's figures are not compared: 0.5 s)


@dataclass
class Plan:
    reps: int = 3
    steps: int = 800
    workers: int = 2
    sizes: list[int] = field(default_factory=lambda: [1_000_000, 10_000_000, 100_000_000])
    kills: int = 4
    kill_gap_s: float = 8.0
    pause_s: float = PAUSE_S
    probe_s: float = 10.0           # the machine's speed probe before the runs (cpu_speed)
    failure_kinds: list[str] = field(default_factory=lambda: list(FAILURE_KINDS))
    max_buffered: int = 32
    variants: list[str] = field(default_factory=lambda: [v for v, _ in THROUGHPUT])
    scale_points: list = field(default_factory=lambda: [list(p) for p in SCALE_POINTS])
    scale_variants: list[str] = field(default_factory=lambda: list(SCALE_VARIANTS))
    policies: list[str] = field(default_factory=lambda: list(MEMORY_POLICIES))
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    data_dir: str | None = None
    quick: bool = False
    benchmark: str = "fmnist-cnn"   # the throughput, failure and memory runs' workload
    optimizer: str | None = None    # the PS's optimizer in every run (None: the benchmark's)


def add_perf_parser(sub) -> None:
    p = sub.add_parser("perf", help="the price of fault tolerance, measured side by side (reports/perf/report.md)",
                       description="Throughput of every mode against plain Horovod and against --mode none, failure "
                                   "costs, PS time per update against the memory-bandwidth floor, memory and CPU "
                                   "per rank. Real runs, one after another.")
    p.add_argument("--reps", type=int, help="repetitions of the throughput variants (default 3; --quick 1)")
    p.add_argument("--steps", type=int, help="PS updates per throughput run (default 800; --quick 60)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sizes", help="synthetic model sizes, comma-separated (default 1e6,1e7,1e8)")
    p.add_argument("--kills", type=int, help="PS kills per mode in the failure runs (default 4; --quick 1)")
    p.add_argument("--faults", help=f"the failure section's kinds of fault, comma-separated (default all: "
                                    f"{', '.join(FAILURE_KINDS)})")
    p.add_argument("--max-buffered", type=int, default=32, help="the bound of the sequential/staleness buffers")
    p.add_argument("--data-dir", help="Fashion-MNIST folder (else $PSBENCH_DATA, else Debian's package)")
    p.add_argument("--benchmark", default="fmnist-cnn",
                   help="the workload of the throughput, failure and memory runs and of the Horovod reference "
                        "(the scaling runs are the synthetic MLP): any psbench run --benchmark")
    p.add_argument("--optimizer", help="the PS's optimizer in every run, the scaling runs included: sgd, momentum "
                                       "or adamw (default: the benchmark's); its state counts in the memory floor")
    p.add_argument("--variants", help="comma-separated throughput variants beside the Horovod reference and none, to decide "
                                      "one ratio with more --reps (default all: "
                                      f"{', '.join(slug(v) for v, _ in THROUGHPUT)})")
    p.add_argument("--only", help=f"comma-separated sections to measure (default all: {', '.join(SECTIONS)})")
    p.add_argument("--quick", action="store_true", help="a small version of every section (minutes, not half an hour)")
    p.add_argument("--out", help="report folder (default reports/perf)")
    p.add_argument("--runs", help="folder of the runs and perf.json (default runs/perf-<time>)")
    p.add_argument("--from", dest="from_dir", metavar="RUNS_DIR", help="render the report from this perf.json folder")


def plan_from_args(a: argparse.Namespace) -> Plan:
    plan = Plan(workers=a.workers, max_buffered=a.max_buffered, data_dir=a.data_dir, quick=a.quick,
                benchmark=a.benchmark, optimizer=a.optimizer)
    try:  # the workload and optimizer, checked as psbench run checks them
        RunConfig(benchmark=plan.benchmark, optimizer=plan.optimizer, steps=1).validate()
    except ConfigError as exc:
        raise ConfigError(f"psbench perf: {exc}") from None
    if a.quick:
        plan.reps, plan.steps, plan.kills, plan.kill_gap_s = 1, 60, 1, 6.0
        plan.pause_s, plan.probe_s = 0.5, 3.0
        plan.sizes = [200_000, 2_000_000]
        plan.variants, plan.policies = list(QUICK_VARIANTS), ["paper", "sequential"]
        plan.scale_points, plan.scale_variants = [list(p) for p in QUICK_SCALE_POINTS], list(QUICK_SCALE_VARIANTS)
        plan.failure_kinds = ["kill", "hang"]  # the hang for checkpoint only (see Perf.failures)
    plan.reps = _count(a.reps, plan.reps, "--reps")
    plan.steps = _count(a.steps, plan.steps, "--steps")
    plan.kills = _count(a.kills, plan.kills, "--kills")
    _count(plan.workers, 1, "--workers")
    _count(plan.max_buffered, 1, "--max-buffered")
    if plan.workers < 2:
        raise ConfigError("--workers must be at least 2 (the throughput runs compare data-parallel training)")
    if a.faults:
        plan.failure_kinds = [k.strip() for k in a.faults.split(",") if k.strip()]
        unknown = [k for k in plan.failure_kinds if k not in FAILURE_KINDS]
        if unknown or not plan.failure_kinds:
            raise ConfigError(f"--faults {a.faults!r}: choose from {', '.join(FAILURE_KINDS)}")
    if a.only:
        plan.sections = [s.strip() for s in a.only.split(",") if s.strip()]
        unknown = [s for s in plan.sections if s not in SECTIONS]
        if unknown or not plan.sections:
            raise ConfigError(f"--only {a.only!r}: choose from {', '.join(SECTIONS)}")
    if a.variants:
        by_slug = {slug(label): label for label, _ in THROUGHPUT}
        wanted = [v.strip() for v in a.variants.split(",") if v.strip()]
        if not wanted or any(v not in by_slug for v in wanted):
            raise ConfigError(f"--variants {a.variants!r}: choose from {', '.join(by_slug)}")
        plan.variants = ["none"] + [by_slug[v] for v in wanted if v != "none"]  # the ratios' baseline
    if a.sizes:
        try:
            plan.sizes = [int(float(x)) for x in a.sizes.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--sizes {a.sizes!r}: give parameter counts separated by commas, e.g. 1e6,1e7") from None
        if not plan.sizes or min(plan.sizes) < 1000:
            raise ConfigError(f"--sizes {a.sizes!r}: every size must be at least 1000 parameters")
    return plan


def _count(value, default: int, name: str) -> int:
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


# ---- machine figures
def memory_bandwidth(nbytes: int = 256 << 20, reps: int = 5) -> float:
    """Bytes per second of a single-threaded numpy copy (read + write counted), best of ``reps``."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


# one core's GFLOP/s (argv: the core, seconds, seconds a sample): a 256x256 float32 matmul, single-threaded,
# the samples printed as one JSON list at the end
_SPEED_PROBE = """
import json, os, sys, time
import numpy as np
os.sched_setaffinity(0, {int(sys.argv[1])})
a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
out, end = [], time.time() + float(sys.argv[2])
while time.time() < end:
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < float(sys.argv[3]):
        a @ a
        n += 1
    out.append(n * 2 * 256 ** 3 / (time.perf_counter() - t0) / 1e9)
print(json.dumps(out))
"""


def cpu_speed(seconds: float = 10.0, sample_s: float = 0.5) -> dict | None:
    """Every core's speed over ``seconds``, all at once, before the runs: GFLOP/s samples of a
    single-threaded matmul, every ``sample_s``. On this project's shared VMs a vCPU's speed halved and
    came back within seconds with no steal reported in /proc/stat (2026-12-05, AMD EPYC: 15-36
    GFLOP/s on each core, phases of 2-8 s): runs of tens of seconds carry that, and the report says how
    much the machine moved. None where the probe could not run."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cores = sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", _SPEED_PROBE, str(c), str(seconds), str(sample_s)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
             for c in cores]
    samples = []
    try:
        for proc in procs:
            samples += json.loads(proc.communicate(timeout=seconds + 60)[0])
    except (subprocess.TimeoutExpired, ValueError):
        return None
    finally:  # Ctrl-C or SIGTERM too: no probe outlives the session
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if not samples:
        return None
    return {"cores": len(cores), "seconds": seconds, "sample_s": sample_s, "min": min(samples),
            "median": float(np.median(samples)), "max": max(samples)}


def disk_bandwidth(folder: Path, nbytes: int = 128 << 20) -> float:
    """Bytes per second of a buffered write + fsync of ``nbytes`` into ``folder``, best of 2."""
    data = np.ones(nbytes, dtype=np.uint8).tobytes()
    path = folder / ".disk-probe"
    best = float("inf")
    try:
        for _ in range(2):
            t0 = time.perf_counter()
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            best = min(best, time.perf_counter() - t0)
    finally:
        path.unlink(missing_ok=True)
    return nbytes / best


# ---- runs
class Perf:
    def __init__(self, plan: Plan, runs: Path) -> None:
        self.plan, self.runs = plan, runs
        self.results: dict = {"plan": plan.__dict__, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              "throughput": [], "scale": [], "failures": [], "scaling": [], "memory": []}

    def save(self) -> None:
        write_text_atomic(self.runs / "perf.json", records_json(self.results))

    def base(self, **fields) -> RunConfig:
        p = self.plan
        cfg = RunConfig(benchmark=p.benchmark, optimizer=p.optimizer, workers=p.workers, evaluator=False,
                        data_dir=p.data_dir)
        for k, v in fields.items():
            setattr(cfg, k, v)
        return cfg

    def run(self, cfg: RunConfig, name: str) -> dict:
        cfg.run_dir = str((self.runs / name).resolve())
        cfg.validate()
        print(f"[perf] {name} ...", file=sys.stderr, flush=True)
        summary = run_job(cfg, quiet=True)
        if summary.get("exit_reason") == INTERRUPTED:  # Ctrl-C or SIGTERM ends the session, not one run
            raise KeyboardInterrupt
        if not summary.get("completed"):
            print(f"[perf] {name}: {summary.get('exit_reason')}", file=sys.stderr, flush=True)
        return summary

    def reference(self, name: str, seed: int, steps: int, workers: int, benchmark: str,
                  model_params: int | None = None) -> dict:
        """The plain Horovod trainer under the same mpirun placement as psbench's ranks."""
        p = self.plan
        folder = self.runs / name
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "result.json"
        cmd = [find_mpirun() or "mpirun", "-np", str(workers), "--oversubscribe", "--bind-to", "none",
               "-x", "PYTHONUNBUFFERED=1", "-x", "PATH", "-x", "PYTHONPATH", sys.executable, "-m",
               "benchmarks.horovod_reference", "--benchmark", benchmark, "--steps", str(steps), "--seed", str(seed),
               "--out", str(out)]
        if model_params:
            cmd += ["--model-params", str(model_params)]
        if p.optimizer:
            cmd += ["--optimizer", p.optimizer]
        if p.data_dir and registry.get(benchmark).needs_data:
            cmd += ["--data-dir", p.data_dir]
        (folder / "command.txt").write_text(" ".join(cmd) + "\n")
        print(f"[perf] {name} ...", file=sys.stderr, flush=True)
        purge_leftovers()
        with open(folder / "mpirun.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=mpirun_env(), start_new_session=True)
            try:
                proc.wait(timeout=max(300, steps * 0.5))
            except subprocess.TimeoutExpired:
                pass
            finally:
                stop_group(proc)
        if proc.returncode == 2:  # the trainer refused its placement with one line (e.g. GPUs shared under NCCL)
            said = [ln for ln in (folder / "mpirun.log").read_text(errors="replace").splitlines() if "horovod_reference:" in ln]
            if said:
                raise ConfigError(said[0].split("horovod_reference: ", 1)[1])
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the Horovod reference trainer failed (exit {proc.returncode}); see {folder}/mpirun.log")
        return json.loads(out.read_text())

    def paired_run(self, label: str, fields: dict | None, rep: int, steps: int, name: str, **workload) -> dict:
        """One throughput run of ``label`` (``fields`` None: the Horovod reference) at the plan's workload
        or ``workload`` (benchmark, model_params, workers): samples/s, CPU, the PS's and the leader's timing."""
        p = self.plan
        if fields is None:
            ref = self.reference(name, rep, steps, workload.get("workers", p.workers),
                                 workload.get("benchmark", p.benchmark), workload.get("model_params"))
            it = ref.get("iteration_s") or []
            return {"variant": "reference", "rep": rep, "samples_per_s": ref["samples_per_s"],
                    "leader": {"compute_s": ref.get("compute_s"), "allreduce_s": ref.get("sync_step_s"),
                               **_tail(it)},
                    "usage": {f"worker{i}": u for i, u in enumerate(ref["usage"])}}
        cfg = self.base(steps=steps, seed=rep, **workload, **fields)
        if not registry.get(cfg.benchmark).needs_data:
            cfg.data_dir = None
        s = self.run(cfg, name)
        evs = _events(Path(cfg.run_dir), ("step", "done"))
        steps_ev = [e for e in evs if e["ev"] == "step" and e["who"] == "worker0"]
        split = {k: float(np.median([e[k] for e in steps_ev if k in e])) if steps_ev else None
                 for k in ("compute_s", "allreduce_s", "exchange_s")}
        split.update(_tail(np.diff([e["t"] for e in steps_ev])))
        done = {e["who"]: e.get("ctrl_wait_s") for e in evs if e["ev"] == "done"}
        split["ctrl_s"], split["ctrl_wait_s"] = done.get("worker0"), done.get("worker1")  # the header's cost
        return {"variant": label, "rep": rep, "samples_per_s": s.get("samples_per_s"), "completed": s.get("completed"),
                "usage": s.get("usage"), "ps_timing": s.get("ps_timing"), "leader": split}

    # ---- sections
    def throughput(self) -> None:
        p = self.plan
        variants = [("reference", None)] + [(label, f) for label, f in THROUGHPUT if label in p.variants]
        for rep in range(p.reps):
            # each repetition in its own order: no variant always runs right after another (_ordered)
            for label, fields in _ordered(variants, rep):
                time.sleep(p.pause_s)  # the previous job's processes are gone, the machine settles
                self.results["throughput"].append(self.paired_run(label, fields, rep, p.steps, f"{slug(label)}-r{rep}"))
                self.save()

    def scale(self) -> None:
        """The throughput comparison at more workers and bigger models, paired within each repetition."""
        p = self.plan
        variants = [("reference", None)] + [(label, f) for label, f in THROUGHPUT if label in p.scale_variants]
        for point, workload in p.scale_points:
            steps = scale_steps(p.steps, workload.get("model_params"), workload.get("workers", p.workers), p.workers)
            # a 100M model's exchange takes seconds on 2 busy cores: the safety net is the scaling runs' one
            slow = {"peer_timeout_s": 300.0} if (workload.get("model_params") or 0) >= 10_000_000 else {}
            for rep in range(p.reps):
                for label, fields in _ordered(variants, rep):
                    time.sleep(p.pause_s)
                    run = self.paired_run(label, None if fields is None else {**fields, **slow}, rep, steps,
                                          f"scale-{slug(point)}-{slug(label)}-r{rep}", **workload)
                    self.results["scale"].append({"point": point, "steps": steps, **workload, **run})
                    self.save()

    def failures(self) -> None:
        p = self.plan
        for kind in p.failure_kinds:
            # a hang within a replacement's cold start is suspected only once it has passed (psmodes/suspicion.py):
            # measured here is a hung PS that was answering, so each hang comes after the previous one's cold start
            gap = p.kill_gap_s + (COLD_START_S + RunConfig().suspect_after_s if kind == "hang" else 0.0)
            times = [round(5 + i * gap, 1) for i in range(p.kills)]
            for (mode, extra), repair in [(m, r) for m in FAILURE_MODES.items() for r in PERF_KINDS[kind].perf_repairs]:  # a spawned replacement, or a spare too
                if p.quick and mode not in QUICK_FAILURE_MODES:
                    continue
                scheduled = PERF_KINDS[kind].perf_schedule(times, SLOW_S)
                # a spare per fault: each repair takes one (no spare is spawned again meanwhile)
                spares = p.kills if repair == "spare" else 0
                cfg = self.base(mode=mode, seed=0, duration_s=times[-1] + p.kill_gap_s, restart_delay_s=0.0,
                                spares=spares, **scheduled, **extra)
                name = f"failures-{mode}" + ("" if kind == "kill" else f"-{kind}") + ("-spares" if spares else "")
                killer = OutsideKiller(self.runs / name, times if kind == "outside" else [], cfg.resolved_deadline())
                if kind == "outside":
                    killer.start()
                try:
                    s = self.run(cfg, name)
                finally:
                    killer.stop.set()
                self.results["failures"].append({
                    "mode": mode, "kind": kind, "repair": repair, "run": name,
                    "completed": s.get("completed"), "exit_reason": s.get("exit_reason"),
                    "kills": len(s.get("kills") or []), "faults": len(s.get("faults") or []),
                    "detections": [d["latency_s"] for d in s.get("detections") or []],
                    "recoveries": s.get("recoveries") or [], "usage": s.get("usage"),
                    "unplanned": sum(1 for f in s.get("faults") or [] if not f.get("planned", True))})
                self.save()
        self.worker_failures()

    def worker_failures(self) -> None:
        """Per mode, a worker killed (the last one or the leader) or hung, ``kills`` times, each replaced by a
        spare or a spawned process (WORKER_ROWS): the seconds from each fault to the group training on short
        (its regroup) and to the replacement's joining it, with the run's ETTR."""
        p = self.plan
        for mode, extra in FAILURE_MODES.items():
            if p.quick and mode not in QUICK_FAILURE_MODES:
                continue
            for kind, leader, repair in WORKER_ROWS[:1] if p.quick else WORKER_ROWS:  # quick: a killed worker, a spare
                if kind not in p.failure_kinds:
                    continue
                gap = p.kill_gap_s + (COLD_START_S + RunConfig().suspect_after_s if kind == "hang" else 0.0)
                # the leader's: each kill takes the worker that leads then (worker0, then 1, 2: a replacement
                # has a new index above them), at most three of the run's --workers 3
                n = min(p.kills, 3) if leader else p.kills
                times = [round(5 + i * gap, 1) for i in range(n)]
                specs = [f"{t}s" + (f"@worker{i}" if leader else "") for i, t in enumerate(times)]
                cfg = self.base(mode=mode, seed=0, workers=3, allreduce="mpi", exchange="blocking",
                                duration_s=times[-1] + p.kill_gap_s, restart_delay_s=0.0,
                                spares=n if repair == "spare" else 0,
                                **{f"{kind}_worker": specs}, **extra)
                name = f"workers-{mode}-{kind}" + ("-leader" if leader else "") + f"-{repair}"
                s = self.run(cfg, name)
                faults = sorted(k["t_s"] for k in s.get("faults") or [] if str(k.get("role", "")).startswith("worker"))
                regroups = s.get("regroups") or []
                after = lambda t, joined: next((g["t_s"] - t for g in regroups  # noqa: E731
                                                if g["t_s"] >= t and bool(g.get("joined")) == joined), None)
                self.results.setdefault("worker_failures", []).append({
                    "mode": mode, "kind": kind, "leader": leader, "repair": repair, "run": name,
                    "completed": s.get("completed"), "exit_reason": s.get("exit_reason"), "faults": len(faults),
                    "short_s": [x for x in (after(t, False) for t in faults) if x is not None],
                    "replaced_s": [x for x in (after(t, True) for t in faults) if x is not None],
                    "ettr": s.get("ettr")})
                self.save()

    def scaling(self) -> None:
        p = self.plan
        self.results["memory_bandwidth_Bps"] = memory_bandwidth()
        self.results["disk_bandwidth_Bps"] = disk_bandwidth(self.runs)
        self.save()
        for size in p.sizes:
            steps = int(min(200, max(12, 2e8 / size)))
            cfg = self.base(benchmark="synthetic", model_params=size, workers=1, steps=steps, mode="checkpoint",
                            checkpoint_every=max(1, steps // 2), seed=0, data_dir=None, peer_timeout_s=300.0)
            s = self.run(cfg, f"scaling-{size}")
            events = _events(Path(cfg.run_dir), ("checkpoint", "checkpoint_start"))
            writes = [e["write_s"] for e in events if e["ev"] == "checkpoint" and e["version"] > 0]
            copies = [e["copy_s"] for e in events if e["ev"] == "checkpoint_start"]
            self.results["scaling"].append({"params": size, "completed": s.get("completed"), "ps_timing": s.get("ps_timing"),
                                            "optimizer": cfg.optimizer,
                                            "checkpoint_write_s": float(np.median(writes)) if writes else None,
                                            "checkpoint_copy_s": float(np.median(copies)) if copies else None,
                                            "checkpoint_bytes": _ckpt_bytes(events), "usage": s.get("usage")})
            self.save()

    def memory(self) -> None:
        p = self.plan
        delay = 3.0 if p.quick else 8.0
        for policy in p.policies:
            cfg = self.base(mode="stateless", replay=policy, max_buffered=p.max_buffered, seed=0,
                            duration_s=delay + (7 if p.quick else 14), kill_ps=["3s" if p.quick else "4s"],
                            restart_delay_s=delay)
            s = self.run(cfg, f"memory-{policy}")
            handovers = _events(Path(cfg.run_dir), ("handover",))
            self.results["memory"].append({
                "policy": policy, "completed": s.get("completed"), "usage": s.get("usage"),
                "buffered": sum(h["buffered"] for h in handovers), "dropped": sum(h["dropped"] for h in handovers),
                "vectors": max([h["vectors"] for h in handovers], default=0), "numel": _numel(Path(cfg.run_dir))})
            self.save()


def _tail(step_s) -> dict:
    """The median step and the mean one: their ratio is the slow-step tail that samples/s carries and
    a median hides (on this VM, bursts of steps twice the median lasting under a second)."""
    if not len(step_s):
        return {"step_s": None, "mean_step_s": None}
    return {"step_s": float(np.median(step_s)), "mean_step_s": float(np.mean(step_s))}


def slug(label: str) -> str:
    return label.lower().replace("=", "").replace(",", "").replace(" ", "-")


def _ordered(variants: list, rep: int) -> list:
    """Repetition ``rep``'s order of the variants: a permutation seeded by ``rep``, so that no
    variant runs right after the same one every time. Rotating the list (the order before) kept every
    variant's neighbours: `none` ran right after the Horovod reference in 3 of 4 repetitions, and the
    run after the reference is often the slowest of its repetition (2377 samples/s after 3391, the
    others 2700-3250; 3607 after 4875, the others 3230-4540; 2026-12-04), so none / Horovod read
    0.738 and every mode / none 1.03-1.16 in that session."""
    order = list(variants)
    random.Random(rep).shuffle(order)
    return order


def scale_steps(steps: int, model_params: int | None, workers: int, base_workers: int) -> int:
    """A scale point's updates: a bigger model takes about SCALE_UPDATE_BYTES of gradients (a 100M
    model's step takes seconds here), more workers proportionally fewer steps than ``--steps``."""
    if model_params:
        return int(min(steps, max(MIN_SCALE_STEPS, SCALE_UPDATE_BYTES / (4 * model_params))))
    return max(MIN_SCALE_STEPS, steps * base_workers // max(workers, 1))


def _events(run_dir: Path, kinds: tuple) -> list[dict]:
    return [e for e in read_run_events(run_dir) if e["ev"] in kinds]


def _ckpt_bytes(events: list[dict]) -> int | None:
    sizes = [e["bytes"] for e in events if e["ev"] == "checkpoint" and e.get("bytes")]
    return max(sizes) if sizes else None


def _numel(run_dir: Path) -> int | None:
    timing = _events(run_dir, ("ps_timing",))
    return timing[-1]["numel"] if timing else None


def cmd_perf(a: argparse.Namespace) -> int:
    out = Path(a.out) if a.out else Path("reports") / "perf"
    if a.from_dir:
        src = Path(a.from_dir)
        if not (src / "perf.json").is_file():
            raise ConfigError(f"--from {src}: no perf.json there (give the --runs folder of a psbench perf)")
        results = json.loads((src / "perf.json").read_text())
        print(f"report: {write_perf_report(results, out, Path(results.get('runs') or src))}")
        return 0
    plan = plan_from_args(a)
    if registry.get(plan.benchmark).needs_data:
        try:
            plan.data_dir = str(fmnist.validate(plan.data_dir).resolve())
        except fmnist.DataError as exc:
            raise ConfigError(str(exc)) from None
    runs = Path(a.runs) if a.runs else Path("runs") / f"perf-{time.strftime('%Y%m%d-%H%M%S')}"
    if (runs / "perf.json").exists():
        raise ConfigError(f"{runs} already holds a perf measurement; choose another --runs or render it with --from")
    runs.mkdir(parents=True, exist_ok=True)
    perf = Perf(plan, runs.resolve())
    perf.results["machine"] = machine_info()
    perf.results["argv"] = sys.argv
    perf.results["runs"] = str(runs)
    perf.save()
    t0 = time.time()
    # SIGTERM (a batch system's time limit, kill) stops the session as Ctrl-C does: the run in progress
    # is stopped with its processes, what was measured is saved and rendered (seen: a SIGTERM ended
    # one run and the session went on with the next)
    previous_term = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        perf.results["cpu_speed"] = cpu_speed(plan.probe_s)
        for name in plan.sections:
            getattr(perf, name)()
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        perf.results["wall_s"] = round(time.time() - t0, 1)
        perf.save()
        print(f"report: {write_perf_report(perf.results, out, runs)}")
    return 0

"""``psbench chaos``: randomised fault trials with invariants checked after every trial.

    psbench chaos --mode chain --trials 20 --seed 1
    psbench chaos --mode checkpoint,chain,stateless --trials 50 --seed 7 --benchmark synthetic
    psbench chaos --mode stateless --trials 10 --kinds hang,pause

Each trial is one real run (:func:`launch.driver.runner.run_job`: mpirun, ULFM, real
signals) whose faults are drawn from ``--seed``: one or two at random times (chain:
sometimes at the tail replica instead; sometimes a second kill 0-50 ms after the
first, closer than the failure detection), and random mode parameters (checkpoint
interval and sync writes, chain length and replication interval, stateless replay
policy). Each fault at the PS is of a kind drawn from ``--kinds``: ``kill``
(SIGKILL), ``hang`` (SIGSTOP until fenced), ``pause`` (SIGSTOP, continued well
before ``--suspect-after``), ``slow`` (a slow phase of 1-3 s, factor 2 or 4) and
``outside`` (a SIGKILL sent by chaos itself, not through psbench's injector: an
unplanned death). ``node`` is drawn per trial: a quarter of the trials of a mode
that can restart the whole job from its checkpoint (checkpoint) lose the PS's
host at their first fault (``--kill-node``: on one host every rank, the workers
too) and run with ``--recovery job-restart``; ULFM cannot repair that in place
(the workers are gone), nor, with Open MPI 5.0.x, a lost daemon on a second host
(docs/clusters.md, "Whole-job restart"). Under ``--runtime prrte5`` over several hosts (PRRTE 5 outlives
a lost daemon) a node-loss trial of any repairing mode is repaired in place instead, a spare on another
host taking the lost roles. After every trial the run directory is checked against
these invariants:

- ``deadline``: the run completed or failed cleanly (a recorded reason) within
  its deadline; the launcher's watchdog enforces the deadline, hitting it is a
  violation (a hang), and so is a rank that gave up after ``--peer-timeout``;
- ``orphans``: no process of the run is left once the launcher returned;
- ``checkpoints``: every ``ckpt-*.pt`` on disk loads (``weights_only``) and is
  complete (keys, sizes);
- lost steps: no recovery lost more PS versions than the mode promises
  (``RecoveryMode.lost_steps_bound`` in ``psmodes/modes/``): chain 0 with
  ``--replicate-every 1`` (strict), 2K-1 with K > 1 (the head ships every K-th
  version without waiting, so the newest one may still be in flight when it
  dies); checkpoint 2K (K with synchronous writes); hybrid and stateless 0;
- hand-over: every buffered update was applied exactly once (the updates
  handed over equal the updates replayed; stateless);
- ``accuracy`` (the workload's metric): for the modes that keep the PS state (every
  mode that survives a PS death without training through it), the final metric is no
  worse than the one they promise to keep by more than ``--tolerance`` (default 0.05): the last
  one measured at or before the step the recovery resumed from (the first
  recovery's lost steps before the kill). ``stateless`` changes the model by
  replaying (the study's point) and ``none`` ends the run, so neither promises it;
- ``split brain``: no two PS processes applied updates in the same interval
  (``ps_heads``);
- ``hang``: every hang that did not end by itself was fenced within
  ``--suspect-after`` + 1.5 s; a pause that ended was not fenced; no process was
  fenced that nobody hung (a false suspicion);
- ``unplanned``: every kill from outside is in ``faults`` as an unplanned failure;
- ``diverged``: a run whose evaluated metric went non-finite is recorded as diverged
  (psmodes/divergence.py); a diverged run is an outcome, counted on its own, not a violation.

It prints one row per mode: trials, faults by kind, survived (completed), diverged, invariant
violations (must be 0), slowest recovery; a row per kind of fault: detection
p50/p95, recovery p50, lost steps; then every violation. Exit status 1
when any invariant was violated, 2 for bad input (nothing started).
``<out>/chaos.json`` keeps every trial's kills, outcome and violations.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import psutil

from benchmarks import metrics
from psmodes.atomic import write_text_atomic
from psmodes import elastic
from psmodes.config import MODES, ConfigError, RunConfig, staleness_bound
from psmodes.events import read_events, read_run_events
from psmodes.pidfiles import read_pid_file
from psmodes.suspicion import COLD_START_S

from ..analysis.lazy import frame
from ..analysis.summary import final_metric, metric_timeline
from ..driver.hosts import placement_of, resolve_hosts
from ..driver.options import add_option, run_options
from ..faultkinds import CHAOS_DEFAULT, CHAOS_KINDS, KINDS, plan_of, takes_down
from ..remote.routes import is_local
from ..driver.runner import INTERRUPTED, run_job

ACCURACY_TOLERANCE = 0.05
# A node loss is drawn for a whole trial, not per fault: on one host it takes every rank (the workers
# too, so no repair in place can survive it) and only a whole-job restart recovers, which only the
# modes that resume from a checkpoint offer (RecoveryMode.supports_job_restart)
NODE_SHARE = 0.25
REFILL = ("never", "drawn", "always")
SPARES = (0, 1, 2)  # --spares drawn per trial: spawned replacements only, or one or two spares first
FENCE_MARGIN_S = 1.5  # a hang is fenced within --suspect-after of the wait it stops, plus a step and a poll


@dataclass
class Trial:
    cfg: RunConfig
    outside: list[float] = field(default_factory=list)  # seconds into training: chaos's own SIGKILLs of the PS

    def lose_the_node(self, in_place: bool = False) -> None:
        """Make this a node-loss trial: its first fault becomes a ``--kill-node`` (every rank on the
        PS's host and that host's daemon), ``--recovery job-restart`` restarts the job from the newest
        checkpoint, and of the other faults only the absolute SIGKILLs stay (each is one more restart).
        ``in_place`` (``--runtime prrte5``, which outlives the lost daemon): repaired in place by a spare
        on another host, as drawn but at least one; the later SIGKILLs are repaired in place too."""
        cfg = self.cfg
        # a chain's draw may give its faults to the replicas alone: their first time then (seen: chaos --kinds
        # node --runtime prrte5 stopped on an IndexError here, before any trial ran)
        times = sorted([_seconds(s) for s in cfg.kill_ps + cfg.hang_ps + cfg.slow_ps + cfg.partition_ps
                        + cfg.kill_replica if not s.startswith("+")]
                       + self.outside)
        first = times[0]
        cfg.kill_node = [f"{first:g}s"]
        cfg.kill_ps = [s for s in cfg.kill_ps if not s.startswith("+") and _seconds(s) != first]
        cfg.kill_replica = [s for s in cfg.kill_replica if s.startswith("+") or _seconds(s) != first]
        cfg.hang_ps, cfg.slow_ps, cfg.partition_ps, self.outside = [], [], [], []
        if in_place:
            cfg.spares = max(1, cfg.spares)
        else:
            cfg.recovery, cfg.spares, cfg.refill_spares = "job-restart", 0, False


def _seconds(spec: str) -> float:
    """The time of a drawn fault (``12.5s``, ``12.5s~0.90s``, ``12.5s@replica2``), seconds into training."""
    return float(spec.partition("@")[0].partition("~")[0].rstrip("s"))


def add_chaos_parser(sub) -> None:
    p = sub.add_parser("chaos", help="randomised PS kill trials; invariants checked after every trial",
                       description="Randomised kill trials (real mpirun, real SIGKILLs) with invariants checked "
                                   "after every trial; exit 1 on any violation.")
    p.add_argument("--mode", required=True, help=f"one of {', '.join(MODES)}, or several separated by commas")
    p.add_argument("--trials", type=int, default=20, help="trials per mode")
    p.add_argument("--seed", type=int, default=0, help="draws the kills and parameters of every trial")
    run = run_options()  # the options every trial shares with psbench run, with the defaults of trials
    add_option(p, run["benchmark"], default="synthetic")
    add_option(p, run["duration"], default="10s", help="training time of each trial")
    add_option(p, run["workers"])
    add_option(p, run["model_params"], default=200_000)
    add_option(p, run["consistency"], help="sync, async or bounded:S; several separated by commas: each trial "
               "draws one (a mode that needs sync, hybrid, runs sync)")
    add_option(p, run["restart_delay"], default="1s")
    p.add_argument("--max-kills", type=int, default=2, help="faults per trial: 1 to this many")
    p.add_argument("--kinds", default=",".join(CHAOS_DEFAULT),
                   help=f"kinds of fault drawn for the PS: {', '.join(CHAOS_KINDS)} (default: all but partition; "
                   "node: a quarter of the trials of a mode with --recovery job-restart (or under --runtime prrte5, "
                   "repaired in place) lose the PS's host, the rest "
                   "as drawn; partition: the PS's host cut off, which needs it on another host: --hosts, --ps-host)")
    add_option(p, run["hosts"])
    add_option(p, run["hostfile"])
    add_option(p, run["ps_host"])
    add_option(p, run["runtime"], help="pypi or prrte5 (make setup-runtime): under prrte5 a node loss is "
               "repaired in place by a spare on another host, not by a job restart")
    p.add_argument("--spares", default=",".join(map(str, SPARES)),
                   help="the --spares drawn for each trial of a mode that repairs the job (e.g. 0 for none)")
    # not drawn by default: a refill makes a new world, which Open MPI 5.0.11 does not always finish
    # (1 of 15 refills hung in 32 trials with --refill-spares always); the default trials measure the rest
    p.add_argument("--refill-spares", choices=REFILL, default="never",
                   help="--refill-spares in trials with spares (sync only): never, drawn (half of them) or always")
    # not drawn by default, so that a seed draws the trials it drew before elastic workers existed
    p.add_argument("--worker-faults", choices=("never", "drawn"), default="never",
                   help="drawn: half the trials also kill or hang the last worker or the leader (sync ones over "
                   "--allreduce mpi), where the others must go on without it (psmodes/elastic.py)")
    p.add_argument("--tolerance", type=float, default=ACCURACY_TOLERANCE,
                   help="largest drop of the workload's metric allowed after recovery (checkpoint, chain): "
                   "accuracy lost, or perplexity gained")
    p.add_argument("--out", help="folder of the trials (default: runs/chaos-<time>)")
    p.add_argument("--quiet", action="store_true", help="only the table")


def plan_trials(a: argparse.Namespace) -> list[Trial]:
    """Every trial's configuration, drawn from the seed and validated before anything starts."""
    modes = [m.strip() for m in str(a.mode).split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            close = difflib.get_close_matches(m, MODES, n=1)
            raise ConfigError(f"unknown mode {m!r}" + (f" (did you mean {close[0]}?)" if close else "")
                              + f"; choose from: {', '.join(MODES)}")
    if not modes:
        raise ConfigError("--mode: give at least one mode")
    if isinstance(a.trials, bool) or a.trials < 1:
        raise ConfigError(f"--trials must be a positive integer, got {a.trials}")
    if a.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {a.seed}")
    if a.max_kills < 1:
        raise ConfigError(f"--max-kills must be >= 1, got {a.max_kills}")
    if not 0 <= a.tolerance < 1:
        raise ConfigError(f"--tolerance must be in [0, 1), got {a.tolerance}")
    kinds = [k.strip() for k in str(a.kinds).split(",") if k.strip()]
    for k in kinds:
        if k not in CHAOS_KINDS:
            raise ConfigError(f"--kinds: unknown kind {k!r}; choose from: {', '.join(CHAOS_KINDS)}")
    if not kinds:
        raise ConfigError("--kinds: give at least one kind")
    try:
        spares = [int(x) for x in str(a.spares).split(",") if x.strip()]
    except ValueError:
        spares = []
    if not spares or any(n < 0 for n in spares):
        raise ConfigError(f"--spares {a.spares!r}: give counts of spares separated by commas, e.g. 0,1,2")
    consistencies = [c.strip() for c in str(a.consistency).split(",") if c.strip()]
    if not consistencies:
        raise ConfigError("--consistency: give sync, async or bounded:S (or several, separated by commas)")
    for c in consistencies:
        staleness_bound(c)  # ConfigError, one line
    run = run_options()
    hosts, _ = resolve_hosts(getattr(a, "hostfile", None), getattr(a, "hosts", None))
    duration = run["duration"].to_field(a.duration)
    restart_delay = run["restart_delay"].to_field(a.restart_delay)
    out = Path(a.out) if a.out else Path("runs") / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.glob("*/trial-*")):
        raise ConfigError(f"{out} already holds chaos trials; choose another --out")
    trials = []
    for mode in modes:
        for i in range(a.trials):
            rng = random.Random(f"{a.seed}/{mode}/{i}")
            consistency = random.Random(f"{a.seed}/{mode}/{i}/consistency").choice(consistencies)  # its own draw
            if consistency != "sync" and _needs_sync(mode):
                consistency = "sync"
            cfg = RunConfig(benchmark=a.benchmark, mode=mode, consistency=consistency, workers=a.workers,
                            duration_s=duration, seed=a.seed * 1000 + i, model_params=a.model_params,
                            eval_interval_s=max(0.5, duration / 10), restart_delay_s=restart_delay,
                            hosts=[h.spec() for h in hosts], oversubscribe=not hosts,
                            ps_host=getattr(a, "ps_host", None), runtime=a.runtime)
            _draw(cfg, rng, duration, a.max_kills)
            per_fault = [k for k in kinds if k != "node"] or ["kill"]
            trial = Trial(cfg, _draw_kinds(cfg, rng, per_fault))
            if "hang" in kinds:  # its own draw, as the node's: a replica's kill may become a hang of any replica
                _draw_replica_hangs(cfg, random.Random(f"{a.seed}/{mode}/{i}/replica"))
            if not cfg.dies_with_ps:  # drawn last: a seed draws the same faults as before spares existed
                cfg.spares = rng.choice(spares)
                refill = a.refill_spares == "always" or (a.refill_spares == "drawn" and rng.random() < 0.5)
                cfg.refill_spares = bool(cfg.spares) and cfg.consistency == "sync" and refill
            node = random.Random(f"{a.seed}/{mode}/{i}/node")  # its own draw: the other draws stay as they were
            in_place = a.runtime == "prrte5" and len(hosts) > 1 and not cfg.dies_with_ps  # the PS's host alone lost
            if "node" in kinds and (in_place or cfg.recovery_mode.supports_job_restart) \
                    and node.random() < (1.0 if kinds == ["node"] else NODE_SHARE):
                trial.lose_the_node(in_place)
            cfg.run_dir = str((out / mode / f"trial-{i:03d}").resolve())
            _validate(cfg)  # resolves the optimizer, which decides whether the exchange can be pipelined
            exchange = random.Random(f"{a.seed}/{mode}/{i}/exchange")  # its own draw, as the node's
            if cfg.workers_apply:  # auto made it pipelined: half the trials run the blocking exchange
                cfg.exchange = exchange.choice(["pipelined", "blocking"])
            worker = random.Random(f"{a.seed}/{mode}/{i}/worker")  # its own draw, as the node's
            if a.worker_faults == "drawn" and cfg.workers > 1 and not cfg.dies_with_ps and worker.random() < 0.5:
                _draw_worker_fault(cfg, worker, duration, "hang" in kinds)
            trials.append(trial)
    return trials


def _draw(cfg: RunConfig, rng: random.Random, duration: float, max_kills: int) -> None:
    n = rng.randint(1, max_kills)
    times = sorted(round(rng.uniform(0.1, 0.8) * duration, 2) for _ in range(n))
    specs = [f"{t}s" for t in times]
    if n >= 2 and rng.random() < 0.25:  # the second kill right after the first: before it was detected
        specs[1] = f"+{rng.randint(0, 50)}ms"
    cfg.recovery_mode.chaos_draw(cfg, rng, specs)  # the mode's options, and which role each kill aims at


def _draw_kinds(cfg: RunConfig, rng: random.Random, kinds: list[str]) -> list[float]:
    """Turn the PS kills into the drawn kinds; returns the times of the kills from outside.
    A schedule with a relative kill (+DUR, after the previous kill) stays all kills."""
    if any(s.startswith("+") for s in cfg.kill_ps):
        return []
    outside = []
    pause = cfg.suspect_after_s * 0.3 if cfg.suspect_after_s else 1.0
    drawn, cfg.kill_ps = cfg.kill_ps, []
    for spec in drawn:
        name = rng.choice(kinds)
        t = CHAOS_KINDS[name].chaos_apply(name, cfg, spec, rng, pause)  # launch/faultkinds/: each kind's own
        if t is not None:
            outside.append(t)
    return outside


def _draw_replica_hangs(cfg: RunConfig, rng: random.Random) -> None:
    """Half the replica kills become hangs (until fenced) of a replica drawn from the chain: the
    tail or, with two, the middle one, which the head must be the one to suspect."""
    kills = []
    for spec in cfg.kill_replica:
        if rng.random() < 0.5:
            cfg.hang_replica.append(f"{spec}@replica{rng.randint(1, cfg.n_replicas)}")
        else:
            kills.append(spec)
    cfg.kill_replica = kills


def _draw_worker_fault(cfg: RunConfig, rng: random.Random, duration: float, hangs: bool) -> None:
    """The last worker killed, or (``hangs``: half the time) hung until fenced, in a run whose workers are
    elastic (psmodes/elastic.py): async and bounded, and sync over psbench's MPI allreduce (the exchange as
    drawn: pipelined or blocking). A third of the time the leader instead."""
    if not cfg.is_async:
        cfg.allreduce = "mpi"
    spec = f"{round(rng.uniform(0.1, 0.7) * duration, 2)}s"
    faults = cfg.hang_worker if hangs and rng.random() < 0.5 else cfg.kill_worker
    faults.append(spec + ("@worker0" if rng.random() < 1 / 3 else ""))


def _needs_sync(mode: str) -> bool:
    """Whether ``mode`` refuses async and bounded consistency (hybrid: the leader's order of updates)."""
    cfg = RunConfig(mode=mode, consistency="async")
    try:
        cfg.recovery_mode.validate(cfg)
    except ConfigError:
        return True
    return False


class OutsideKiller(threading.Thread):
    """SIGKILLs the PS of a run at given times, not through psbench's injector (nothing in the
    run's events says so): the run must record the death itself as an unplanned failure."""

    def __init__(self, run_dir: Path, times: list[float], deadline_s: float) -> None:
        super().__init__(daemon=True, name="outside-killer")
        self.run_dir, self.times, self.deadline = Path(run_dir), sorted(times), time.monotonic() + deadline_s
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = None
        while t0 is None and not self.stop.wait(0.05):
            if time.monotonic() > self.deadline:
                return
            t0 = next((e["t0_ms"] / 1000 for e in read_events(self.run_dir / "events" / "ps.jsonl")
                       if e["ev"] == "train_start"), None)
        for at in self.times:
            while not self.stop.wait(0.02) and time.monotonic() < self.deadline:
                info = read_pid_file(self.run_dir, "ps")
                if time.time() >= t0 + at and info and info["pid"] not in self.killed and _alive(info["pid"]):
                    os.kill(int(info["pid"]), signal.SIGKILL)
                    # ours may hit a process the launcher had just fenced: then no death from outside
                    if not launcher_killed_first(self.run_dir, int(info["pid"]), time.time()):
                        self.killed.append(int(info["pid"]))
                    break


def launcher_killed_first(run_dir: Path, pid: int, t: float, wait_s: float = 0.5) -> bool:
    """Whether the launcher killed or fenced ``pid`` before ``t``. Its event is written just after its
    SIGKILL, so it is looked for a moment. Chaos seed 46, checkpoint trial-035: the PS hung at 1.54 s (not
    killed from outside while stopped), was fenced at 4.6 s, and in the moment between the fence's
    SIGKILL and its death the outside killer's kill for 3.94 s landed and counted as a death from
    outside that the run could not see."""
    deadline = time.monotonic() + wait_s
    while True:
        if any(e.get("pid") == pid and float(e.get("t_fence") or e.get("t_kill") or e["t"]) <= t
               for e in read_events(Path(run_dir) / "events" / "launcher.jsonl") if e["ev"] in ("fence", "kill")):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(int(pid)).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_STOPPED,
                                                         psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def _validate(cfg: RunConfig) -> None:
    cfg.validate()
    plan_of(cfg)
    if cfg.partition_ps and is_local(placement_of(cfg).host_of("ps") or "localhost"):
        raise ConfigError("--kinds partition cuts the PS's host off the others: put the PS on another host "
                          "(--hosts, --ps-host)")


# ---- invariants
def check_trial(cfg: RunConfig, summary: dict | None, wall_s: float,
                tolerance: float = ACCURACY_TOLERANCE, outside_kills: list[int] = ()) -> list[str]:
    """The invariants of one finished trial; each violation is one line. ``outside_kills``:
    the pids chaos killed itself."""
    run_dir = Path(cfg.run_dir)
    bad: list[str] = []
    left = leftover_processes(run_dir)
    if left:
        bad.append(f"orphans: {len(left)} process(es) of the run still alive after the launcher returned "
                   f"(pids {', '.join(str(p) for p in left)})")
    if summary is None:
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, ValueError) as exc:
            return bad + [f"deadline: no readable summary.json ({exc})"]
    deadline = cfg.resolved_deadline()
    reason = str(summary.get("exit_reason"))
    if "watchdog" in reason:
        bad.append(f"deadline: the watchdog stopped the run ({reason})")
    elif wall_s > deadline + 30:
        bad.append(f"deadline: the run took {wall_s:.0f} s, its deadline is {deadline:.0f} s")
    timeouts = [f["reason"] for f in summary.get("failures") or [] if "PeerTimeout" in str(f.get("reason"))]
    if timeouts:
        bad.append(f"deadline: a rank waited out its peer timeout, a hang cut short ({timeouts[0]})")
    if not summary.get("completed") and not (summary.get("failures") or summary.get("crashes")
                                             or summary.get("diverged")) and "watchdog" not in reason:
        bad.append(f"deadline: the run neither completed nor failed with a recorded reason ({reason})")
    bugs = [f"{f['who']}: {f['reason']}" for f in summary.get("failures") or [] if f.get("bug")]
    if bugs:  # a clean end is not enough: the reason must be one psbench meant (its traceback is in the events)
        bad.append(f"bug: a rank stopped on an exception psbench did not expect ({bugs[0]})")
    if (cfg.kill_worker or cfg.hang_worker) and elastic.survivable(cfg):
        ended = [f["reason"] for f in summary.get("failures") or [] if "so the run ends" in str(f.get("reason"))
                 and elastic.LEADER_PS_DOWN not in str(f.get("reason"))]
        if ended:  # psmodes/elastic.py's reason for a worker's death that a run could not survive
            bad.append(f"elastic: a worker's death ended a run whose workers are elastic ({ended[0]})")
    unnoticed = unrecorded_divergence(run_dir, summary)
    if unnoticed:
        bad.append(f"diverged: {unnoticed}, and the run was not recorded as diverged")
    for path in sorted((run_dir / "checkpoints").glob("ckpt-*.pt")):
        from psmodes import checkpoint as ckpt  # imports torch (about 2 s): only when there are checkpoints

        try:
            ckpt.load(path)
        except ckpt.CheckpointError as exc:
            bad.append(f"checkpoints: {exc}")
    recs = summary.get("recoveries") or []
    mode = cfg.recovery_mode
    bound = mode.lost_steps_bound(cfg)  # the mode's promise (psmodes/modes/)
    faults = summary.get("faults") or []
    for r in recs if bound is not None else []:
        # the leader (worker0) lost by the recovery's own fault or during it: hybrid's backup was the leader's
        # (worker chaos, hybrid trial-002 of seed 53: the PS hung, then the leader; the promoted replica's copy
        # lacked the 15 steps since the tail's last ACK)
        start = faults[r["fault"]]["t_s"] if r["fault"] < len(faults) else None
        leader_lost = start is not None and any(
            f.get("role") == "worker0" and start <= f["t_s"] <= start + (r.get("recovery_s") or 0) for f in faults)
        allowed = mode.lost_steps_bound_leader_lost(cfg) if leader_lost else bound
        if r["lost_steps"] > allowed:
            bad.append(f"{cfg.mode}: recovery after fault {r['fault']} ({r.get('kind')}) lost {r['lost_steps']} steps "
                       f"({mode.describe(cfg)} allows {allowed}" + (", the leader lost" if leader_lost else "") + ")")
    if summary.get("buffered_sent") != summary.get("buffered_applied"):  # a hand-over (stateless), exactly once
        bad.append(f"{cfg.mode}: {summary.get('buffered_sent')} buffered updates handed over, "
                   f"{summary.get('buffered_applied')} applied")
    if mode.survives_ps_death and not mode.trains_through_outage and summary.get("completed"):
        # a mode that keeps the state: the metric after recovery is no worse than what it resumed from
        lost = max([r["lost_steps"] for r in recs[:1]], default=0)
        before = metric_before_first_kill(summary, lost)
        final = final_metric(summary)
        metric = metrics.of_summary(summary)
        if before is not None and final is not None and metric.drop(before, final) > tolerance:
            what = "before the first kill" if not lost else f"at the state it resumed from ({lost} steps before the kill)"
            bad.append(f"{metric.name}: {final:.3f} at the end, {before:.3f} {what} (tolerance {tolerance})")
    return bad + check_faults(cfg, summary, outside_kills, respawn_times(run_dir))


def unrecorded_divergence(run_dir: Path, summary: dict) -> str | None:
    """A non-finite evaluated metric in the run's events when its summary says it did not diverge
    (psmodes/divergence.py records every one): what was seen, else None."""
    if summary.get("diverged"):
        return None
    for e in read_run_events(run_dir):
        value = e.get("value") if e["ev"] == "eval" else None
        if isinstance(value, float) and not math.isfinite(value):
            return f"{e['who']} evaluated {value} at version {e.get('ps_step')}"
    return None


def respawn_times(run_dir: Path) -> list[float]:
    """Seconds into training of the survivors' respawns (each opens a cold start, psmodes.suspicion)."""
    events = read_run_events(run_dir)
    t0 = next((e["t0_ms"] / 1000 for e in events if e["ev"] == "train_start"), None)
    return [] if t0 is None else sorted({round(e["t"] - t0, 1) for e in events
                                         if e["ev"] == "respawned" and not e.get("refill")})  # a new spare serves nobody


def check_faults(cfg: RunConfig, summary: dict, outside_kills: list[int] = (),
                 respawns: list[float] = ()) -> list[str]:
    """Split brain, hangs fenced in time and pauses ridden out, unplanned deaths recorded. A hang
    within a cold start after a respawn (``respawns``) is suspected only once that has passed; one
    behind another hang, only once that one was fenced."""
    bad = []
    heads = sorted(summary.get("ps_heads") or [], key=lambda h: h["first_s"])
    for a, b in zip(heads, heads[1:]):
        if b["first_s"] < a["last_s"]:
            bad.append(f"split brain: {a['who']} applied updates until {a['last_s']} s, "
                       f"{b['who']} from {b['first_s']} s")
    faults = summary.get("faults") or []
    suspect = cfg.suspect_after_s
    for f in faults:
        if f["kind"] != "hang" or not f.get("planned"):
            continue
        if summary.get("completed") and summary.get("train_s") is not None and f["t_s"] >= summary["train_s"]:
            continue  # it stopped a PS that had already answered its last step: the run ended regardless
        if (summary.get("completed") and summary.get("train_s") is not None and f.get("fenced_s") is None
                and suspect and f["t_s"] > summary["train_s"] - suspect):
            # the run ended before --suspect-after had passed: it did not need the stopped PS any more
            # (found by psbench chaos: a hang that waited for the replacement to register landed 17 ms
            # before the last step's answer arrived)
            continue
        ends = f.get("for_s") is not None and (not suspect or f["for_s"] < suspect * 0.5)
        if ends and f.get("fenced_s") is not None:
            bad.append(f"hang: a {f['for_s']} s pause at {f['t_s']} s was fenced (--suspect-after {suspect:g}s)")
        elif not ends and suspect and f.get("ended_s") is None:
            # to the launcher's decision to fence (fence_sent_s): a fence over ssh is carried out its round trip later
            # (0.54 s seen over two hosts), which is the route's, not the suspicion's
            took = (f.get("fence_sent_s", f["fenced_s"]) - f["t_s"]) if f.get("fenced_s") is not None else None
            cold = max([r + COLD_START_S - f["t_s"] for r in respawns if r <= f["t_s"]] + [0.0])
            # a hang that began while another hung process was still unfenced waits for that one's fence:
            # what would have waited on it may be the other one (a replica hung 0.2 s after its hung head
            # is found by the repair's shrink, --suspect-after after the head's fence; psbench chaos,
            # hybrid, seed 46, trial-001)
            # so does one behind a host cut off and fenced for it (over two hosts, chain trial-019: a replica hung
            # while the PS's host was cut off; only the shrink after the PS's fence could find it)
            behind = max([h["fenced_s"] - f["t_s"] for h in faults if h is not f and h["kind"] in ("hang", "partition")
                          and h.get("fenced_s") is not None and h["t_s"] <= f["t_s"] < h["fenced_s"]] + [0.0])
            # and one whose watcher hung too before --suspect-after had passed waits for the watcher's fence and the
            # repair after it (worker chaos, hybrid trial-002 of seed 53: the PS hung, then the leader, the only rank
            # that waited for the PS's answer, 0.5 s later; the others found the leader, then the repair the PS)
            watcher = max([h["fenced_s"] - f["t_s"] for h in faults if h is not f and h["kind"] == "hang"
                           and h.get("fenced_s") is not None and f["t_s"] < h["t_s"] < f["t_s"] + suspect] + [0.0])
            behind = max(behind, watcher)
            # a hang on a host that is cut off cannot be told from the cut until the link is back: the waits that
            # would find it wait for the link first (chain trial-015: the PS hung 0.6 s into a 1.8 s cut, its
            # answers sent before the hang arrived when the link came back)
            cut = max([p["t_s"] + p["for_s"] - f["t_s"] for p in faults if p["kind"] == "partition"
                       and p.get("host") == f.get("host") and p.get("for_s")
                       and p["t_s"] <= f["t_s"] < p["t_s"] + p["for_s"]] + [0.0])
            if took is None or took > suspect + FENCE_MARGIN_S + max(cold, behind, cut):
                bad.append(f"hang: the hang at {f['t_s']} s was " + ("never fenced" if took is None else
                           f"fenced after {took:.2f} s") + f" (--suspect-after {suspect:g}s)")
    for f in faults:
        if f["kind"] == "unplanned" and "fenced" in str(f.get("evidence")):
            bad.append(f"false suspicion: {f['role']} (pid {f['pid']}) was fenced and nobody had hung it "
                       f"({f['evidence']})")
    recorded = {f["pid"] for f in faults if f["kind"] == "unplanned"}
    for pid in outside_kills:
        if pid not in recorded:
            bad.append(f"unplanned: the PS (pid {pid}) killed from outside is not a failure in summary.json")
    return bad


def metric_before_first_kill(summary: dict, lost_steps: int = 0) -> float | None:
    """The last metric value measured before the first kill, at a PS step no later than the
    step reached at the kill minus ``lost_steps`` (checkpoint: the state it resumed from)."""
    kills = took_down(summary)
    if not kills:
        return None
    t_kill = min(k["t_s"] for k in kills)
    before = [(step, acc) for t, step, acc in metric_timeline(summary) if t < t_kill]
    if not before:
        return None
    if lost_steps:
        step_at_kill = max(step for step, _ in before)
        kept = [acc for step, acc in before if step <= step_at_kill - lost_steps]
        return kept[-1] if kept else None
    return before[-1][1]


def took_down(summary: dict) -> list[dict]:
    """The failures that took a process down: kills, unplanned deaths and fenced hangs (not a
    pause that ended, not a slow phase). A summary without ``faults`` has only its kills."""
    if "faults" not in summary:
        return summary.get("kills") or []
    return [f for f in summary["faults"] if takes_down(f["kind"]) or f.get("fenced_s") is not None]


def leftover_processes(run_dir: Path, grace_s: float = 5.0) -> list[int]:
    """Processes whose command line names the run directory, after a short grace; they are killed."""
    needle = str(run_dir)
    end = time.monotonic() + grace_s
    while True:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                cmd = proc.info["cmdline"] or []
                if proc.info["status"] != psutil.STATUS_ZOMBIE and any(needle in arg for arg in cmd):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not found or time.monotonic() > end:
            break
        time.sleep(0.2)
    for proc in found:  # do not let one trial's leftovers disturb the next
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in found]


# ---- the command
def cmd_chaos(a: argparse.Namespace) -> int:
    trials = plan_trials(a)
    out = Path(trials[0].cfg.run_dir).parent.parent
    out.mkdir(parents=True, exist_ok=True)
    results = []
    interrupted = False
    for n, trial in enumerate(trials, start=1):
        cfg = trial.cfg
        t0 = time.time()
        summary, crash = None, None
        killer = OutsideKiller(Path(cfg.run_dir), trial.outside, cfg.resolved_deadline())
        if trial.outside:
            killer.start()
        try:
            summary = run_job(cfg, quiet=True)
        except Exception as exc:  # noqa: BLE001 - a launcher crash is a finding, not the end of the trials
            crash = f"launcher: {type(exc).__name__}: {exc}"
        finally:
            killer.stop.set()
        wall = time.time() - t0
        if summary is not None and summary.get("exit_reason") == INTERRUPTED:
            # Ctrl-C (or SIGTERM) ends the trials, not just the one running: it is not counted
            print(f"psbench chaos: interrupted during {cfg.mode}/{Path(cfg.run_dir).name}; "
                  f"{len(results)} trial(s) finished", file=sys.stderr, flush=True)
            interrupted = True
            break
        bad = check_trial(cfg, summary, wall, a.tolerance, killer.killed)
        if crash:
            bad.insert(0, crash)
        summary = summary or {}
        row = {"mode": cfg.mode, "trial": Path(cfg.run_dir).name, "run_dir": cfg.run_dir, "seed": cfg.seed,
               "recovery": cfg.recovery, "kill_node": cfg.kill_node, "spares": cfg.spares, "refill_spares": cfg.refill_spares,
               "open_mpi_crashes": len(summary.get("crashes") or []),
               "lingered": lingered(Path(cfg.run_dir)),
               "kill_ps": cfg.kill_ps, "kill_replica": cfg.kill_replica, "hang_ps": cfg.hang_ps,
               "hang_replica": cfg.hang_replica, "consistency": cfg.consistency,
               "slow_ps": cfg.slow_ps, "outside": trial.outside, "outside_killed": killer.killed,
               "kills": len(summary.get("kills") or []),
               "faults": [{k: f.get(k) for k in ("kind", "planned", "t_s", "for_s", "fenced_s", "ended_s")}
                          for f in summary.get("faults") or []],
               "detections": [{"kind": d.get("kind"), "latency_s": d["latency_s"]}
                              for d in summary.get("detections") or []],
               "recoveries": [{"kind": r.get("kind"), "recovery_s": r["recovery_s"], "lost_steps": r["lost_steps"]}
                              for r in summary.get("recoveries") or []],
               "slowest_answer_s": summary.get("slowest_answer_s"),
               # elastic workers: those lost, and the replacements that joined (psmodes/elastic.py)
               "workers_lost": sum(len(g.get("lost") or []) for g in summary.get("regroups") or []),
               "workers_replaced": sum(len(g.get("joined") or []) for g in summary.get("regroups") or []),
               "completed": bool(summary.get("completed")), "exit_reason": summary.get("exit_reason"),
               "diverged": bool(summary.get("diverged")),
               "recovery_s": max([r["recovery_s"] for r in summary.get("recoveries") or []], default=None),
               "lost_steps": [r["lost_steps"] for r in summary.get("recoveries") or []],
               "params": cfg.recovery_mode.describe(cfg), "wall_s": round(wall, 1), "violations": bad}
        results.append(row)
        if not a.quiet:
            faults = ", ".join([f"node:{k}" for k in cfg.kill_node] + cfg.kill_ps
                               + [f"replica:{k}" for k in cfg.kill_replica]
                               + [f"hang:{h}" for h in cfg.hang_ps] + [f"replica-hang:{h}" for h in cfg.hang_replica]
                               + [f"slow:{x}" for x in cfg.slow_ps]
                               + [f"partition:{x}" for x in cfg.partition_ps]
                               + [f"outside:{t:g}s" for t in trial.outside])
            verdict = "ok" if not bad else f"{len(bad)} VIOLATION(S): " + "; ".join(bad)
            spares = "job-restart" if cfg.recovery == "job-restart" else \
                f"{cfg.spares} spare(s)" + (", refilled" if cfg.refill_spares else "")
            print(f"[{n}/{len(trials)}] {cfg.mode} {row['trial']} ({row['params']}, {spares}; "
                  f"faults {faults}): "
                  f"{'completed' if row['completed'] else str(row['exit_reason'])[:80] if row['diverged'] else 'failed: ' + str(row['exit_reason'])[:80]}, "
                  f"{len(row['faults'])} fault(s), {wall:.0f} s - {verdict}", file=sys.stderr, flush=True)
        write_text_atomic(out / "chaos.json", json.dumps({"argv": sys.argv, "trials": results}, indent=2) + "\n")
    print(table(results))
    print()
    print(kinds_table(results))
    violations = [(r["mode"], r["trial"], v) for r in results for v in r["violations"]]
    for mode, trial, v in violations:
        print(f"VIOLATION {mode}/{trial}: {v}")
    print(f"trials: {out}")
    return 1 if violations else (130 if interrupted else 0)


def table(results: list[dict]) -> str:
    """A row per mode, recovery and number of spares: trials, faults, survived, violations, the trials
    in which Open MPI crashed (a rank died of a signal nobody sent) or mpirun lingered, the slowest
    recovery."""
    rows = []
    group = lambda r: (r["mode"], r.get("recovery", "ulfm"), r.get("spares", 0))  # noqa: E731
    for mode, recovery, spares in dict.fromkeys(map(group, results)):
        rs = [r for r in results if group(r) == (mode, recovery, spares)]
        slowest = max([r["recovery_s"] for r in rs if r["recovery_s"] is not None], default=None)
        kinds = Counter(f["kind"] if f.get("planned", True) else "unplanned" for r in rs for f in r.get("faults", []))
        rows.append({"mode": mode, "recovery": recovery, "spares": spares, "trials": len(rs),
                     "faults": ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "-",
                     "survived": sum(r["completed"] for r in rs),
                     "diverged": sum(1 for r in rs if r.get("diverged")),
                     "workers lost / replaced": f"{sum(r.get('workers_lost', 0) for r in rs)} / "
                                                f"{sum(r.get('workers_replaced', 0) for r in rs)}",
                     "invariant violations": sum(len(r["violations"]) for r in rs),
                     "Open MPI crash": sum(1 for r in rs if r.get("open_mpi_crashes")),
                     "mpirun lingered": sum(1 for r in rs if r.get("lingered")),
                     "slowest recovery (s)": round(slowest, 2) if slowest is not None else "-"})
    return frame(sorted(rows, key=lambda r: (list(dict.fromkeys(x["mode"] for x in results)).index(r["mode"]),
                                             r["recovery"], r["spares"]))).to_markdown(index=False)


def lingered(run_dir: Path) -> bool:
    """Whether the launcher had to stop an mpirun that outlived every rank (launch/driver/runner.py)."""
    return any(e["ev"] == "lingered" for e in read_events(run_dir / "events" / "launcher.jsonl"))


def kinds_table(results: list[dict]) -> str:
    """Per kind of fault, over every trial: how many, detection p50/p95, recovery p50, lost steps."""
    rows = []
    faults = Counter(f["kind"] for r in results for f in r.get("faults", []))
    for kind in sorted(faults):
        det = [d["latency_s"] for r in results for d in r.get("detections", []) if d["kind"] == kind]
        rec = [x["recovery_s"] for r in results for x in r.get("recoveries", []) if x["kind"] == kind]
        lost = [x["lost_steps"] for r in results for x in r.get("recoveries", []) if x["kind"] == kind]
        pct = lambda xs, q: round(float(np.percentile(xs, q)), 3) if xs else "-"  # noqa: E731
        rows.append({"kind": kind, "faults": faults[kind], "detected": len(det), "detection p50 (s)": pct(det, 50),
                     "detection p95 (s)": pct(det, 95), "recovered": len(rec), "recovery p50 (s)": pct(rec, 50),
                     "lost steps max": max(lost, default="-")})
    # what --suspect-after must stay above: trials without a hang, pause or slow phase (those answer late on purpose)
    answers = [r["slowest_answer_s"] for r in results if r.get("slowest_answer_s") is not None
               and not any(f["kind"] in KINDS and KINDS[f["kind"]].fenceable for f in r.get("faults", []))]
    note = (f"\n\nslowest answer of a live PS (trials without a hang or slow phase): {max(answers):.3f} s"
            if answers else "")
    return (frame(rows).to_markdown(index=False) if rows else "no faults") + note

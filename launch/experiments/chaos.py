"""``psbench chaos``: randomised kill trials with invariants checked after every trial.

    psbench chaos --mode chain --trials 20 --seed 1
    psbench chaos --mode checkpoint,chain,stateless --trials 50 --seed 7 --benchmark synthetic

Each trial is one real run (:func:`launch.driver.runner.run_job`: mpirun, ULFM, real
SIGKILLs) whose kills are drawn from ``--seed``: one or two PS kills at random
times (chain: sometimes the tail replica instead; sometimes a second kill 0-50
ms after the first, closer than the failure detection), and random mode
parameters (checkpoint interval and sync writes, chain length and replication
interval, stateless replay policy). After every trial the run directory is
checked against these invariants:

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
- ``accuracy``: for the modes that keep the PS state (every mode that survives
  a PS death without training through it), the final accuracy is at least the
  accuracy they promise to keep minus ``--tolerance`` (default 0.05): the last
  one measured at or before the step the recovery resumed from (the first
  recovery's lost steps before the kill). ``stateless`` changes the model by
  replaying (the study's point) and ``none`` ends the run, so neither promises it.

It prints one row per mode: trials, kills, survived (completed), invariant
violations (must be 0), slowest recovery; then every violation. Exit status 1
when any invariant was violated, 2 for bad input (nothing started).
``<out>/chaos.json`` keeps every trial's kills, outcome and violations.
"""
from __future__ import annotations

import argparse
import difflib
import json
import random
import sys
import time
from pathlib import Path

import psutil

from psmodes.atomic import write_text_atomic
from psmodes.config import MODES, ConfigError, RunConfig

from ..analysis.lazy import frame
from ..driver.kills import schedule
from ..driver.options import add_option, run_options
from ..driver.runner import INTERRUPTED, run_job

ACCURACY_TOLERANCE = 0.05


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
    add_option(p, run["consistency"], help="sync, async or bounded:S")
    add_option(p, run["restart_delay"], default="1s")
    p.add_argument("--max-kills", type=int, default=2, help="kills per trial: 1 to this many")
    p.add_argument("--tolerance", type=float, default=ACCURACY_TOLERANCE,
                   help="largest accuracy drop allowed after recovery (checkpoint, chain)")
    p.add_argument("--out", help="folder of the trials (default: runs/chaos-<time>)")
    p.add_argument("--quiet", action="store_true", help="only the table")


def plan_trials(a: argparse.Namespace) -> list[RunConfig]:
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
    run = run_options()
    duration = run["duration"].to_field(a.duration)
    restart_delay = run["restart_delay"].to_field(a.restart_delay)
    out = Path(a.out) if a.out else Path("runs") / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.glob("*/trial-*")):
        raise ConfigError(f"{out} already holds chaos trials; choose another --out")
    configs = []
    for mode in modes:
        for i in range(a.trials):
            rng = random.Random(f"{a.seed}/{mode}/{i}")
            cfg = RunConfig(benchmark=a.benchmark, mode=mode, consistency=a.consistency, workers=a.workers,
                            duration_s=duration, seed=a.seed * 1000 + i, model_params=a.model_params,
                            eval_interval_s=max(0.5, duration / 10), restart_delay_s=restart_delay)
            _draw(cfg, rng, duration, a.max_kills)
            cfg.run_dir = str((out / mode / f"trial-{i:03d}").resolve())
            _validate(cfg)
            configs.append(cfg)
    return configs


def _draw(cfg: RunConfig, rng: random.Random, duration: float, max_kills: int) -> None:
    n = rng.randint(1, max_kills)
    times = sorted(round(rng.uniform(0.1, 0.8) * duration, 2) for _ in range(n))
    specs = [f"{t}s" for t in times]
    if n >= 2 and rng.random() < 0.25:  # the second kill right after the first: before it was detected
        specs[1] = f"+{rng.randint(0, 50)}ms"
    cfg.recovery_mode.chaos_draw(cfg, rng, specs)  # the mode's options, and which role each kill aims at


def _validate(cfg: RunConfig) -> None:
    cfg.validate()
    schedule(cfg)


# ---- invariants
def check_trial(cfg: RunConfig, summary: dict | None, wall_s: float,
                tolerance: float = ACCURACY_TOLERANCE) -> list[str]:
    """The invariants of one finished trial; each violation is one line."""
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
    if not summary.get("completed") and not (summary.get("failures") or summary.get("crashes")) \
            and "watchdog" not in reason:
        bad.append(f"deadline: the run neither completed nor failed with a recorded reason ({reason})")
    for path in sorted((run_dir / "checkpoints").glob("ckpt-*.pt")):
        from psmodes import checkpoint as ckpt  # imports torch (about 2 s): only when there are checkpoints

        try:
            ckpt.load(path)
        except ckpt.CheckpointError as exc:
            bad.append(f"checkpoints: {exc}")
    recs = summary.get("recoveries") or []
    mode = cfg.recovery_mode
    bound = mode.lost_steps_bound(cfg)  # the mode's promise (psmodes/modes/)
    for r in recs if bound is not None else []:
        if r["lost_steps"] > bound:
            bad.append(f"{cfg.mode}: recovery after fault {r['fault']} ({r.get('kind')}) lost {r['lost_steps']} steps "
                       f"({mode.describe(cfg)} allows {bound})")
    if summary.get("buffered_sent") != summary.get("buffered_applied"):  # a hand-over (stateless), exactly once
        bad.append(f"{cfg.mode}: {summary.get('buffered_sent')} buffered updates handed over, "
                   f"{summary.get('buffered_applied')} applied")
    if mode.survives_ps_death and not mode.trains_through_outage and summary.get("completed"):
        # a mode that keeps the state: accuracy after recovery matches what it resumed from
        lost = max([r["lost_steps"] for r in recs[:1]], default=0)
        before = accuracy_before_first_kill(summary, lost)
        final = summary.get("final_accuracy")
        if before is not None and final is not None and final < before - tolerance:
            what = "before the first kill" if not lost else f"at the state it resumed from ({lost} steps before the kill)"
            bad.append(f"accuracy: {final:.3f} at the end, {before:.3f} {what} (tolerance {tolerance})")
    return bad


def accuracy_before_first_kill(summary: dict, lost_steps: int = 0) -> float | None:
    """The last accuracy measured before the first kill, at a PS step no later than the
    step reached at the kill minus ``lost_steps`` (checkpoint: the state it resumed from)."""
    kills = summary.get("kills") or []
    if not kills:
        return None
    t_kill = min(k["t_s"] for k in kills)
    before = [(step, acc) for t, step, acc in summary.get("accuracy_timeline") or [] if t < t_kill]
    if not before:
        return None
    if lost_steps:
        step_at_kill = max(step for step, _ in before)
        kept = [acc for step, acc in before if step <= step_at_kill - lost_steps]
        return kept[-1] if kept else None
    return before[-1][1]


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
    configs = plan_trials(a)
    out = Path(configs[0].run_dir).parent.parent
    out.mkdir(parents=True, exist_ok=True)
    results = []
    interrupted = False
    for n, cfg in enumerate(configs, start=1):
        t0 = time.time()
        summary, crash = None, None
        try:
            summary = run_job(cfg, quiet=True)
        except Exception as exc:  # noqa: BLE001 - a launcher crash is a finding, not the end of the trials
            crash = f"launcher: {type(exc).__name__}: {exc}"
        wall = time.time() - t0
        if summary is not None and summary.get("exit_reason") == INTERRUPTED:
            # Ctrl-C (or SIGTERM) ends the trials, not just the one running: it is not counted
            print(f"psbench chaos: interrupted during {cfg.mode}/{Path(cfg.run_dir).name}; "
                  f"{len(results)} trial(s) finished", file=sys.stderr, flush=True)
            interrupted = True
            break
        bad = check_trial(cfg, summary, wall, a.tolerance)
        if crash:
            bad.insert(0, crash)
        summary = summary or {}
        row = {"mode": cfg.mode, "trial": Path(cfg.run_dir).name, "run_dir": cfg.run_dir, "seed": cfg.seed,
               "kill_ps": cfg.kill_ps, "kill_replica": cfg.kill_replica, "kills": len(summary.get("kills") or []),
               "completed": bool(summary.get("completed")), "exit_reason": summary.get("exit_reason"),
               "recovery_s": max([r["recovery_s"] for r in summary.get("recoveries") or []], default=None),
               "lost_steps": [r["lost_steps"] for r in summary.get("recoveries") or []],
               "params": cfg.recovery_mode.describe(cfg), "wall_s": round(wall, 1), "violations": bad}
        results.append(row)
        if not a.quiet:
            kills = ", ".join(cfg.kill_ps + [f"replica:{k}" for k in cfg.kill_replica])
            verdict = "ok" if not bad else f"{len(bad)} VIOLATION(S): " + "; ".join(bad)
            print(f"[{n}/{len(configs)}] {cfg.mode} {row['trial']} ({row['params']}; kills {kills}): "
                  f"{'completed' if row['completed'] else 'failed: ' + str(row['exit_reason'])[:80]}, "
                  f"{row['kills']} kill(s), {wall:.0f} s - {verdict}", file=sys.stderr, flush=True)
        write_text_atomic(out / "chaos.json", json.dumps({"argv": sys.argv, "trials": results}, indent=2) + "\n")
    print(table(results))
    violations = [(r["mode"], r["trial"], v) for r in results for v in r["violations"]]
    for mode, trial, v in violations:
        print(f"VIOLATION {mode}/{trial}: {v}")
    print(f"trials: {out}")
    return 1 if violations else (130 if interrupted else 0)


def table(results: list[dict]) -> str:
    rows = []
    for mode in dict.fromkeys(r["mode"] for r in results):
        rs = [r for r in results if r["mode"] == mode]
        slowest = max([r["recovery_s"] for r in rs if r["recovery_s"] is not None], default=None)
        rows.append({"mode": mode, "trials": len(rs), "kills": sum(r["kills"] for r in rs),
                     "survived": sum(r["completed"] for r in rs),
                     "invariant violations": sum(len(r["violations"]) for r in rs),
                     "slowest recovery (s)": round(slowest, 2) if slowest is not None else "-"})
    return frame(rows).to_markdown(index=False)

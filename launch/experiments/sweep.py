"""``psbench sweep FILE.toml``: many runs from one file, resumable, then a report.

A sweep file (TOML; examples in ``benchmarks/sweeps/``)::

    name = "demo"            # default: the file's stem; runs go to runs/sweeps/<name>
    seeds = [0, 1, 2]        # every configuration runs once per seed
    target = 0.70            # the report's target: of the runs' metric (optional; default: the metric's)

    [base]                   # options of every run: the long options of `psbench run`
    benchmark = "fmnist-cnn" #   (`-` or `_`), values as on the command line;
    duration = "35s"         #   flags are true/false, --kill-ps takes a string or a list
    kill-ps = "33%"

    [grid]                   # lists: every combination is a configuration
    mode = ["checkpoint", "chain", "stateless"]
    kill-ps = ["", "33%", "33%,67%"]     # "" = no kill

    [[extra]]                # more configurations, each merged over [base] only
    mode = "none"
    kill-ps = ""

Configurations = the grid's cross product (with no grid: [base] itself) plus
the extras; identical ones are run once. Options on the ``psbench sweep``
command line fix that option for every run: they override [base], the
extras, and remove the key from [grid] (``--seed N`` or ``--seeds 0,1`` replace
``seeds``). Every run's configuration is built and validated before anything
starts.

Runs go seed by seed (all configurations of seed 0 first), each into
``<out>/runs/<label>-s<seed>.partial/``, renamed to ``<out>/runs/<label>-s<seed>/``
once its summary is written: a run directory is complete or absent, and a
sweep killed even with SIGKILL loses no finished run. Re-running the same
command skips finished runs (their configuration must match) and deletes
stale ``.partial`` folders. A run whose training failed (``completed: false``)
is finished: the report marks it. At the end the sweep report is written to
``reports/<name>/report.md``.

``--keep DIR`` carries a sweep from one machine to the next (a sweep longer than
a session, a CI box that starts empty): each finished run's record (its
configuration, summary, command and the PS's events: what the report reads) is
copied into ``DIR/<label>-s<seed>/`` (or, ``--keep FILE.tar.xz``, into one compressed
archive: launch/experiments/kept.py), and a run kept there that the sweep directory lacks
is put back before the sweep starts, so it is not run again. Commit it (e.g.
``reports/outage/finished.tar.xz``) and the sweep resumes elsewhere.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import fcntl
import itertools
import json
import os
import shlex
import shutil
import signal
import sys
import time
import tomllib
import traceback
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from benchmarks import registry
from psmodes.atomic import write_text_atomic
from psmodes.config import RAN_BEFORE_ITS_FIELD, ConfigError, RunConfig, read_user_file

from ..analysis import naming
from ..analysis.claims import KNOWN as claims_known
from ..analysis.machine import machine_info
from ..analysis.report import write_report
from ..driver.options import OneLineParser, add_run_options, config_from_args, resolve_data, run_options, run_parser
from ..driver.runner import raise_interrupt, run_job
from .kept import kept_store

TOP_KEYS = ("name", "description", "seeds", "target", "claims", "base", "grid", "extra")
NOT_IN_FILE = {"out": "the sweep puts each run in <out>/runs/", "dry_run": "use psbench sweep --dry-run",
               "quiet": "use psbench sweep --quiet", "seed": "use the top-level seeds = [...]"}
SWEEP_OPTIONS = ("out", "dry_run", "quiet")  # run options with a sweep meaning on `psbench sweep`


@dataclass
class PlannedRun:
    slug: str            # directory name: <label>-s<seed>
    label: str           # the configuration's name
    seed: int
    argv: list[str]      # `psbench run` options (without --out)
    config: RunConfig


@dataclass
class Sweep:
    name: str
    file: Path
    out: Path
    target: float | None
    seeds: list[int]
    runs: list[PlannedRun]
    text: str
    claims: str | None = None  # a study whose claims the report checks (launch/analysis/claims.py)

    @property
    def runs_dir(self) -> Path:
        return self.out / "runs"


# ---------------------------------------------------------------- the run options

def _dest(key: str, where: str, options: dict) -> str:
    """The option a sweep file's key names (the long option of psbench run, with - or _)."""
    dest = str(key).strip().lstrip("-").replace("-", "_")
    if dest in NOT_IN_FILE:
        raise ConfigError(f"{where}: key {key!r} does not belong in a sweep file ({NOT_IN_FILE[dest]})")
    if dest not in options:
        names = [o.flag[2:] for d, o in options.items() if d not in NOT_IN_FILE]
        close = difflib.get_close_matches(str(key).replace("_", "-"), names, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else "; the keys are the long options of psbench run"
        raise ConfigError(f"{where}: unknown key {key!r}{hint}")
    return dest


def option_argv(dest: str, value, where: str, options: dict) -> list[str]:
    """One option and its value -> `psbench run` arguments."""
    opt = options[dest]
    flag = opt.flag
    if opt.kind in ("flag", "negated"):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {flag[2:]} is a flag; write true or false, not {value!r}")
        return [flag] if value else []
    if opt.kind == "list":
        items = value if isinstance(value, list) else [value]
        out = []
        for item in items:
            if isinstance(item, (dict, list, bool)):
                raise ConfigError(f"{where}: {flag[2:]} takes strings such as \"20s\" or \"33%,67%\", not {item!r}")
            if str(item).strip():
                out.append(f"{flag}={item}")
        return out
    if isinstance(value, (list, dict)):
        raise ConfigError(f"{where}: {flag[2:]} takes one value, not {value!r} (lists belong in [grid])")
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {flag[2:]} takes a value, not {str(value).lower()}")
    return [f"{flag}={value}"]


def options_argv(values: dict, options: dict) -> list[str]:
    """dest -> value (merged, validated keys) -> `psbench run` arguments, in a stable order."""
    argv = []
    for dest in sorted(values):
        argv += option_argv(dest, values[dest], f"option {options[dest].flag}", options)
    return argv


# ---------------------------------------------------------------- the command line

SWEEP_HELP = {
    "--out": "sweep directory (default: runs/sweeps/<name>); re-running the same command resumes it",
    "--dry-run": "list the runs (done / to run) with their psbench run commands; start nothing",
    "--quiet": "no progress bar",
}


def add_sweep_parser(sub) -> None:
    sweep = sub.add_parser("sweep", help="the runs of a sweep file (resumable), then a report",
                           description="Options of `psbench run` given here are fixed for every run of the sweep: "
                                       "they override the file's [base], [[extra]] and [grid] entries.")
    sweep.add_argument("file", help="a sweep file, e.g. benchmarks/sweeps/demo.toml")
    add_run_options(sweep)
    for action in sweep._actions:
        if action.option_strings and action.dest != "help":
            action.default = argparse.SUPPRESS  # only what the user typed overrides the file
            action.help = SWEEP_HELP.get(max(action.option_strings, key=len), action.help)
    sweep.add_argument("--seeds", help="comma-separated seeds, replacing the file's seeds (e.g. 0 or 0,1,2)")
    sweep.add_argument("--report-dir", help="where the report goes (default: reports/<name>)")
    sweep.add_argument("--target", type=float, help="the report's target of the runs' metric (default: the file's, else the metric's own)")
    sweep.add_argument("--keep", metavar="DIR|FILE.tar.xz",
                       help="keep each finished run's record here (a folder, or one compressed archive), and take "
                            "the runs kept here as finished: commit it to resume the sweep on another machine "
                            "(e.g. reports/outage/finished.tar.xz)")
    sweep.add_argument("--task", type=int, metavar="I",
                       help="run only the sweep's run number I (0-based, as --dry-run lists them) and write no "
                            "report: one task of a Slurm job array (psbench slurm --array)")


def parse_sweep_args(argv: list[str]) -> argparse.Namespace:
    """``psbench sweep FILE [options]`` alone (psbench slurm passes a sweep's options on)."""
    parser = OneLineParser(prog="psbench")
    add_sweep_parser(parser.add_subparsers(dest="command", parser_class=OneLineParser))
    return parser.parse_args(["sweep", *argv])


def load_from_args(a: argparse.Namespace) -> "Sweep":
    """The sweep of parsed ``psbench sweep`` arguments: the options typed fix their key for every run."""
    seeds = parse_seeds(a.seeds) if a.seeds is not None else None
    overrides = {k: v for k, v in vars(a).items()
                 if k not in ("command", "file", "seeds", "report_dir", "target", "task", "keep")}
    return load(a.file, overrides=overrides, seeds=seeds, out=getattr(a, "out", None), target=a.target)


# ---------------------------------------------------------------- reading a sweep file

def _table(doc: dict, key: str, where: str) -> dict:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} must be a table ([{key}]), not {value!r}")
    return value


def _options(table: dict, where: str, options: dict, lists: bool = False) -> dict:
    out = {}
    for key, value in table.items():
        dest = _dest(key, where, options)
        if dest in out:
            raise ConfigError(f"{where}: {key!r} is given twice (with - and _)")
        if lists:
            if not isinstance(value, list) or not value:
                raise ConfigError(f"{where}: {key} must be a non-empty list of values, e.g. {key} = [1, 2]")
            for v in value:
                option_argv(dest, v, where, options)
        else:
            option_argv(dest, value, where, options)
        out[dest] = value
    return out


def _seeds(value, where: str) -> list[int]:
    items = value if isinstance(value, list) else [value]
    if not items or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in items):
        raise ConfigError(f"{where}: seeds must be a list of whole numbers >= 0, e.g. seeds = [0, 1, 2]; got {value!r}")
    return list(dict.fromkeys(items))


def parse_seeds(text: str) -> list[int]:
    try:
        return _seeds([int(s) for s in str(text).split(",") if s.strip()], "--seeds")
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: write whole numbers separated by commas, e.g. 0,1,2") from None


def load(path: str | Path, overrides: dict | None = None, seeds: list[int] | None = None,
         out: str | None = None, target: float | None = None) -> Sweep:
    """Reads, expands and validates a sweep; raises ConfigError (one line) on bad input."""
    path = Path(path)
    text = read_user_file(path, "sweep file", f"sweep file {path} not found (the examples are in benchmarks/sweeps/)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for key in doc:
        if key not in TOP_KEYS:
            close = difflib.get_close_matches(key, TOP_KEYS, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the top-level keys are {', '.join(TOP_KEYS)}"
            raise ConfigError(f"{path}: unknown top-level key {key!r}{hint} (run options go in [base] or [grid])")
    options = run_options()
    name = naming.sanitize(str(doc.get("name") or path.stem))
    if not name:
        raise ConfigError(f"{path}: name {doc.get('name')!r} gives an empty folder name")
    file_seeds = _seeds(doc.get("seeds", [0]), f"{path}")
    claims = doc.get("claims")
    if claims is not None and claims not in claims_known:
        raise ConfigError(f"{path}: claims {claims!r}: psbench knows the claims of {', '.join(claims_known)}")
    if target is None and "target" in doc:
        target = doc["target"]
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float)) or not target > 0):
        raise ConfigError(f"{path}: target must be a positive value of the runs' metric, got {target!r}")
    base = _options(_table(doc, "base", str(path)), f"{path} [base]", options)
    grid = _options(_table(doc, "grid", str(path)), f"{path} [grid]", options, lists=True)
    extras_doc = doc.get("extra", [])
    if isinstance(extras_doc, dict):
        extras_doc = [extras_doc]
    if not isinstance(extras_doc, list) or not all(isinstance(e, dict) for e in extras_doc):
        raise ConfigError(f"{path}: extra must be tables: write [[extra]] before each one")
    extras = [_options(e, f"{path} [[extra]] #{i + 1}", options) for i, e in enumerate(extras_doc)]
    fixed = {}
    for dest, value in (overrides or {}).items():
        if dest in SWEEP_OPTIONS:
            continue
        if dest == "seed":
            seeds = [value] if seeds is None else seeds
            continue
        fixed[dest] = value
    seeds = _seeds(seeds, "--seeds") if seeds is not None else file_seeds

    # the configurations, in file order: grid combinations, then extras; a command-line option fixes its key
    # a grid key fixed on the command line stays in the names (chain-kills1-sync-s0 whatever the override)
    kept = [k for k, v in grid.items() if k in fixed and len(v) > 1]
    grid = {k: v for k, v in grid.items() if k not in fixed}
    options_list = [{**base, **dict(zip(grid, combo)), **fixed} for combo in itertools.product(*grid.values())]
    options_list += [{**base, **extra, **fixed} for extra in extras]
    parser = run_parser()
    configs: list[tuple[list[str], RunConfig]] = []
    seen: set[str] = set()
    data_checked: dict[tuple, str | None] = {}
    for values in options_list:
        argv = options_argv(values, options)
        try:
            cfg = config_from_args(parser.parse_args(argv + [f"--seed={seeds[0]}"]))
            key = (cfg.benchmark, cfg.data_dir)
            if key not in data_checked:
                resolve_data(cfg)
                data_checked[key] = cfg.data_dir
            cfg.data_dir = data_checked[key]
        except ConfigError as exc:
            raise ConfigError(f"{path}: the run `psbench run {shlex.join(argv)}`: {exc}") from None
        why = target is not None and registry.get(cfg.benchmark).metric.valid_target(target)
        if why:  # e.g. an accuracy above 1
            raise ConfigError(f"{path}: {why} (benchmark {cfg.benchmark})")
        ident = naming.key_of(cfg.to_dict())
        if ident not in seen:
            seen.add(ident)
            configs.append((argv, cfg))
    dicts = [cfg.to_dict() for _, cfg in configs]
    keys = naming.varying_keys(dicts)
    keys += [f for f in (options[k].field for k in kept) if f and f in dicts[0] and f not in keys]
    rank = {k: i for i, k in enumerate(naming.ORDER)}
    keys.sort(key=lambda k: (rank.get(k, len(naming.ORDER)), k))
    labels = naming.labels(dicts, keys) if keys else [configs[0][1].mode]  # nothing varies: name it by its mode
    out_dir = Path(out) if out else Path("runs") / "sweeps" / name
    runs = []
    for seed in seeds:
        for (argv, cfg), label in zip(configs, labels):
            runs.append(PlannedRun(f"{label}-s{seed}", label, seed, argv + [f"--seed={seed}"],
                                   dataclasses.replace(cfg, seed=seed)))
    return Sweep(name, path, out_dir, None if target is None else float(target), seeds, runs, text, claims)


# ---------------------------------------------------------------- state on disk

def finished(sweep: Sweep, run: PlannedRun) -> bool:
    """Whether ``run`` is done; a finished run of another configuration is an error."""
    final = sweep.runs_dir / run.slug
    if not final.exists():
        return False
    try:
        old = json.loads((final / "config.json").read_text())
    except (OSError, ValueError):
        raise ConfigError(f"{final} has no readable config.json; remove it") from None
    if not (final / "summary.json").exists():
        raise ConfigError(f"{final} has no summary.json (not written by psbench sweep?); remove it")
    new = run.config.to_dict()
    # a run recorded before a field existed had its default, or ran as RAN_BEFORE_ITS_FIELD says
    defaults = {**RunConfig().to_dict(), **RAN_BEFORE_ITS_FIELD}
    for key in sorted(set(old) | set(new)):
        if key in ("run_dir", "data_dir", "format_version", "hosts"):  # a job array task may land elsewhere
            continue
        if old.get(key, defaults.get(key)) != new.get(key):
            raise ConfigError(f"{final} holds a finished run of another configuration ({key}: {old.get(key)!r} "
                              f"there, {new.get(key)!r} now); use another --out or remove it")
    return True


def keep_run(final: Path, keep: Path) -> None:
    """Keep the record of the finished run in ``final`` in ``keep`` (a folder or an archive:
    launch/experiments/kept.py), whole or not at all."""
    kept_store(keep).add(final)


def sync_kept(sweep: Sweep, keep: Path) -> int:
    """Before a sweep with ``--keep``: put back the kept runs that the sweep directory lacks (their
    config.json's run_dir set to where they are now) and keep the finished ones not kept yet;
    how many came back."""
    store = kept_store(keep)
    kept = store.names()
    restored = 0
    for run in sweep.runs:
        final = sweep.runs_dir / run.slug
        if not final.exists() and run.slug in kept:
            partial = sweep.runs_dir / f"{run.slug}.partial"  # a copy cut short is a stale .partial
            shutil.rmtree(partial, ignore_errors=True)
            store.restore(run.slug, partial)
            config = json.loads((partial / "config.json").read_text())
            config["run_dir"] = str(final.resolve())
            write_text_atomic(partial / "config.json", json.dumps(config, indent=2) + "\n")
            os.rename(partial, final)
            restored += 1
        if final.exists() and run.slug not in kept and finished(sweep, run):
            store.add(final)
    return restored


class Lock:
    """One sweep process per sweep directory (flock: released even on SIGKILL)."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.fh = open(out / ".lock", "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.seek(0)
            holder = self.fh.read().strip() or "?"
            self.fh.close()
            raise ConfigError(f"another psbench sweep (pid {holder}) is running in {out}") from None
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(str(os.getpid()))
        self.fh.flush()

    def release(self) -> None:
        self.fh.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def plan_record(sweep: Sweep, command: list[str]) -> dict:
    return {
        "name": sweep.name, "file": str(sweep.file), "command": shlex.join(["psbench", *command]),
        "target": sweep.target, "seeds": sweep.seeds, "claims": sweep.claims,
        "runs": [{"slug": r.slug, "label": r.label, "seed": r.seed,
                  "command": shlex.join(["psbench", "run", *r.argv, "--out", str(sweep.runs_dir / r.slug)])}
                 for r in sweep.runs],
    }


# ---------------------------------------------------------------- running

class SweepProgress:
    """A tqdm bar over runs on a terminal (runs done, the current run, the time left);
    plain lines otherwise. Time left = the runs still to go times the mean time of the
    runs finished so far (before the first: the run length plus a start-up allowance),
    less what the current run has already taken."""

    STARTUP_S = 12.0  # a run's start-up and shut-down on 2 cores, until one is measured

    def __init__(self, total: int, done: int, quiet: bool, expected_s: float | None = None) -> None:
        self.total, self.done, self.quiet = total, done, quiet
        self.expected_s = (expected_s or 30.0) + self.STARTUP_S
        self.bar = None
        self.walls: list[float] = []
        self.t_run = None
        self.last_refresh = 0.0
        if not quiet and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=done, unit="run", dynamic_ncols=True, file=sys.stderr,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} runs [{elapsed}{postfix}]")

    def left_s(self) -> float:
        per_run = sum(self.walls) / len(self.walls) if self.walls else self.expected_s
        running = time.monotonic() - self.t_run if self.t_run is not None else 0.0
        to_go = self.total - self.done - (1 if self.t_run is not None else 0)
        return to_go * per_run + (max(per_run - running, 0.0) if self.t_run is not None else 0.0)

    def start(self, slug: str) -> None:
        self.t_run = time.monotonic()
        if self.bar is not None:
            self.bar.set_description_str(slug, refresh=False)
            self.tick(None, None, force=True)
        elif not self.quiet:
            print(f"[{self.done + 1}/{self.total}] {slug}: running; about {_minutes(self.left_s())} left",
                  file=sys.stderr, flush=True)

    def tick(self, elapsed, step, force: bool = False) -> None:
        if self.bar is None or (not force and time.monotonic() - self.last_refresh < 0.5):
            return
        self.last_refresh = time.monotonic()
        parts = [f"run {time.monotonic() - self.t_run:.0f}s"]
        if step is not None:
            parts.append(f"step {step}")
        parts.append(f"~{_minutes(self.left_s())} left")
        self.bar.set_postfix_str(", ".join(parts), refresh=False)
        self.bar.refresh()

    def finish(self, line: str) -> None:
        self.done += 1
        self.walls.append(time.monotonic() - self.t_run)
        self.t_run = None
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(line)
        elif not self.quiet:
            left = self.left_s()
            print(f"[{self.done}/{self.total}] {line}" + (f"; about {_minutes(left)} left" if left else ""),
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _result_line(run: PlannedRun, summary: dict, wall: float) -> str:
    value, name = summary.get("final_metric"), (summary.get("metric") or {}).get("name", "metric")
    status = "completed" if summary.get("completed") else f"NOT COMPLETED ({summary.get('exit_reason')})"
    return f"{run.slug}: {status}, final {name} {'-' if value is None else f'{value:.3f}'}, {wall:.0f} s"


def execute(sweep: Sweep, command: list[str], quiet: bool = False, report_dir: str | None = None,
            keep: str | None = None) -> int:
    """Runs what is left of ``sweep``, then writes its report. Exit status: 0 when every run
    is finished, 1 when a run could not be (the report lists it), 130 when interrupted.
    ``keep``: see ``--keep`` in the module docstring."""
    lock = Lock(sweep.out)
    previous_term = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        sweep.runs_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(sweep.out / "sweep.json", json.dumps(plan_record(sweep, command), indent=2) + "\n")
        write_text_atomic(sweep.out / "sweep.toml", sweep.text)
        if not (sweep.out / "machine.json").exists():
            write_text_atomic(sweep.out / "machine.json", json.dumps(machine_info(), indent=2) + "\n")
        for stale in sorted(sweep.runs_dir.glob("*.partial")):
            shutil.rmtree(stale, ignore_errors=True)
        restored = sync_kept(sweep, Path(keep)) if keep else 0
        if keep:
            kept_store(keep).add_sweep(sweep.out)  # what the report reads of the sweep itself
        todo = [r for r in sweep.runs if not finished(sweep, r)]
        done = len(sweep.runs) - len(todo)
        if not quiet:
            came_back = f", {restored} of them from {keep}" if restored else ""
            print(f"sweep {sweep.name}: {len(sweep.runs)} runs ({done} already finished{came_back}) in {sweep.out}",
                  file=sys.stderr, flush=True)
        lengths = [r.config.duration_s for r in todo if r.config.duration_s]
        progress = SweepProgress(len(sweep.runs), done, quiet, max(lengths) if lengths else None)
        broken = 0
        interrupted = False
        try:
            for run in todo:
                partial, final = sweep.runs_dir / f"{run.slug}.partial", sweep.runs_dir / run.slug
                cfg = dataclasses.replace(run.config, run_dir=str(partial.resolve()))
                progress.start(run.slug)
                t0 = time.monotonic()
                try:
                    summary = run_job(cfg, quiet=True, tick=progress.tick)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - a launcher bug: keep the evidence, go on
                    broken += 1
                    partial.mkdir(parents=True, exist_ok=True)
                    (partial / "sweep-error.txt").write_text(traceback.format_exc())
                    progress.finish(f"{run.slug}: LAUNCHER ERROR {type(exc).__name__}: {exc} (kept in {partial})")
                    continue
                if summary.get("exit_reason") == "interrupted by the user":
                    interrupted = True  # not finished: stays .partial and runs again next time
                    break
                cfg.run_dir = str(final.resolve())
                cfg.save(partial / "config.json")
                os.rename(partial, final)
                _fsync_dir(sweep.runs_dir)
                if keep:
                    keep_run(final, Path(keep))
                progress.finish(_result_line(run, summary, time.monotonic() - t0))
                if str(summary.get("exit_reason", "")).endswith("(interrupted by the user)"):
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
        finally:
            progress.close()
        if interrupted:
            print(f"psbench: sweep interrupted; finished runs are kept in {sweep.runs_dir}; "
                  f"run the same command again to resume", file=sys.stderr)
            return 130
        path = write_report(sweep.out, Path(report_dir) if report_dir else Path("reports") / sweep.name,
                            target=sweep.target)
        print(f"sweep directory: {sweep.out}")
        print(f"report: {path}")
        return 1 if broken else 0
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        lock.release()


def execute_task(sweep: Sweep, index: int, command: list[str], quiet: bool = False) -> int:
    """Run number ``index`` of ``sweep`` only, and no report: one task of a Slurm job array
    (the report job runs ``psbench report`` on the sweep directory when the array is done).
    Tasks run concurrently, so there is no sweep-wide lock and only this run's stale
    ``.partial`` folder is removed. Exit status 0 when the run is finished."""
    if not 0 <= index < len(sweep.runs):
        raise ConfigError(f"--task {index}: the sweep has runs 0..{len(sweep.runs) - 1}")
    run = sweep.runs[index]
    sweep.runs_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(sweep.out / "sweep.json", json.dumps(plan_record(sweep, command), indent=2) + "\n")
    write_text_atomic(sweep.out / "sweep.toml", sweep.text)
    if not (sweep.out / "machine.json").exists():
        write_text_atomic(sweep.out / "machine.json", json.dumps(machine_info(), indent=2) + "\n")
    if finished(sweep, run):
        print(f"{run.slug}: already finished", file=sys.stderr)
        return 0
    partial, final = sweep.runs_dir / f"{run.slug}.partial", sweep.runs_dir / run.slug
    shutil.rmtree(partial, ignore_errors=True)
    cfg = dataclasses.replace(run.config, run_dir=str(partial.resolve()))
    t0 = time.monotonic()
    summary = run_job(cfg, quiet=quiet)
    if summary.get("exit_reason") == "interrupted by the user":
        return 130
    cfg.run_dir = str(final.resolve())
    cfg.save(partial / "config.json")
    os.rename(partial, final)
    _fsync_dir(sweep.runs_dir)
    print(_result_line(run, summary, time.monotonic() - t0), file=sys.stderr)
    return 0


def dry_run(sweep: Sweep) -> int:
    rows = []
    for run in sweep.runs:
        try:
            state = "done" if finished(sweep, run) else "to run"
        except ConfigError as exc:
            state = f"conflict: {exc}"
        rows.append(f"{state:7} {shlex.join(['psbench', 'run', *run.argv, '--out', str(sweep.runs_dir / run.slug)])}")
    print(f"# sweep {sweep.name}: {len(sweep.runs)} runs into {sweep.out}")
    print("\n".join(rows))
    return 0

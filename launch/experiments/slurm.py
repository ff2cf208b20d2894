"""``psbench slurm``: a Slurm batch script for a run or a sweep, optionally submitted.

    psbench slurm --benchmark synthetic --mode checkpoint --duration 60s --kill-ps 20s \\
        --nodes 2 --tasks-per-node 4 --time 00:10:00 --partition gpu --account proj [--submit]
    psbench slurm benchmarks/sweeps/demo.toml --array --nodes 1 --time 00:30:00 --submit

The script runs ``psbench run`` (or ``psbench sweep``) with the same options
inside the allocation, where the launcher takes the node list and the task
slots from Slurm (``SLURM_JOB_NODELIST``, ``SLURM_TASKS_PER_NODE``) and kills
a PS on another node through ``srun --overlap``. ``--array`` turns a sweep
into a job array, one run per task (``psbench sweep FILE --task $SLURM_ARRAY_TASK_ID``),
plus a report job that starts after the whole array (``--dependency=afterany``)
and writes one combined report.

A dead rank's task slot is not given back to the job, so a replacement needs
a free one: unless ``--tasks-per-node`` is given, the allocation holds the
run's ranks plus one spare task per scheduled kill (modes that repair in
place). ``hostfiles/slurm/psbench.sbatch`` is a template to edit by hand.
"""
from __future__ import annotations

import argparse
import math
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from psmodes.config import ConfigError

from ..driver.hosts import replacement_slots
from ..driver.options import OneLineParser, config_from_args, run_parser
from . import sweep as sw

ROOT = Path(__file__).resolve().parents[2]
_TIME = re.compile(r"^(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)$")


def parse_time(text: str) -> str:
    """``HH:MM:SS`` or ``D-HH:MM:SS`` (Slurm's --time), checked; returned as given."""
    m = _TIME.match(str(text).strip())
    if not m or not any(int(g or 0) for g in m.groups()):
        raise ConfigError(f"--time {text!r}: write HH:MM:SS (or D-HH:MM:SS), e.g. 00:30:00")
    return str(text).strip()


def add_slurm_options(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("slurm")
    s.add_argument("--nodes", type=int, default=1, help="nodes of the allocation")
    s.add_argument("--tasks-per-node", type=int, help="MPI slots per node (default: the ranks, --spares among "
                   "them, plus a slot per replacement that may be spawned)")
    s.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node (one per local rank with --device cuda)")
    s.add_argument("--time", default="00:30:00", help="wall-clock limit, HH:MM:SS")
    s.add_argument("--partition", help="Slurm partition")
    s.add_argument("--account", help="Slurm account")
    s.add_argument("--job-name", help="default: psbench-<benchmark>-<mode> or the sweep's name")
    s.add_argument("--array", action="store_true", help="a sweep as a job array (one run per task) + a report job")
    s.add_argument("--script", help="where the batch script goes (default: runs/slurm/<job name>.sbatch)")
    s.add_argument("--submit", action="store_true", help="also sbatch it and print the job id")


@dataclass
class Resources:
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    time: str
    partition: str | None
    account: str | None


def resources(a: argparse.Namespace, ranks: int, spawns: int) -> tuple[Resources, list[str]]:
    """The allocation (validated) and notes for the script: ``ranks`` (the spares of --spares
    among them) and a slot for each replacement that may be spawned."""
    if isinstance(a.nodes, bool) or a.nodes < 1:
        raise ConfigError(f"--nodes must be a positive integer, got {a.nodes}")
    if a.gpus_per_node < 0:
        raise ConfigError(f"--gpus-per-node must be >= 0, got {a.gpus_per_node}")
    time_limit = parse_time(a.time)
    per_node = a.tasks_per_node if a.tasks_per_node is not None else math.ceil((ranks + spawns) / a.nodes)
    if per_node < 1:
        raise ConfigError(f"--tasks-per-node must be a positive integer, got {per_node}")
    slots = per_node * a.nodes
    if slots < ranks:
        raise ConfigError(f"the run has {ranks} ranks but --nodes {a.nodes} --tasks-per-node {per_node} "
                          f"gives {slots} task slots")
    notes = [f"{ranks} ranks in {slots} task slots ({a.nodes} node(s) x {per_node})"]
    if slots - ranks < spawns:
        notes.append(f"WARNING: {spawns} replacement(s) may be spawned but only {slots - ranks} slot(s) are free; "
                     "a respawn fails when the allocation is full")
    elif spawns:
        notes.append(f"{slots - ranks} free slot(s) for spawned replacements (a dead rank's slot is not given back)")
    return Resources(a.nodes, per_node, a.gpus_per_node, time_limit, a.partition, a.account), notes


def header(res: Resources, job_name: str, output: str, array: str | None = None) -> list[str]:
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={res.nodes}",
             f"#SBATCH --ntasks-per-node={res.tasks_per_node}", f"#SBATCH --time={res.time}",
             f"#SBATCH --output={output}"]
    if res.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={res.gpus_per_node}")
    if res.partition:
        lines.append(f"#SBATCH --partition={res.partition}")
    if res.account:
        lines.append(f"#SBATCH --account={res.account}")
    if array:
        lines.append(f"#SBATCH --array={array}")
    return lines


def prologue() -> list[str]:
    """cd to the checkout and use its venv (the ranks import psmodes from it)."""
    venv_bin = Path(sys.executable).parent
    return ["set -euo pipefail", f"cd {shlex.quote(str(ROOT))}",
            f"export PATH={shlex.quote(str(venv_bin))}:\"$PATH\"",
            f"export PYTHONPATH={shlex.quote(str(ROOT))}\"${{PYTHONPATH:+:$PYTHONPATH}}\""]


def psbench_argv() -> list[str]:
    return [sys.executable, "-m", "launch.cli"]


def script_text(head: list[str], body: list[str], notes: list[str], generated_by: list[str]) -> str:
    """#SBATCH lines, then comments (how it was made, the slots), then the commands."""
    comments = ["#", f"# generated by: {shlex.join(['psbench', *generated_by])}"] + [f"# {n}" for n in notes]
    return "\n".join(head + comments + ["#"] + body) + "\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def sbatch(script: Path, dependency: str | None = None, timeout: float = 60.0) -> str:
    """Submit; the job id (``sbatch --parsable``). ConfigError (one line) when Slurm refuses."""
    cmd = ["sbatch", "--parsable"] + ([f"--dependency={dependency}"] if dependency else []) + [str(script)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ConfigError("sbatch not found: is this a Slurm login node? (the script is written; "
                          f"submit it with sbatch {script})") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"sbatch did not answer in {timeout:.0f} s") from None
    if out.returncode != 0:
        reason = (out.stderr.strip() or out.stdout.strip()).splitlines()
        raise ConfigError(f"sbatch refused {script}: {reason[-1] if reason else f'exit {out.returncode}'}")
    return out.stdout.strip().split(";")[0]


PATH_OPTIONS = ("--out", "--hostfile", "--data-dir", "--report-dir")


def absolute_paths(argv: list[str]) -> list[str]:
    """The script runs from the checkout: make the paths the user typed absolute."""
    out, i = [], 0
    while i < len(argv):
        item = argv[i]
        name, eq, value = item.partition("=")
        if name in PATH_OPTIONS and eq:
            out.append(f"{name}={Path(value).resolve()}")
        elif item in PATH_OPTIONS and i + 1 < len(argv):
            out += [item, str(Path(argv[i + 1]).resolve())]
            i += 1
        else:
            out.append(item)
        i += 1
    if out and not out[0].startswith("-"):
        out[0] = str(Path(out[0]).resolve())  # the sweep file
    return out


def cmd_slurm(argv: list[str]) -> int:
    """``psbench slurm [SWEEP.toml] [run or sweep options] [slurm options]``."""
    sp = OneLineParser(prog="psbench slurm [SWEEP.toml]", add_help=False, allow_abbrev=False,
                       description="Writes (and with --submit, submits) a Slurm batch script. Every option of "
                                   "psbench run (or, with a sweep file, of psbench sweep) is passed on.")
    add_slurm_options(sp)
    if "-h" in argv or "--help" in argv:
        print(sp.format_help())
        return 0
    a, rest = sp.parse_known_args(argv)
    rest = absolute_paths(rest)
    sweep_file = rest[0] if rest and not rest[0].startswith("-") else None
    if sweep_file:
        return _sweep(a, sweep_file, rest[1:], argv)
    if a.array:
        raise ConfigError("--array needs a sweep file: psbench slurm SWEEP.toml --array ...")
    return _run(a, rest, argv)


def _run(a, rest: list[str], argv: list[str]) -> int:
    ra = run_parser().parse_args(rest)
    if ra.dry_run:
        raise ConfigError("--dry-run belongs to psbench run; psbench slurm only writes the script")
    cfg = config_from_args(ra)
    res, notes = resources(a, cfg.n_ranks, replacement_slots(cfg))
    name = a.job_name or f"psbench-{cfg.benchmark}-{cfg.mode}"
    logs = Path("runs/slurm").resolve()
    logs.mkdir(parents=True, exist_ok=True)  # Slurm cannot open an --output in a missing folder
    out = Path(ra.out).resolve() if ra.out else None
    body = prologue()
    if out is None:  # one run directory per job
        body.append(f"OUT={shlex.quote(str(logs / name))}-\"$SLURM_JOB_ID\"")
        body.append(shlex.join([*psbench_argv(), "run", *rest]) + ' --out "$OUT"')
    else:
        body.append(shlex.join([*psbench_argv(), "run", *rest]))
    script = write(Path(a.script) if a.script else logs / f"{name}.sbatch",
                   script_text(header(res, name, str(logs / "%x-%j.out")), body, notes, ["slurm", *argv]))
    print(f"batch script: {script}")
    if a.submit:
        job = sbatch(script)
        print(f"submitted job {job}; output: {logs / f'{name}-{job}.out'}; run directory: "
              f"{out if out else logs / f'{name}-{job}'}")
    else:
        print(f"submit it with: sbatch {script}")
    return 0


def _sweep(a, file: str, rest: list[str], argv: list[str]) -> int:
    sa = sw.parse_sweep_args([file, *rest])
    if getattr(sa, "dry_run", False):
        raise ConfigError("--dry-run belongs to psbench sweep; psbench slurm only writes the script")
    plan = sw.load_from_args(sa)
    ranks = max(r.config.n_ranks for r in plan.runs)
    spawns = max(replacement_slots(r.config) for r in plan.runs)
    res, notes = resources(a, ranks, spawns)
    name = a.job_name or f"psbench-{plan.name}"
    logs = Path("runs/slurm").resolve()
    logs.mkdir(parents=True, exist_ok=True)  # Slurm cannot open an --output in a missing folder
    out = plan.out.resolve()
    report_dir = Path(sa.report_dir).resolve() if sa.report_dir else Path("reports", plan.name).resolve()
    fixed = list(rest)
    if not getattr(sa, "out", None):
        fixed += ["--out", str(out)]
    script_path = Path(a.script) if a.script else logs / f"{name}.sbatch"
    if not a.array:
        body = prologue() + [shlex.join([*psbench_argv(), "sweep", str(Path(file).resolve()), *fixed,
                                         "--report-dir", str(report_dir)])]
        script = write(script_path, script_text(header(res, name, str(logs / "%x-%j.out")), body, notes,
                                                ["slurm", *argv]))
        print(f"batch script: {script} ({len(plan.runs)} runs, one after another)")
        if a.submit:
            print(f"submitted job {sbatch(script)}; sweep directory: {out}; report: {report_dir / 'report.md'}")
        else:
            print(f"submit it with: sbatch {script}")
        return 0
    n = len(plan.runs)
    task = shlex.join([*psbench_argv(), "sweep", str(Path(file).resolve()), *fixed]) + ' --task "$SLURM_ARRAY_TASK_ID"'
    notes = notes + [f"job array: {n} tasks, one run each (psbench sweep --task I runs the sweep's run I)"]
    script = write(script_path, script_text(header(res, name, str(logs / "%x-%A_%a.out"), array=f"0-{n - 1}"),
                                            prologue() + [task], notes, ["slurm", *argv]))
    report_res = Resources(1, 1, 0, res.time, res.partition, res.account)
    report_body = prologue() + [shlex.join([*psbench_argv(), "report", str(out), "--out", str(report_dir)])]
    report_script = write(script.with_name(script.stem + "-report.sbatch"), script_text(
        header(report_res, f"{name}-report", str(logs / "%x-%j.out")), report_body,
        ["the report step: runs after every task of the array ended (--dependency=afterany:<array job>)"],
        ["slurm", *argv]))
    print(f"batch scripts: {script} (job array, {n} runs) and {report_script} (report)")
    if a.submit:
        job = sbatch(script)
        report_job = sbatch(report_script, dependency=f"afterany:{job}")
        print(f"submitted job array {job} ({n} tasks) and report job {report_job}; "
              f"sweep directory: {out}; report: {report_dir / 'report.md'}")
    else:
        print(f"submit them with: sbatch --dependency=afterany:$(sbatch --parsable {script}) {report_script}")
    return 0

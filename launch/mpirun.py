"""Builds the exact ``mpirun`` command line of a run (an argument list, never a
shell string) and the environment it needs.

Open MPI 5 from the venv, with ULFM (``--with-ft ulfm``) so that survivors
outlive a SIGKILLed PS; ``--oversubscribe --bind-to none`` when ranks
outnumber cores, the normal case on a laptop. One extra slot is requested for
each replacement the run may spawn.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from psmodes.config import RunConfig

ROOT_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}


def venv_bin() -> Path:
    return Path(sys.executable).parent


def find_mpirun() -> str | None:
    """The venv's mpirun (PyPI Open MPI with ULFM) first, then PATH."""
    candidate = venv_bin() / "mpirun"
    if candidate.exists():
        return str(candidate)
    return shutil.which("mpirun")


def mpirun_command(cfg: RunConfig, mpirun: str | None = None) -> list[str]:
    mpirun = mpirun or find_mpirun() or "mpirun"
    cmd = [mpirun, "--with-ft", "ulfm", "-np", str(cfg.n_ranks)]
    if cfg.oversubscribe:
        cmd += ["--oversubscribe", "--bind-to", "none"]
    cmd += ["-x", "PYTHONUNBUFFERED=1", "-x", "PATH"]
    cmd += [sys.executable, "-m", "psmodes.main", "--run-dir", str(Path(cfg.run_dir).resolve())]
    return cmd


def mpirun_env() -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(ROOT_ENV)
    env["PATH"] = f"{venv_bin()}{os.pathsep}{env.get('PATH', '')}"
    # the ranks import psmodes/benchmarks from the checkout even without an install
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMPI_MCA_btl_tcp_if_include", "lo")
    env.setdefault("PRTE_MCA_prte_silence_shared_fs", "1")
    return env

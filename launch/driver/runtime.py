"""Which Open MPI runtime launches a job (``--runtime``), and what it survives.

- ``pypi`` (the default): the venv's ``mpirun``, Open MPI 5.0.11 from PyPI with its bundled PRRTE 3.0.x.
  ULFM reports a rank's death and psbench repairs it in place; a host's lost daemon (``prted``) ends the
  whole job ("We cannot recover from this failure"), so a lost node is survived only by
  ``--recovery job-restart``.
- ``prrte5``: Debian unstable's PRRTE 5 (lost-daemon tolerance: openpmix/prrte PR 2443, in no 4.x tag), built
  by ``make setup-runtime`` (scripts/setup_runtime.sh) into a chroot, since it needs glibc >= 2.38. Only the
  launcher and its daemons are the chroot's (scripts/in_runtime.sh enters it with the host's processes,
  devices, temporary folders and this checkout bound in): the ranks run the venv's Python, mpi4py and
  Open MPI 5.0.11 libraries, whose PMIx 5 client talks to PMIx 7 (checked: ../shared/DESIGN.md, "Node loss
  in place"). Open MPI 6.0's own libraries are not used: their ULFM cannot spawn (ompi#12585).

On a cluster whose Open MPI already runs on PRRTE >= 5, ``pypi`` with that ``mpirun`` first on PATH is the
same thing; ``psbench doctor`` says what the runtime of this machine survives.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..analysis.machine import venv_bin

ROOT = Path(__file__).resolve().parents[2]
ENTER = ROOT / "scripts" / "in_runtime.sh"
SSH_AGENT = ROOT / "scripts" / "runtime_ssh.sh"  # PRRTE's plm_ssh_agent: in_runtime.sh on the other host
STAMP = ".psbench-runtime"


def runtime_dir() -> Path:
    return Path(os.environ.get("PSBENCH_RUNTIME_DIR") or ROOT / ".runtime" / "prrte5")


def installed() -> str | None:
    """The PRRTE 5 runtime's version line (None: ``make setup-runtime`` has not built it)."""
    try:
        return (runtime_dir() / STAMP).read_text().strip() or None
    except OSError:
        return None


def enter(argv: list[str], binds: list[str] = ()) -> list[str]:
    """``argv`` run inside the PRRTE 5 runtime, with the folders ``binds`` seen there too."""
    extra = [f"PSBENCH_RUNTIME_BINDS={':'.join(binds)}"] if binds else []
    return ["env", *extra, str(ENTER), *argv] if extra else [str(ENTER), *argv]


def data_binds(data_dir: str | None) -> list[str]:
    """The data folders a run's ranks read that the runtime's chroot would not show them: ``--data-dir`` or
    ``PSBENCH_DATA`` (absolute; /usr/share/datasets, where Debian's dataset packages put theirs, scripts/
    in_runtime.sh binds always). Seen: fmnist-cnn under --runtime prrte5 stopped with "Fashion-MNIST not
    found in /usr/share/datasets/fashion-mnist", a folder the chroot did not have."""
    found = [d for d in (data_dir, os.environ.get("PSBENCH_DATA")) if d]
    return [str(Path(d).resolve()) for d in found if ":" not in d]


def mpirun(runtime: str, multi_host: bool = False, binds: list[str] = ()) -> list[str] | None:
    """The command prefix of the runtime's mpirun (None: the venv's, as always). Over several hosts its
    daemons start through :data:`SSH_AGENT`, each from its launching host (no tree spawn: a daemon's
    agent would need the runtime's ssh set-up there too). The ranks find their own Open MPI install
    themselves (psmodes.main.find_own_open_mpi). ``binds``: folders the ranks read (:func:`data_binds`)."""
    if runtime != "prrte5":
        return None
    # a replacement that fails must not take the survivors' job with it (PRRTE 5 ends every job connected to
    # a failed one unless told: "A job is being terminated because a job it was connected to has failed")
    cmd = enter(["/usr/bin/mpirun", "--prtemca", "pmix_terminate_connected", "0"], binds)
    if multi_host:
        cmd += ["--prtemca", "plm_ssh_agent", str(SSH_AGENT), "--prtemca", "plm_ssh_no_tree_spawn", "1"]
    return cmd


def prrte_version(prte_info: list[str], timeout: float = 30.0) -> str | None:
    """The PRRTE version ``prte_info`` reports ("3.0.14"; None: it does not run)."""
    try:
        out = subprocess.run(prte_info, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stdout.splitlines():
        key, _, value = line.strip().partition(":")
        if key in ("PRTE", "PRRTE") and value.strip():  # 3.0.x says PRTE
            return value.strip()
    return None


def prte_info(runtime: str) -> list[str]:
    """The runtime's ``prte_info`` command."""
    return enter(["/usr/bin/prte_info"]) if runtime == "prrte5" else [str(venv_bin() / "prte_info")]


def survives_lost_daemon(version: str | None) -> bool:
    """PRRTE >= 5 keeps a job whose host's daemon died (PR 2443); 3.0.x (PyPI's Open MPI 5.0.11) does not."""
    head = (version or "").split(".")[0]
    return head.isdigit() and int(head) >= 5

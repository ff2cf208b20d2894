"""``psbench doctor``: is this machine ready to run psbench? Prints what it
finds; exit 1 with the reasons when something required is missing."""
from __future__ import annotations

import sys

from benchmarks import fmnist
from psmodes.config import RUNTIMES

from . import runtime
from .mpirun import find_mpirun, mpirun_env
from .ulfm import probe


def check(data_dir: str | None = None) -> int:
    problems: list[str] = []
    rows: list[tuple[str, str]] = [("python", sys.version.split()[0])]
    try:  # each of torch, mpi4py and Horovod is imported here, where its absence is reported
        import torch

        rows.append(("torch", f"{torch.__version__} (CUDA {'yes, ' + str(torch.cuda.device_count()) + ' devices' if torch.cuda.is_available() else 'no'})"))
    except ImportError:
        problems.append("torch is not installed: run make setup")
    try:  # the torchvision workloads (resnet18-fmnist, resnet50-synthetic) need it
        import torchvision

        rows.append(("torchvision", torchvision.__version__))
    except Exception as exc:  # noqa: BLE001 - an ImportError, or the nms RuntimeError of a mismatched pair
        rows.append(("torchvision", f"not usable ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"))
        problems.append("torchvision does not import: the resnet workloads cannot run; run make setup "
                        "(it installs torch with the torchvision built for it)")
    try:  # MPI.Get_library_version: importing mpi4py.MPI initialises MPI, which only doctor wants
        import mpi4py
        from mpi4py import MPI

        rows.append(("mpi4py", mpi4py.__version__))
        rows.append(("MPI library", MPI.Get_library_version().splitlines()[0].strip()))
    except ImportError:
        problems.append("mpi4py is not installed: run make setup")
    mpirun = find_mpirun()
    rows.append(("mpirun", mpirun or "not found"))
    ulfm = ulfm_available(mpirun)
    rows.append(("ULFM (fault tolerance)", "yes" if ulfm else "no"))
    if not mpirun:
        problems.append("mpirun not found: run make setup (Open MPI 5 from PyPI)")
    elif not ulfm:
        problems.append("this MPI has no ULFM: the recovery modes need Open MPI 5 built with --with-ft=ulfm "
                        "(or run them with --recovery job-restart)")
    rows += runtime_rows()
    try:  # imports torch and Horovod's MPI library: only here
        import horovod.torch as hvd

        rows.append(("horovod", f"{hvd.__version__ if hasattr(hvd, '__version__') else 'yes'} "
                                f"(MPI {'yes' if hvd.mpi_built() else 'no'}, NCCL {'yes' if hvd.nccl_built() else 'no'})"))
        if not hvd.mpi_built():
            problems.append("Horovod was built without MPI: rebuild it with make setup")
    except ImportError as exc:
        rows.append(("horovod", f"not importable ({exc})"))
        problems.append("Horovod is not importable: run make setup (or use --allreduce mpi)")
    try:
        rows.append(("Fashion-MNIST", str(fmnist.validate(data_dir))))
    except fmnist.DataError as exc:
        rows.append(("Fashion-MNIST", "not found (the synthetic benchmark still works)"))
        problems.append(str(exc))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if problems else 0


def runtime_rows() -> list[tuple[str, str]]:
    """What each runtime (--runtime; launch/driver/runtime.py) is here, and whether it outlives a lost daemon."""
    rows = []
    for name in RUNTIMES:
        if name == "prrte5" and not runtime.installed():
            rows.append((f"runtime {name}", "not built: make setup-runtime (as root) for node loss in place"))
            continue
        version = runtime.prrte_version(runtime.prte_info(name))
        if version is None:
            rows.append((f"runtime {name}", "does not run (its prte_info failed)"))
        elif runtime.survives_lost_daemon(version):
            rows.append((f"runtime {name}", f"PRRTE {version}: survives a lost daemon (a node lost in place)"))
        else:
            rows.append((f"runtime {name}", f"PRRTE {version}: a lost daemon ends the job "
                                            "(a node lost: --recovery job-restart)"))
    return rows


def ulfm_available(mpirun: str | None) -> bool:
    """Asks ompi_info afresh (launch.driver.ulfm caches the same question for psbench run)."""
    return bool(mpirun) and probe(mpirun, mpirun_env())

"""Builds the exact ``mpirun`` command line of a run (an argument list, never a
shell string) and the environment it needs.

Open MPI 5 from the venv, with ULFM (``--with-ft ulfm``) so that survivors
outlive a SIGKILLed PS; ``--oversubscribe --bind-to none`` when ranks
outnumber cores, the normal case on a laptop. With hosts (a hostfile,
``--hosts`` or a Slurm allocation) mpirun gets their slots and the placement
of launch/driver/hosts.py. ``--launcher horovodrun`` builds the equivalent
``horovodrun`` line.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

from psmodes.config import RunConfig
from psmodes.killpoints import ENV as KILL_POINT_ENV
from psmodes.pidfiles import alive
from psmodes.suspicion import FENCER_ENV

from ..analysis.machine import find_mpirun, venv_bin
from ..faultkinds import plan_of
from ..remote.routes import is_local
from . import runtime
from .hosts import from_specs, replacement_slots

ROOT_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}


def mpirun_command(cfg: RunConfig, mpirun: str | None = None) -> list[str]:
    """The run's ``mpirun`` line (``--runtime prrte5``: that runtime's, entered by scripts/in_runtime.sh):
    ULFM on (``--with-ft ulfm``) unless ``--no-ulfm``;
    with hosts, the slots (``--hostfile``) and the placement (``--map-by seq``)
    that launch/driver/hosts.py wrote into the run directory."""
    cmd = runtime.mpirun(cfg.runtime, _multi_host(cfg), runtime.data_binds(cfg.data_dir)) or \
        [mpirun or find_mpirun() or "mpirun"]
    cmd += ulfm_args(cfg)
    cmd += ["-np", str(cfg.n_ranks), *mapping_args(cfg)]
    cmd += ["-x", "PYTHONUNBUFFERED=1", "-x", "PATH", "-x", "PYTHONPATH"]
    return cmd + rank_command(cfg)


def ulfm_args(cfg: RunConfig) -> list[str]:
    """ULFM on, for the job mpirun starts (``--with-ft ulfm``) and for every job its ranks spawn later
    (``state_base_recoverable``: the runtime's default for a job that does not say). Without the second,
    a replacement spawned together with others (a refill's new spares and workers, one job of several
    processes) took the others with it when it died: the runtime ends a job that is not recoverable when
    one of its processes fails (seen: 11 unplanned deaths in a run of 20 worker failures with spares
    refilled; tests/test_failures.py names the case)."""
    return ["--with-ft", "ulfm", "--prtemca", "state_base_recoverable", "1"] if cfg.ulfm else []


def rank_command(cfg: RunConfig) -> list[str]:
    return [sys.executable, "-m", "psmodes.main", "--run-dir", str(Path(cfg.run_dir).resolve())]


def mapping_args(cfg: RunConfig) -> list[str]:
    run_dir = Path(cfg.run_dir).resolve()
    if not cfg.hosts:  # this machine only, as before: every slot is a rank
        return ["--oversubscribe", "--bind-to", "none"] if cfg.oversubscribe else []
    seq = f"seq:file={run_dir / 'rankmap'}" + (":OVERSUBSCRIBE" if cfg.oversubscribe else "")
    return ["--hostfile", str(run_dir / "hostfile"), "--map-by", seq, "--bind-to", "none"]


def find_horovodrun() -> str:
    candidate = venv_bin() / "horovodrun"
    return str(candidate) if candidate.exists() else (shutil.which("horovodrun") or "horovodrun")


def horovodrun_command(cfg: RunConfig) -> list[str]:
    """The same job through ``horovodrun``.

    horovodrun builds its own mpirun line with the single-dash ``-bind-to none
    -map-by slot``, which Open MPI 5 does not honour: on an oversubscribed node
    mpirun then refuses to bind ("more processes than cpus"). ``--binding-args``
    replaces those two options with ones Open MPI 5 reads, and ``--mpi-args``
    carries the ULFM flag; the mpirun horovodrun finds first on PATH must be the
    venv's (mpirun_env puts it first)."""
    if cfg.hosts:
        hosts = ",".join(h.spec() for h in from_specs(cfg.hosts))
    else:  # a slot for each rank and for each replacement the run may spawn
        hosts = f"localhost:{cfg.n_ranks + replacement_slots(cfg)}"
    binding = ["--bind-to", "none"]
    if cfg.hosts:
        binding += mapping_args(cfg)[2:4]  # the --map-by seq placement
    elif cfg.oversubscribe:
        binding += ["--map-by", ":OVERSUBSCRIBE"]
    mpi_args = ulfm_args(cfg)
    # `--x=value`: the values start with dashes, which argparse could take for options
    cmd = [find_horovodrun(), "-np", str(cfg.n_ranks), "-H", hosts, f"--binding-args={' '.join(binding)}"]
    if mpi_args:
        cmd.append(f"--mpi-args={' '.join(mpi_args)}")
    return cmd + rank_command(cfg)


SESSION_DIR = re.compile(r"ompi\.(\d+)")  # prterun's session directory: <tmpdir>/ompi.<its pid>


def purge_stale_sessions(tmpdir: str | None = None) -> list[str]:
    """Removes this user's Open MPI session directories whose prterun is gone; returns their paths.

    A prterun that dies of SIGKILL (the launcher's last resort, a killed launcher, a killed Slurm
    job) leaves ``/tmp/ompi.<pid>`` behind. When a later mpirun gets the same pid, as a 45-minute
    test run on a 32768-pid machine makes likely, it finds that directory's rendezvous files and
    stops at once: "The PMIx server's listener thread failed to start" (CI, 2026-12-01; reproduced
    by copying a stale directory to the next pid's name). Purged before every start."""
    base = Path(tmpdir or tempfile.gettempdir())
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = SESSION_DIR.fullmatch(entry.name)
        try:
            if not m or entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if alive(int(m.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(str(entry))
    return removed


# Open MPI's shared-memory transport (btl/sm) backs each rank's segment with
# /dev/shm/sm_segment.<host>.<uid>.<jobid>.<local rank>, 16 MiB sparse. A job whose ranks or
# prterun were SIGKILLed leaves them there: 98 of them (about 7 MB in use) after a day of test
# suites and perf sessions on the 2-core VM (2026-12-04). Not mapped by any process, they are
# nobody's; one younger than SEGMENT_MIN_AGE_S may be a starting rank's, not mapped yet.
SM_SEGMENT = re.compile(r"sm_segment\.(?P<host>.+)\.(?P<uid>\d+)\.[0-9a-f]+\.\d+")
SEGMENT_DIR = "/dev/shm"
SEGMENT_MIN_AGE_S = 60.0


def mapped_paths() -> set[str]:
    """The files mapped by the processes this user can see (``/proc/<pid>/maps``)."""
    paths: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # gone meanwhile, or another user's
            continue
        for line in text.splitlines():
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/"):
                paths.add(fields[5])
    return paths


def purge_stale_segments(folder: str = SEGMENT_DIR, min_age_s: float = SEGMENT_MIN_AGE_S) -> list[str]:
    """Removes this host's and this user's Open MPI shared-memory segments that no process maps
    and that are older than ``min_age_s``; returns their paths. Only this host's: a container that
    shares /dev/shm but not the PID namespace has its own host name, and its ranks' maps are not
    visible here (removing a live segment would break a rank that opens it later, a spawned one)."""
    host, uid, now = os.uname().nodename, os.geteuid(), time.time()
    stale = []
    try:  # resolved: the maps name the real path (/dev/shm is a link to /run/shm on some systems)
        entries = list(Path(folder).resolve().iterdir())
    except OSError:
        return stale
    for entry in entries:
        m = SM_SEGMENT.fullmatch(entry.name)
        if not m or m["host"] != host or int(m["uid"]) != uid:
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid and now - st.st_mtime >= min_age_s:
            stale.append(entry)
    if not stale:  # the usual case: no need to read every process's maps
        return []
    mapped = mapped_paths()
    removed = []
    for entry in stale:
        if str(entry) in mapped:
            continue
        try:
            entry.unlink()
        except OSError:
            continue
        removed.append(str(entry))
    return removed


def purge_leftovers() -> None:
    """What SIGKILLed jobs left that would trouble or fill up the next ones: called before every start."""
    purge_stale_sessions()
    purge_stale_segments()


# Open MPI start-up failures that say nothing of the run: no rank started, and the same command
# started again works. Seen in CI (2026-12-01, once in about 300 jobs): prterun printed "The PMIx
# server's listener thread failed to start" and exited, and the run was recorded as incomplete.
# purge_stale_sessions removes the cause known here; the retry covers a directory that a job
# started beside this one leaves meanwhile, or a cause not known yet.
# Seen too (two-host chaos, 2026-12-07, once in 100 jobs): the remote host's daemon, started over ssh,
# exited with status 213 before it reported back ("A daemon failed to report back after being spawned"),
# and the next job on the same hosts started.
TRANSIENT_START_FAILURES = (b"The PMIx server's listener thread failed to start",
                            b"A daemon failed to report back after being spawned")
START_RETRIES = 2  # how often the launcher starts such a job again


def transient_start_failure(log: bytes) -> str | None:
    """The line of Open MPI's output (``mpirun.log``) that names a transient start-up failure, if any."""
    for needle in TRANSIENT_START_FAILURES:
        at = log.find(needle)
        if at >= 0:
            return _message_at(log, at)
    return None


def start_message(log: bytes) -> str:
    """Open MPI's first message in ``log`` (a job that ended before any rank started): the text after
    its first line of dashes, or the log's first line."""
    dashes = log.find(b"---")
    if dashes >= 0:
        at = log.find(b"\n", dashes)
        if at >= 0 and log[at + 1:].strip():
            return _message_at(log, at + 1)
    first = log.strip().splitlines()
    return first[0].decode(errors="replace").strip() if first else "mpirun printed nothing"


def _message_at(log: bytes, at: int) -> str:
    """The message from ``at`` to a blank line or Open MPI's next line of dashes, on one line."""
    lines = []
    for line in log[at:].splitlines():
        if not line.strip() or line.startswith(b"---"):
            break
        lines.append(line.strip())
    return b" ".join(lines).decode(errors="replace")


def launch_command(cfg: RunConfig) -> list[str]:
    """The command that starts the job: mpirun or horovodrun (``--launcher``)."""
    return horovodrun_command(cfg) if cfg.launcher == "horovodrun" else mpirun_command(cfg)


TCP_FLAGS = "send,inplace,need-ack,need-csum,hetero-rdma"


def mpirun_env(cfg: RunConfig | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(ROOT_ENV)
    env["PATH"] = f"{venv_bin()}{os.pathsep}{env.get('PATH', '')}"
    # the ranks import psmodes/benchmarks from the checkout even without an install
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cfg is None or not _multi_host(cfg):  # one machine: TCP (if any) over loopback only
        env.setdefault("OMPI_MCA_btl_tcp_if_include", "lo")
    env.setdefault("PRTE_MCA_prte_silence_shared_fs", "1")
    # TCP without the RDMA pipeline (its defaults less "put"): large messages over TCP go by send/receive.
    # A pipelined receive from a peer that died mid-transfer (a host cut off, then its PS killed) stays on
    # ob1's recv_pending list, and the next rendezvous completion on any BTL spun in
    # mca_pml_ob1_recv_request_schedule_once for good: a later MPI_Irecv from a live peer on the same host
    # never returned (gdb; chaos over two hosts, hybrid trial-039: 4 of 4 runs hung, 0 of 2 without put;
    # docs/openmpi.md item 16). TCP's put is emulated by sends anyway.
    env.setdefault("OMPI_MCA_btl_tcp_flags", TCP_FLAGS)
    # Open MPI's blocking calls busy-poll; Horovod's background thread waits in them, so with more
    # threads than cores each waiting rank burnt a core the computing ranks needed (measured: the
    # plain Horovod trainer, 2 ranks on 2 cores, 129 ms a step, 77 ms of CPU; with yield 32 ms, 33 ms).
    # On dedicated cores, export OMPI_MCA_mpi_yield_when_idle=0 for the last microseconds of latency.
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    return env


def _multi_host(cfg: RunConfig) -> bool:
    return any(not is_local(h.name) for h in from_specs(cfg.hosts))


def rank_env(cfg) -> dict[str, str]:
    """What the ranks are told by the launcher's environment: ``PSBENCH_KILL_POINT`` (the
    point:NAME faults of the run, in order) and that the launcher fences suspects."""
    names = plan_of(cfg).point_names
    return {FENCER_ENV: "launcher", **({KILL_POINT_ENV: ",".join(names)} if names else {})}


def with_rank_env(cmd: list[str], cfg) -> list[str]:
    """mpirun: forward :func:`rank_env` to every rank (``-x``), also on other hosts
    (horovodrun forwards the launcher's whole environment itself)."""
    if cfg.launcher != "mpirun":
        return cmd
    at = cmd.index("-np")  # mpirun's own options, after its command (a runtime's may be several words)
    return [*cmd[:at], *[arg for name in rank_env(cfg) for arg in ("-x", name)], *cmd[at:]]

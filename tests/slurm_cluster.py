"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd from
Debian's ``slurm-wlm`` and ``munge``, as root, everything (key, configs, state,
spool, logs, sockets) in a temporary folder, on free ports; torn down after.

The recipe (verified here, see DESIGN.md): ``ProctrackType=proctrack/linuxproc``,
``TaskPlugin=task/none``, ``SelectType=select/cons_tres``, ``NodeName=<this
host> CPUs=8`` with ``SlurmdParameters=config_overrides`` (a 2-core machine may
claim 8 CPUs), munged started first on its own socket (``AuthInfo=socket=``).
Clients find the cluster through ``SLURM_CONF``, which :attr:`SlurmCluster.env`
sets; jobs inherit it, so ``srun`` inside a job reaches the same cluster.

    python tests/slurm_cluster.py      # start one by hand; Ctrl-C stops it
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from sysdeps import ensure_packages

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmUnavailable(Exception):
    """Slurm or munge cannot be installed or started here; the message says why."""


def ensure_installed() -> None:
    """apt-get install slurm-wlm munge when missing (root on Debian/Ubuntu only)."""
    ensure_packages(PACKAGES, lambda: all(shutil.which(d) for d in (*DAEMONS, "sbatch")), SlurmUnavailable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, cpus: int = 8) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="psbench-slurm-"))
        self.node = socket.gethostname()
        self.cpus = cpus
        self.procs: list[subprocess.Popen] = []
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- set-up
    def _write_config(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(f"""# psbench test cluster (tests/slurm_cluster.py)
ClusterName=psbench-test
SlurmctldHost={self.node}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={d / 'munge.socket'}
CryptoType=crypto/munge
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmctldLogFile={d / 'log' / 'slurmctld.log'}
SlurmdLogFile={d / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName={self.node} CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, argv: list[str], name: str) -> None:
        log = open(self.dir / "log" / f"{name}.out", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def start(self, timeout: float = 60.0) -> "SlurmCluster":
        ensure_installed()
        self._write_config()
        d = self.dir
        self._daemon(["munged", "--foreground", "--force", f"--socket={d / 'munge.socket'}",
                      f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'munged.pid'}",
                      f"--log-file={d / 'log' / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"], "munged")
        self._wait(lambda: (d / "munge.socket").exists(), 15, "munged did not create its socket")
        self._daemon(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        self._wait(lambda: self.run(["scontrol", "ping"]).returncode == 0, timeout, "slurmctld did not answer")
        self._daemon(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._wait(self._node_idle, timeout, "the node did not become idle")
        return self

    def _node_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%T"])
        return out.returncode == 0 and out.stdout.strip().startswith("idle")

    def _wait(self, ready, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise SlurmUnavailable(f"{what}: {Path(dead[0].args[0]).name} exited with {dead[0].returncode}; "
                                       f"{self.logs()[-600:]}")
            if ready():
                return
            time.sleep(0.5)
        raise SlurmUnavailable(f"{what} within {timeout:.0f} s; {self.logs()[-600:]}")

    # ---- use
    def run(self, argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def job_state(self, job: str) -> str:
        out = self.run(["scontrol", "-o", "show", "job", job])
        for item in out.stdout.split():
            if item.startswith("JobState="):
                return item.split("=", 1)[1]
        return "UNKNOWN"

    def wait_jobs(self, jobs: list[str], timeout: float) -> dict[str, str]:
        """Wait until every job (array jobs: every task) left the queue; their final states."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = self.run(["squeue", "-h", "-o", "%i", "-j", ",".join(jobs)])
            if out.returncode == 0 and not out.stdout.strip():
                break
            time.sleep(1)
        else:
            raise TimeoutError(f"jobs {jobs} still queued or running after {timeout:.0f} s")
        return {j: self.job_state(j) for j in jobs}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted((self.dir / "log").glob("*")) if p.is_file())

    # ---- tear-down
    def stop(self) -> None:
        """Cancel what is left, stop the daemons (slurmd, slurmctld, munged), remove the folder."""
        if self.procs:
            try:
                self.run(["scancel", "--full", "-u", "root"], timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    cluster = SlurmCluster().start()
    print(f"export SLURM_CONF={cluster.conf}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        cluster.stop()

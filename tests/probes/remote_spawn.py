"""Probe (not a test): can the survivors spawn a replacement onto the host where a rank died?

Two network-namespace hosts (tests/netns_hosts.py); ``mpirun --with-ft ulfm`` with two ranks on
nodea and one on nodeb; the nodeb rank SIGKILLs itself, the others shrink and spawn one process
with ``info host=`` (remote_spawn_parent.py). Each argument is SLOTS_ON_NODEB/HOW/HOST, HOW one of
``spawn``, ``multiple`` (MPI_Comm_spawn_multiple, as psbench) or ``nodeath`` (no rank dies):

    sudo .venv/bin/python tests/probes/remote_spawn.py 1/multiple/- 1/spawn/nodeb 2/multiple/nodeb \
        2/spawn/nodeb 2/nodeath/nodeb

Results with Open MPI 5.0.11: README, "Hostfiles"."""
import os, subprocess, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests")); sys.path.insert(0, str(ROOT))
from netns_hosts import TwoHosts
from launch.driver.mpirun import ROOT_ENV
venv = str(ROOT / ".venv" / "bin")
variants = [v.split("/") for v in sys.argv[1:]]  # slots_b/how/host
h = TwoHosts(); h.start()
try:
    env = {**h.env(), **ROOT_ENV, "PATH": f"{h.bin}:{venv}:{os.environ['PATH']}", "PRTE_MCA_prte_silence_shared_fs": "1"}
    for slots_b, how, host in variants:
        argv = [f"{venv}/mpirun", "--with-ft", "ulfm", "--host", f"nodea:2,nodeb:{slots_b}", "-np", "3",
                "-x", "PATH", f"{venv}/python", str(HERE / "remote_spawn_parent.py"), how, host]
        try:
            p = subprocess.run(h.argv_on("nodea", argv), env=env, capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            out = p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            out = f"TIMEOUT {(e.stdout or b'')!r}"
        lines = [l for l in out.splitlines() if l.strip() and not l.startswith("---")]
        print(f"===== nodeb:{slots_b} {how} host={host}")
        print("\n".join(lines[:25]))
        subprocess.run(["pkill", "-9", "-f", "remote_spawn_"], capture_output=True)
finally:
    h.stop()

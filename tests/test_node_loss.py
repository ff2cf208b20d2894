"""A node lost in place (issue #47): three network-namespace hosts (tests/netns_hosts.py), the job launched
by the PRRTE 5 runtime (``--runtime prrte5``, ``make setup-runtime``), the PS's host lost with its Open MPI
daemon (``--kill-node``): every rank there and its ``prted`` SIGKILLed at once over ssh. PRRTE 5 keeps the
job; the survivors shrink and a spare on the third host takes the PS's role, in every mode, and the run
completes without a restart. With PyPI's runtime the same loss ends the job (tests/test_netns.py)."""
from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import pytest

from conftest import ROOT, events, mpirun_log
from launch.driver import runtime
from netns_hosts import THREE, TwoHosts, hosts_or_skip

LOST_DAEMON = "PRTE has lost communication with a remote daemon"


@pytest.fixture(scope="module")
def three_hosts():
    if not runtime.installed():
        pytest.skip(f"no PRRTE 5 runtime at {runtime.runtime_dir()}: make setup-runtime (.ci/run builds it)")
    yield from hosts_or_skip(THREE)


MODES = {"checkpoint": ["--checkpoint-every", "50"], "chain": ["--replicas", "1"], "stateless": [],
         "hybrid": ["--replicas", "1"]}


def lose_nodeb(hosts: TwoHosts, out, *args: str) -> dict:
    """``psbench run --runtime prrte5`` from nodea, the PS alone on nodeb, nodeb lost with its daemon at 3 s;
    the run's summary."""
    argv = [sys.executable, "-m", "launch.cli", "run", "--quiet", "--no-report", "--runtime", "prrte5",
            "--benchmark", "synthetic", "--model-params", "100000", "--workers", "2", *args, "--duration", "8s",
            "--restart-delay", "0.5s", "--peer-timeout", "30s", "--kill-node", "3s", "--ps-host", "nodeb",
            "--out", str(out)]
    proc = subprocess.run(hosts.argv_on("nodea", argv), env={**hosts.env(), "PYTHONPATH": str(ROOT)},
                          cwd=ROOT, timeout=240, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert (out / "summary.json").exists(), proc.stderr[-3000:] + mpirun_log(out)
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_the_ps_host_lost_with_its_daemon_is_repaired_in_place(three_hosts, tmp_path, mode):
    """nodeb holds the PS alone; workers, evaluator (and a replica) are on nodea, the spare on nodec."""
    out = tmp_path / "run"
    replica = "--replicas" in MODES[mode]
    s = lose_nodeb(three_hosts, out, "--mode", mode, *MODES[mode], "--spares", "1",
                   "--hosts", f"nodea:{3 + replica},nodeb:1,nodec:1")  # nodea full: the spare goes to nodec
    placement = {r["role"]: r["host"] for r in json.loads((out / "placement.json").read_text())["ranks"]}
    assert placement["ps"] == "nodeb" and placement["spare0"] == "nodec", placement
    assert s["completed"] and not s.get("restarts"), s["exit_reason"] + mpirun_log(out)
    (kill,) = events(out, "kill")
    assert kill["host"] == "nodeb" and kill["daemons"], kill  # nodeb's prted died with the PS
    assert LOST_DAEMON in mpirun_log(out, whole=True)  # the runtime saw it, and kept the job
    # the spare takes the PS's role, or (chain, hybrid) the replica's whose holder was promoted
    (taken,) = events(out, "spare_taken")
    assert taken["role"] == ("replica1" if replica else "ps"), taken
    (rec,) = s["recoveries"]
    assert rec["kind"] == "node", rec
    if mode != "checkpoint":
        assert rec["lost_steps"] == 0, rec  # chain and hybrid promote the replica; stateless replays
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert not left.stdout.strip(), left.stdout  # nothing of the run outlives it, on any host (one kernel)


@pytest.mark.slow
def test_without_a_spare_the_replacement_is_spawned_onto_a_live_host(three_hosts, tmp_path):
    """No spare: the replacement PS is spawned onto nodec, where nothing ran but whose daemon lives (PRRTE
    5.0.0rc1 told no host sent the launch to the lost daemon too: "Node has gone down", the spawn failed)."""
    out = tmp_path / "run"
    s = lose_nodeb(three_hosts, out, "--mode", "checkpoint", "--hosts", "nodea:3,nodeb:1,nodec:1")
    assert s["completed"] and not s.get("restarts"), s["exit_reason"] + mpirun_log(out)
    hosts = {e["who"]: e["host"] for e in events(out, "start")}
    assert hosts["ps"] == "nodeb" and hosts["ps-gen1"] == "nodec", hosts


def test_a_replacement_goes_to_a_live_host_with_room(tmp_path):
    """The host choice alone: a host where the dead died and nobody survives is not one; of the others, the
    one with the most slots left, replacement by replacement."""
    from psmodes.pidfiles import live_hosts_with_room

    pids = tmp_path / "pids"
    pids.mkdir()
    for role, host in (("ps", "nodeb"), ("evaluator", "nodea"), ("worker0", "nodea"), ("replica1", "nodec")):
        (pids / f"{role}.json").write_text(json.dumps({"pid": 1, "host": host, "role": role}))
    hosts = ["nodea:3", "nodeb:1", "nodec:3", "noded:1"]  # slots left: a 1, c 2, d 1 (nodeb is lost)
    survivors = ["evaluator", "worker0", "replica1"]
    assert live_hosts_with_room(tmp_path, hosts, survivors, ["ps"], 3) == ["nodec", "nodea", "nodec"]
    assert live_hosts_with_room(tmp_path, ["nodeb:4"], [], ["ps"], 1) == [None]  # only the lost host: no choice
    # a chain's promoted head wrote the PS's pid file over the dead PS's (nodeb): the lost replica's role names
    # no host, and the placement of the job's start still says that nodeb held ranks and holds no survivor now
    (pids / "ps.json").write_text(json.dumps({"pid": 2, "host": "nodea", "role": "ps"}))
    (pids / "replica1.json").unlink()
    (tmp_path / "placement.json").write_text(json.dumps({"ranks": [{"rank": 0, "role": "ps", "host": "nodeb"},
                                                                   {"rank": 1, "role": "replica1", "host": "nodea"}]}))
    assert live_hosts_with_room(tmp_path, ["nodea:3", "nodeb:1", "nodec:1"], ["ps", "evaluator", "worker0"],
                                ["replica1"], 1) == ["nodec"]


def test_a_daemon_lost_after_the_runtimes_spawn_error_is_recorded_as_its_own_failure():
    """PRRTE 3.0.x lost a daemon nobody killed after its PMIx error in a spawn (chaos over two hosts): that
    ends the job as a crash of the runtime's own (a failure nobody injected), not as a node loss."""
    from launch.driver.crashes import runtime_abort

    lost = (b"--------\nPRTE has lost communication with a remote daemon.\n"
            b"  HNP daemon   : [prterun-nodea-1@0,0] on node nodea\n"
            b"  Remote daemon: [prterun-nodea-1@0,1] on node nodeb\n")
    dyn = b"[nodea:1] PMIX ERROR: PMIX_ERROR in file prrte/src/prted/pmix/pmix_server_dyn.c at line 1113\n"
    reason, own = runtime_abort(dyn + lost, node_lost=False)
    assert own and "spawn of a replacement" in reason and "nodeb" in reason, reason
    reason, own = runtime_abort(lost, node_lost=True)  # --kill-node under PyPI's runtime: what it was asked
    assert not own and "lost the daemon on nodeb" in reason, reason
    assert runtime_abort(lost, node_lost=False)[1]  # a daemon lost that nobody killed: a failure all the same
    assert runtime_abort(dyn) is None  # the spawn's error alone: the job went on


@pytest.mark.skipif(not runtime.installed(), reason="no PRRTE 5 runtime (make setup-runtime)")
def test_the_runtime_shows_the_ranks_the_data_folders_they_read(tmp_path):
    """A data folder outside the trees the chroot binds (here /var/tmp) is seen inside it only when the
    launcher names it (runtime.data_binds: --data-dir, PSBENCH_DATA); fmnist-cnn under --runtime prrte5 did
    not find /usr/share/datasets/fashion-mnist before that folder was bound too."""
    import shutil
    import tempfile

    data = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="psbench-data-"))
    try:
        (data / "train-images-idx3-ubyte.gz").write_bytes(b"x")
        look = ["/bin/ls", str(data)]
        unseen = subprocess.run(runtime.enter(look), capture_output=True, text=True, timeout=60)
        assert unseen.returncode != 0, unseen.stdout
        seen = subprocess.run(runtime.enter(look, runtime.data_binds(str(data))), capture_output=True, text=True,
                              timeout=60)
        assert seen.returncode == 0 and "train-images-idx3-ubyte.gz" in seen.stdout, seen.stderr
        if Path("/usr/share/datasets").is_dir():  # Debian's dataset packages: bound always
            debian = subprocess.run(runtime.enter(["/bin/ls", "/usr/share/datasets"]), capture_output=True, text=True,
                                    timeout=60)
            assert sorted(debian.stdout.split()) == sorted(p.name for p in Path("/usr/share/datasets").iterdir())
    finally:
        shutil.rmtree(data)

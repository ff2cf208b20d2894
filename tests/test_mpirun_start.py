"""Open MPI's start-up against stale session directories (launch/driver/mpirun.py).

A prterun that dies of SIGKILL leaves ``$TMPDIR/ompi.<pid>``; a later mpirun that gets the same
pid stops before any rank starts ("The PMIx server's listener thread failed to start"): one CI
run lost a test to it. Here the directory is the real leftover of a SIGKILLed mpirun, copied to
the names of the next pids this machine hands out, in a private TMPDIR. The shared-memory
segments such a job leaves in /dev/shm are purged too, only those no live process maps."""
from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import psbench
from launch.analysis.machine import find_mpirun
from launch.driver.mpirun import mpirun_env, purge_stale_segments, purge_stale_sessions, start_message, transient_start_failure
from psmodes.pidfiles import alive

AHEAD = 400  # pids planted ahead of the next one: the launcher forks a few processes before mpirun
SYN = ["--benchmark", "synthetic", "--model-params", "20000", "--workers", "2", "--steps", "20",
       "--no-evaluator", "--deadline", "120s"]


def stale_session(tmpdir: Path) -> Path:
    """What a SIGKILLed mpirun leaves: started in ``tmpdir``, killed once its session directory exists."""
    proc = subprocess.Popen([find_mpirun(), "-np", "1", "sleep", "30"], env={**mpirun_env(), "TMPDIR": str(tmpdir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    session = tmpdir / f"ompi.{proc.pid}"
    deadline = time.monotonic() + 30
    try:
        while not (session / f"pmix.{os.uname().nodename}.tool").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "mpirun did not start"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert session.is_dir()
    return session


def plant(session: Path, owner: int | None = None) -> list[Path]:
    """Copies of ``session`` under the names of the next ``AHEAD`` free pids."""
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    planted = []
    for pid in range(last + 1, last + 1 + AHEAD):
        if alive(pid):
            continue
        copy = session.parent / f"ompi.{pid}"
        shutil.copytree(session, copy, dirs_exist_ok=True)
        if owner is not None:
            for path in [copy, *copy.rglob("*")]:
                os.chown(path, owner, owner, follow_symlinks=False)
        planted.append(copy)
    return planted


def test_purge_removes_only_the_dead_sessions_of_this_user(tmp_path):
    dead = tmp_path / "ompi.999999999"  # above any pid_max
    live = tmp_path / f"ompi.{os.getpid()}"
    other = tmp_path / "ompi.notapid"
    for d in (dead, live, other):
        d.mkdir()
    assert purge_stale_sessions(str(tmp_path)) == [str(dead)]
    assert live.is_dir() and other.is_dir() and not dead.exists()


def test_purge_removes_only_the_unmapped_old_segments_of_this_host_and_user(tmp_path):
    host, uid = os.uname().nodename, os.geteuid()

    def segment(name: str, age_s: float) -> Path:
        path = tmp_path / name
        path.write_bytes(bytes(4096))
        then = time.time() - age_s
        os.utime(path, (then, then))
        return path

    stale = segment(f"sm_segment.{host}.{uid}.1f2e0001.0", 600)
    kept = [segment(f"sm_segment.{host}.{uid}.1f2e0002.0", 1),  # a rank may be about to map it
            segment(f"sm_segment.{host}.{uid}.1f2e0003.1", 600),  # mapped below: a live rank's
            segment(f"sm_segment.{host}x.{uid}.1f2e0004.0", 600),  # another host's (a container)
            segment(f"sm_segment.{host}.{uid + 1}.1f2e0005.0", 600),  # another user's
            segment("vader_segment.x", 600)]
    with open(kept[1], "r+b") as fh, mmap.mmap(fh.fileno(), 0):
        assert purge_stale_segments(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and all(p.exists() for p in kept)
    assert purge_stale_segments(str(tmp_path)) == [str(kept[1])]  # no longer mapped


def test_the_start_up_failure_is_recognised_and_others_are_not():
    log = (b"---------\nThe PMIx server's listener thread failed to start. We cannot\ncontinue.\n\n---------\n")
    assert transient_start_failure(log) == "The PMIx server's listener thread failed to start. We cannot continue."
    assert transient_start_failure(b"mpirun was unable to launch the specified application\n") is None
    # the two-host chaos run's (hybrid trial-045 of 100): the remote daemon exited before it reported back
    daemon = (b"------\nA daemon failed to report back after being spawned. This could\nbe due to several factors.\n\n"
              b"  Local host:    nodea\n  Remote host:   nodeb\n  Daemon exit status: 213\n------\n")
    assert transient_start_failure(daemon) == "A daemon failed to report back after being spawned. This could " \
                                             "be due to several factors."
    # any other: Open MPI's first message is the run's reason
    assert start_message(b"-----\nmpirun was unable to launch\nthe application.\n-----\n") == \
        "mpirun was unable to launch the application."
    assert start_message(b"ORTE_ERROR_LOG: Not found\nmore\n") == "ORTE_ERROR_LOG: Not found"
    assert start_message(b"") == "mpirun printed nothing"


@pytest.mark.slow
def test_stale_sessions_are_purged_before_the_job_starts(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    planted = plant(stale_session(tmpdir))
    # the planted directories bite: a bare mpirun started now fails as the CI job did
    bare = subprocess.run([find_mpirun(), "-np", "1", "true"], env={**mpirun_env(), "TMPDIR": str(tmpdir)},
                          capture_output=True, timeout=60)
    assert bare.returncode != 0 and transient_start_failure(bare.stdout + bare.stderr), bare
    out = tmp_path / "run"
    proc = psbench("run", "--quiet", "--out", str(out), *SYN, env={"TMPDIR": str(tmpdir)}, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"], (summary["exit_reason"], proc.stderr)
    assert summary["start_failures"] == []
    assert sum(p.exists() for p in planted) < len(planted)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's session directories takes root")
def test_a_job_that_open_mpi_cannot_start_is_tried_three_times_and_says_why(tmp_path):
    """Directories of another user are not the launcher's to remove: every start fails, the
    launcher starts the job again twice, then ends the run with Open MPI's reason, recorded."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    os.chmod(tmpdir, 0o1777)
    planted = plant(stale_session(tmpdir), owner=65534)  # nobody
    out = tmp_path / "run"
    t = time.monotonic()
    psbench("run", "--quiet", "--out", str(out), *SYN, env={"TMPDIR": str(tmpdir)}, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["completed"]
    assert [f["attempt"] for f in summary["start_failures"]] == [1, 2, 3]
    assert "listener thread failed to start" in summary["exit_reason"]
    assert "Start-up failures" in (out / "report.md").read_text()
    assert (out / "mpirun.log").read_text().count("listener thread failed to start") == 3
    assert time.monotonic() - t < 60
    assert planted


def test_a_launcher_that_died_of_a_signal_is_the_runs_reason():
    # chaos over two hosts (chain trial-013): prterun died of SIGSEGV after a fence and wrote nothing
    from launch.driver.crashes import launcher_signal

    assert "SIGSEGV" in launcher_signal(-11) and "did not send" in launcher_signal(-11)
    assert launcher_signal(0) is None and launcher_signal(1) is None and launcher_signal(None) is None
    assert launcher_signal(-15) is None and launcher_signal(-9) is None  # the launcher's own stop of mpirun

"""The same PS-kill runs through ``horovodrun``, and whole-job restarts
(``--recovery job-restart``) with ULFM on and off (without ``--with-ft ulfm``
the PS's death takes the whole Open MPI job down). Real jobs, real SIGKILLs."""
from __future__ import annotations

import pytest

from conftest import events, resumed_from_newest, run_ok

SYN = ["--benchmark", "synthetic", "--model-params", "200000", "--workers", "2", "--eval-interval", "1s",
       "--restart-delay", "2s"]


def check_checkpoint_recovery(out, s, k):
    """What test_recovery's checkpoint test checks: one kill, one recovery, resumed from
    the newest checkpoint the dead PS made durable (conftest.resumed_from_newest), lost steps bounded."""
    assert len(s["kills"]) == 1 and s["kills"][0]["role"] == "ps"
    assert s["detections"] and 0 < s["detections"][0]["latency_s"] < 15
    (rec,) = s["recoveries"]
    _, in_flight = resumed_from_newest(out)
    assert 0 <= rec["lost_steps"] <= (2 * k if in_flight else k), (rec, in_flight)
    assert rec["idle_s"] >= 2.0  # the restart delay at least
    assert s["final_metric"] is not None
    return rec


@pytest.mark.slow
def test_horovodrun_survives_a_ps_kill(tmp_path):
    out, s = run_ok(tmp_path, *SYN, "--launcher", "horovodrun", "--mode", "checkpoint", "--checkpoint-every", "50",
                    "--duration", "14s", "--kill-ps", "5s")
    command = (out / "command.txt").read_text()
    assert command.split()[0].endswith("horovodrun") and "--with-ft ulfm" in command
    rec = check_checkpoint_recovery(out, s, 50)
    assert rec["mode"] == "checkpoint"


@pytest.mark.slow
@pytest.mark.parametrize("ulfm, fault", [(True, "--kill-ps"), (False, "--kill-ps"), (True, "--kill-node")],
                         ids=["ulfm", "no-ulfm", "node-loss"])
def test_job_restart_after_a_ps_kill(tmp_path, ulfm, fault):
    """--kill-node on one machine loses every rank at once (the workers too): only a whole-job
    restart can recover from that, and does, from the newest checkpoint."""
    # node loss: the restarted job starts ~10 s after the kill here (the restart delay, mpirun, four imports); with
    # the kill at 5 s of 16 it had trained for nothing on a slow machine (CI, stop 55: no recovery to report)
    duration, at = ("30s", "5s") if fault == "--kill-ps" else ("18s", "3s")
    out, s = run_ok(tmp_path, *SYN, "--mode", "checkpoint", "--recovery", "job-restart", "--checkpoint-every", "50",
                    "--duration", duration, fault, at, *([] if ulfm else ["--no-ulfm"]))
    if fault == "--kill-node":
        (kill,) = events(out, "kill")
        assert {o["role"] for o in kill["node"]} >= {"worker0", "worker1"} and s["faults"][0]["kind"] == "node"
    assert ("--with-ft" in (out / "command.txt").read_text()) == ulfm
    (exit0, exit1) = events(out, "job_exit")  # two jobs: the killed one and the restarted one
    # a lost node takes every rank of this one machine (the evaluator too, now that it names itself in a
    # pid file), and Open MPI 5.0.11's mpirun then exits 0: the launcher's record says the job did not finish
    assert (exit0["returncode"] != 0 or fault == "--kill-node") and not exit0["finished"] and exit1["finished"]
    assert [r["attempt"] for r in s["restarts"]] == [1]
    rec = check_checkpoint_recovery(out, s, 50)
    assert rec["mode"] == "checkpoint/job-restart"
    # downtime: kill -> first step of the new job, which includes the delay and a whole new start-up
    assert rec["recovery_s"] >= rec["restart_s"] >= 2.0
    if not ulfm:  # nobody inside the job saw the death: the launcher's view of the job's end is the detection
        assert s["detections"][0]["who"] in ("launcher", "worker0")
    starts = [e for e in events(out, "start") if e["who"] == "ps"]
    assert len(starts) == 2  # the event logs of both jobs are kept (appended)


def test_hosts_with_oversubscribe_place_ranks_and_survive_a_ps_kill(tmp_path):
    """--hosts with fewer slots than ranks and --oversubscribe: mpirun gets the placement as a
    sequential map (seq:file=rankmap:OVERSUBSCRIBE) and still spawns the replacement PS."""
    out, s = run_ok(tmp_path, *SYN, "--hosts", "localhost:2", "--oversubscribe", "--mode", "checkpoint",
                    "--checkpoint-every", "10", "--steps", "60", "--kill-ps", "step:20")
    command = (out / "command.txt").read_text()
    assert "--hostfile" in command and ":OVERSUBSCRIBE" in command and "seq:file=" in command
    assert (out / "rankmap").read_text().splitlines() == ["localhost"] * 4
    assert len(s["kills"]) == 1 and len(s["recoveries"]) == 1

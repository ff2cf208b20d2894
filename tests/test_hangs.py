"""Failures ULFM cannot see, and deaths psbench did not cause (real mpirun, real signals).

A SIGSTOPped PS is suspected after ``--suspect-after``, fenced (SIGKILLed by the
launcher) and replaced; a pause shorter than that and a slow phase are ridden out; a
``kill -9`` from outside psbench is recorded as an unplanned failure. After each, no
process of the run is left. The fault records themselves are also checked on a made-up
event stream (no MPI), beside the real runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import PSBENCH, ROOT, events, mpirun_log, run_ok

SYN = ["--benchmark", "synthetic", "--model-params", "200000", "--workers", "2", "--no-evaluator",
       "--restart-delay", "2s"]
SUSPECT_S = 2.0


def no_leftovers(out) -> None:
    from launch.experiments.chaos import leftover_processes

    assert leftover_processes(out.resolve(), grace_s=2.0) == [], "a process of the run outlived it"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["checkpoint", "chain", "stateless"])
def test_a_hung_ps_is_suspected_fenced_and_replaced(tmp_path, mode):
    out, s = run_ok(tmp_path, *SYN, "--mode", mode, "--duration", "9s", "--hang-ps", "3s",
                    "--suspect-after", f"{SUSPECT_S}s")
    (fault,) = s["faults"]
    assert fault["kind"] == "hang" and fault["planned"] and fault["role"] == "ps", fault
    (det,) = [d for d in s["detections"] if d["fault"] == 0]
    assert SUSPECT_S - 0.1 <= det["latency_s"] <= SUSPECT_S + 1.0, det
    assert det["via"].startswith("suspect"), det
    # fenced: SIGKILLed by the launcher before anyone took over, then repaired like a death
    (fence,) = events(out, "fence")
    assert fence["pid"] == fault["pid"] and fence["how"] == "launcher"
    assert fault["fenced_s"] - fault["t_s"] <= SUSPECT_S + 1.0, fault
    (rec,) = s["recoveries"]
    from psmodes.config import RunConfig

    cfg = RunConfig.load(out / "config.json")
    assert rec["kind"] == "hang" and rec["lost_steps"] <= cfg.recovery_mode.lost_steps_bound(cfg), rec
    # no two heads: the hung PS applied nothing after the replacement's first update
    hung = [e for e in events(out, "start") if e.get("pid") == fault["pid"]][0]["who"]
    last_old = max(e["t"] for e in events(out, "update") if e["who"] == hung)
    first_new = min(e["t"] for e in events(out) if e["who"] != hung
                    and e["ev"] in ("update", "promoted", "replayed", "resume"))  # the next head's first act
    assert last_old < first_new
    no_leftovers(out)


@pytest.mark.slow
def test_a_hung_ps_does_not_block_the_repair_of_another_death(tmp_path):
    """Found by psbench chaos: the PS stopped, then the tail killed before anyone suspected the PS.
    Every survivor went into MPI_Comm_shrink, which the stopped PS never joins, until the watchdog.
    The leader's deadline on the PS runs on through the repair: the PS is fenced and the shrink ends."""
    out, s = run_ok(tmp_path, *SYN, "--mode", "chain", "--replicas", "2", "--duration", "9s",
                    "--hang-ps", "3s", "--kill-replica", "4s", "--suspect-after", f"{SUSPECT_S}s")
    hang, kill = s["faults"]
    assert (hang["kind"], kill["kind"]) == ("hang", "kill"), s["faults"]
    assert hang["fenced_s"] - hang["t_s"] <= SUSPECT_S + 1.0, hang
    assert s["recoveries"] and all(r["lost_steps"] == 0 for r in s["recoveries"]), s["recoveries"]
    assert s["wall_s"] < 60, s["wall_s"]
    no_leftovers(out)


@pytest.mark.slow
def test_a_pause_shorter_than_the_deadline_and_a_slow_phase_are_ridden_out(tmp_path):
    out, s = run_ok(tmp_path, *SYN, "--mode", "checkpoint", "--duration", "10s", "--hang-ps", "2s~1s",
                    "--slow-ps", "5s~3s", "--slow-factor", "4", "--suspect-after", f"{SUSPECT_S}s")
    kinds = [f["kind"] for f in s["faults"]]
    assert kinds == ["hang", "slow"], s["faults"]
    hang, slow = s["faults"]
    assert 0.9 <= hang["ended_s"] - hang["t_s"] <= 1.6, hang
    assert not events(out, "suspect") and not events(out, "fence"), "a pause that ended was suspected"
    assert s["detections"] == [] and s["recoveries"] == [] and s["kills"] == []
    # the slow phase slowed the PS: fewer updates a second while it lasted than just before it
    t0 = events(out, "train_start")[0]["t0_ms"] / 1000
    updates = [e["t"] - t0 for e in events(out, "step", "worker0") if e.get("applied")]
    rate = lambda a, b: sum(a <= t < b for t in updates) / (b - a)  # noqa: E731
    before, during = rate(3.5, 5.0), rate(slow["t_s"] + 0.3, slow["t_s"] + 2.7)
    assert during < 0.6 * before, (before, during)
    no_leftovers(out)


@pytest.mark.slow
def test_a_kill_from_outside_psbench_is_an_unplanned_failure(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*PSBENCH, "run", "--quiet", "--out", str(out), *SYN, "--mode", "stateless",
                             "--duration", "9s"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(e.get("applied") for e in events(out, "step", "worker0")):
            assert time.monotonic() < deadline and proc.poll() is None, mpirun_log(out)
            time.sleep(0.1)
        time.sleep(2)
        ps = json.loads((out / "pids" / "ps.json").read_text())
        os.kill(ps["pid"], signal.SIGKILL)  # not through psbench's injector
        t_kill = time.time()
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"], s["exit_reason"]
    assert s["kills"] == []
    (fault,) = s["faults"]
    assert fault["kind"] == "unplanned" and not fault["planned"] and fault["pid"] == ps["pid"], fault
    t0 = events(out, "train_start")[0]["t0_ms"] / 1000
    assert fault["t_s"] <= t_kill - t0 + 0.01  # the last sign of life, not later than the kill
    (det,) = s["detections"]
    assert det["fault"] == 0 and det["latency_s"] < 1.0, det
    (rec,) = s["recoveries"]
    assert rec["kind"] == "unplanned" and rec["lost_steps"] == 0, rec
    assert "unplanned" in (out / "report.md").read_text()
    no_leftovers(out)


@pytest.mark.slow
def test_a_killed_launcher_leaves_no_stopped_process_behind(tmp_path):
    """The PS stopped for good (nothing fences: --suspect-after 0), then the launcher SIGKILLed:
    the stopped PS, the other ranks, mpirun and the hang script all go with it."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*PSBENCH, "run", "--quiet", "--out", str(out), *SYN, "--mode", "checkpoint",
                             "--duration", "30s", "--hang-ps", "2s", "--suspect-after", "0"], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not events(out, "hang", "launcher"):
            assert time.monotonic() < deadline and proc.poll() is None, mpirun_log(out)
            time.sleep(0.1)
        (hang,) = events(out, "hang", "launcher")
        time.sleep(0.5)
        with open(f"/proc/{hang['pid']}/stat") as fh:
            assert fh.read().split(")")[-1].split()[0] == "T", "the PS is not stopped"
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    no_leftovers(out)
    from psmodes.pidfiles import alive

    # SIGKILLed: gone, or a zombie for init, within moments (a process tearing down its memory has
    # an empty command line already, so no_leftovers does not see it, but it is not a zombie yet)
    deadline = time.monotonic() + 10
    while alive(hang["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(hang["pid"]), "the stopped PS outlived its launcher"


# ---- the fault records on a made-up event stream (a unit test of launch/analysis/faults.py)
def ev(t, kind, who, **fields):
    return {"t": t, "ev": kind, "who": who, **fields}


def test_fault_records_tell_planned_from_unplanned():
    from launch.analysis.faults import fault_records

    same = lambda t, who: t  # noqa: E731 - one host, one clock
    stream = [
        ev(0, "start", "ps", pid=10, host="h", role="ps"), ev(0, "start", "replica1", pid=11, host="h", role="replica1"),
        ev(0, "start", "evaluator", pid=12, host="h", role="evaluator"),
        ev(0, "start", "worker0", pid=13, host="h", role="worker0"),
        ev(1.0, "hang", "launcher", t_hang=1.0, pid=10, host="h", role="ps", at="1s", for_s=None),
        ev(3.0, "suspect", "worker0", t_suspect=3.0, pid=10, host="h", role="ps", waited_s=2.0, what="x"),
        ev(3.1, "fence", "launcher", t_fence=3.1, pid=10, host="h", role="ps", by="worker0", t_suspect=3.0,
           waited_s=2.0),
        ev(3.2, "role", "replica1", role="ps", pid=11, host="h"),
        ev(5.0, "eval", "evaluator"),  # its last word: it dies at 5.5, nobody sent a signal
        ev(5.6, "detect", "ps-gen1", t_detect=5.6, dead=["evaluator"]),
        ev(7.0, "suspect", "worker0", t_suspect=7.0, pid=11, host="h", role="ps", waited_s=2.0, what="x"),
        ev(7.1, "fence", "launcher", t_fence=7.1, pid=11, host="h", role="ps", by="worker0", t_suspect=7.0,
           waited_s=1.5),  # a hang nobody injected
        # the replacement of the fenced PS dies before its MPI_Init: both survivors say so
        *[ev(8.6, "spawn_failed", who, died_before_joining=[{"name": "ps-gen2", "pid": 14, "host": "h",
                                                             "t_seen": 8.5}]) for who in ("worker0", "worker1")],
        ev(9.0, "usage", "worker0"),
    ]
    faults = fault_records(stream, lambda k: k["t_kill"], same)
    assert [(f["kind"], f["planned"], f["pid"]) for f in faults] == [
        ("hang", True, 10), ("unplanned", False, 12), ("unplanned", False, 11), ("unplanned", False, 14)]
    hang, evaluator, unplanned_hang, in_spawn = faults
    assert in_spawn["_t"] == 8.5 and in_spawn["role"] == "ps" and "before it joined" in in_spawn["evidence"]
    assert hang["_t_fence"] == 3.1
    assert evaluator["_t"] == 5.0 and "without a word" in evaluator["evidence"]
    assert unplanned_hang["_t"] == 5.5 and "fenced" in unplanned_hang["evidence"]  # when the suspected wait began


def test_a_fence_belongs_to_the_latest_fault_of_its_process():
    """Found by psbench chaos: the PS slowed from 3.0 s to 4.8 s and hung at 4.85 s was fenced at
    8.0 s; the fence went to the slow phase (listed after the hangs), and the hang looked unfenced."""
    from launch.analysis.faults import fault_records

    stream = [ev(0, "start", "ps", pid=10, host="h", role="ps"),
              ev(3.0, "slow", "launcher", t_slow=3.0, pid=10, host="h", role="ps", at="3s~1.8s", for_s=1.8, factor=2),
              ev(4.85, "hang", "launcher", t_hang=4.85, pid=10, host="h", role="ps", at="4.77s", for_s=None),
              ev(8.0, "fence", "launcher", t_fence=8.0, pid=10, host="h", role="ps", by="worker0", t_suspect=7.97,
                 waited_s=3.0)]
    slow, hang = fault_records(stream, lambda k: k["t_kill"], lambda t, who: t)
    assert (slow["kind"], hang["kind"]) == ("slow", "hang")
    assert hang["_t_fence"] == 8.0 and "_t_fence" not in slow
    # a hang inside the slow phase lasts one duty cycle: the phase's next SIGCONT continues it
    inside = [stream[0], {**stream[1], "for_s": 2.9}, stream[2]]
    _, hang = fault_records(inside, lambda k: k["t_kill"], lambda t, who: t)
    assert hang["_t_ended"] == pytest.approx(4.85 + 0.2) and "continued by the slow phase" in hang["evidence"]


def test_a_remote_hang_is_timed_when_its_sigstop_landed_and_its_fence_when_sent_and_landed():
    """Found by psbench chaos over two hosts (chain trial-021): the hang was timed when it was sent and its
    fence when carried out, so both ssh round trips (0.6 s and 0.54 s) counted against the fence's bound."""
    from launch.analysis.faults import fault_records

    offsets = {"b": 0.25}  # host b's clock runs 0.25 s ahead of the launcher's
    kill_time = lambda k: k["t_remote"] - offsets[k["host"]] if k.get("t_remote") is not None else k["t_kill"]  # noqa: E731
    stream = [ev(0, "start", "ps", pid=10, host="b", role="ps"),
              ev(4.0, "hang", "launcher", t_hang=4.0, pid=10, host="b", role="ps", at="4s", for_s=None, how="ssh"),
              {**ev(4.7, "landed", "launcher", t_remote=4.85, pid=10, host="b", for_s=None, at="4s"), "kind": "hang"},
              ev(8.6, "fence", "launcher", t_fence=8.6, t_remote=9.39, pid=10, host="b", role="ps", by="worker0",
                 t_suspect=8.55, waited_s=3.0)]
    (hang,) = fault_records(stream, kill_time, lambda t, who: t)
    assert hang["_t"] == pytest.approx(4.6) and hang["_t_fence"] == pytest.approx(9.14)
    assert hang["_t_fence_sent"] == 8.6
    (unlanded,) = fault_records([x for x in stream if x["ev"] != "landed"], kill_time, lambda t, who: t)
    assert unlanded["_t"] == 4.0  # no word from the script: when it was sent


def test_hang_and_slow_points_parse_with_their_length():
    from launch.faultkinds import parse_points as parse_kills

    (hang,) = parse_kills(["30%~2s"], "ps", 10.0, "hang")
    assert (hang.kind, hang.at_s, hang.for_s) == ("hang", 3.0, 2.0)
    (forever,) = parse_kills(["point:apply"], "ps", None, "hang")
    assert forever.point == "apply" and forever.for_s is None
    (slow,) = parse_kills(["step:100~500ms"], "ps", None, "slow")
    assert (slow.at_step, slow.for_s) == (100, 0.5)


@pytest.mark.slow
def test_a_ps_hung_after_the_last_step_is_continued_and_the_run_ends(tmp_path):
    """Stopped for good right after its last answer: nobody waits on that PS, so nobody suspects it,
    and the run's end (its final evaluation, mpirun's exit) waited for the watchdog (psbench chaos,
    198 s). --suspect-after after training the launcher continues it, and the run completes."""
    out, s = run_ok(tmp_path, *SYN, "--mode", "checkpoint", "--steps", "200", "--no-evaluator",
                    "--hang-ps", "point:send_weights@200", "--suspect-after", f"{SUSPECT_S}s", "--deadline", "90s")
    assert s["exit_reason"] == "completed", s["exit_reason"]
    released = [e for e in events(out, "continued", "launcher") if e.get("after_training")]
    assert len(released) == 1 and [f["kind"] for f in s["faults"]] == ["hang"], (released, s["faults"])
    assert s["faults"][0].get("ended_s") is not None and not events(out, "fence")
    assert s["wall_s"] < 60, s["wall_s"]
    no_leftovers(out)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_running_suspect_leaves_its_stacks_in_the_fence_event(tmp_path):
    """The launcher's side without MPI: a fenced process that was running (a stall of psbench's own, not an
    injected hang) first writes its threads' stacks (psmodes/stacks.py), which the fence event carries; a
    stopped one is killed at once, with nothing to tell."""
    import socket

    from launch.driver.injector import Injector
    from psmodes.events import EventLog

    code = ("import sys, time\nfrom psmodes import stacks\nstacks.register(sys.argv[1])\n"
            "def stuck_in_a_wait():\n    print('ready', flush=True)\n    time.sleep(60)\nstuck_in_a_wait()\n")
    running = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    stopped = subprocess.Popen(["sleep", "60"])
    try:
        assert running.stdout.readline().strip() == "ready"
        os.kill(stopped.pid, signal.SIGSTOP)
        inj = Injector(tmp_path, [], EventLog(tmp_path, "launcher"))
        host, now = socket.gethostname(), time.time()
        for proc, role in ((running, "ps"), (stopped, "replica1")):
            inj.fence({"pid": proc.pid, "host": host, "role": role, "who": "worker0", "by": "worker0", "t": now,
                       "t_suspect": now, "waited_s": 3.0, "what": "a test"})
        assert running.wait(5) == -signal.SIGKILL and stopped.wait(5) == -signal.SIGKILL
        fences = {f["pid"]: f for f in inj.fenced}
        assert "stuck_in_a_wait" in fences[running.pid]["stacks"], fences[running.pid]
        assert "stacks" not in fences[stopped.pid]
    finally:
        for proc in (running, stopped):
            proc.kill()
            proc.wait()


def test_a_fence_still_on_its_way_when_training_completes_is_withdrawn(tmp_path):
    """A fence to another host waits for its ssh (the host may be cut off); once a worker says training
    completed, the suspect finished the run: the fence is withdrawn, its ssh killed, and nothing is
    SIGKILLed (launch/driver/injector.py training_over)."""
    from launch.driver.injector import Injector
    from psmodes.events import EventLog

    target = subprocess.Popen(["sleep", "60"])
    inj = Injector(tmp_path, [], EventLog(tmp_path, "launcher"))
    ssh = subprocess.Popen(["sleep", "60"], start_new_session=True)  # an ssh that waits for a cut link
    key = (target.pid, "elsewhere")
    inj.fencing[key] = {"suspect": {"pid": target.pid, "host": "elsewhere", "role": "ps", "who": "worker0"},
                        "attempt": 1, "proc": ssh, "t": time.time(), "retry_at": 0.0, "probe": None,
                        "started": time.monotonic()}
    try:
        inj.training_over()
        assert ssh.wait(5) == -signal.SIGKILL and target.poll() is None and not inj.fencing and not inj.fenced
        refused = [json.loads(line) for line in (tmp_path / "events" / "launcher.jsonl").read_text().splitlines()]
        assert [e["reason"] for e in refused if e["ev"] == "fence_refused"] == [
            "training completed before the fence landed: the suspect finished the run"]
    finally:
        target.kill()
        target.wait()


def test_a_rank_whose_wait_timed_out_has_the_others_dump_their_stacks(tmp_path):
    """psmodes/stacks.py dump_peers: the ranks of this run on this host write their stacks; a process that
    is not one of the run's (a pid file's pid reused by a stranger) is not signalled: SIGUSR1 would kill it."""
    import socket

    from psmodes import stacks

    code = ("import sys, time  # psmodes.main\nfrom psmodes import stacks\nstacks.register(sys.argv[1])\n"
            "def waiting_for_a_snapshot():\n    print('ready', flush=True)\n    time.sleep(60)\n"
            "waiting_for_a_snapshot()\n")
    rank = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        assert rank.stdout.readline().strip() == "ready"
        (tmp_path / "pids").mkdir(exist_ok=True)
        for role, proc in (("evaluator", rank), ("spare0", stranger)):
            (tmp_path / "pids" / f"{role}.json").write_text(json.dumps(
                {"pid": proc.pid, "host": socket.gethostname(), "rank": 1, "role": role, "generation": 0}))
        assert stacks.dump_peers(tmp_path) == ["evaluator"]
        assert "waiting_for_a_snapshot" in stacks.dump_of(tmp_path, socket.gethostname(), rank.pid)
        assert stranger.poll() is None and rank.poll() is None
    finally:
        for proc in (rank, stranger):
            proc.kill()
            proc.wait()


def test_a_wait_whose_peer_died_still_blames_a_stopped_member_on_its_route(tmp_path, monkeypatch):
    """psmodes/suspicion.py: a worker's wait for its answer passes through the PS and the other workers; the
    PS was killed (a repair follows) and worker1, which held the PS up, is stopped. The wait's deadline comes
    (through the repair) and worker1 is the one suspected, though the PS's holder is dead (psbench chaos,
    bounded:2, checkpoint trial-009: found only by the shrink's watch, 4.75 s after its hang)."""
    import socket
    from types import SimpleNamespace

    from psmodes import beacon
    from psmodes.roles import Role
    from psmodes.suspicion import Suspicion

    monkeypatch.setenv("PSBENCH_FENCER", "launcher")
    host, emitted = socket.gethostname(), []
    dead = subprocess.Popen(["true"])
    dead.wait()
    stopped = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        (tmp_path / "pids").mkdir()
        for role, pid in (("ps", dead.pid), ("worker1", stopped.pid)):
            (tmp_path / "pids" / f"{role}.json").write_text(json.dumps(
                {"pid": pid, "host": host, "rank": 0, "role": role, "generation": 0, "t": time.time() - 60}))
        beat = beacon.path_of(tmp_path, host, stopped.pid)
        beat.parent.mkdir(parents=True)
        beat.touch()
        os.utime(beat, (time.time() - 5, time.time() - 5))  # silent for 5 s
        roles = [Role("ps"), Role("worker", 0), Role("worker", 1)]
        ctx = SimpleNamespace(cfg=SimpleNamespace(run_dir=str(tmp_path), suspect_after_s=3.0), cold_until=0.0,
                              cluster=SimpleNamespace(roles=roles, me=roles[1]),
                              log=SimpleNamespace(emit=lambda ev, **f: emitted.append({"ev": str(ev), **f}) or f))
        wait = Suspicion(ctx, 0, "the PS's answer to worker0", route=(0, 2))
        wait.armed_at -= 3.1  # its deadline has come
        wait.check()
        assert [(e["role"], e["pid"]) for e in emitted if e["ev"] == "suspect"] == [("worker1", stopped.pid)]
    finally:
        stopped.kill()
        stopped.wait()

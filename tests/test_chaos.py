"""psbench chaos: the trial plan is drawn from the seed and validated up front; the invariants
catch what they promise to (checked here on hand-made run directories); a short real sweep."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import psbench


def _args(**kw):
    from launch.cli import build_parser

    argv = ["chaos", "--mode", kw.pop("mode", "checkpoint,chain,stateless"), "--trials", str(kw.pop("trials", 5))]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return build_parser().parse_args(argv)


def test_plan_is_reproducible_and_valid(tmp_path):
    from launch.experiments.chaos import plan_trials

    a = plan_trials(_args(seed=4, out=tmp_path / "a"))
    b = plan_trials(_args(seed=4, out=tmp_path / "b"))
    c = plan_trials(_args(seed=5, out=tmp_path / "c"))
    key = lambda ts: [(t.cfg.mode, t.cfg.kill_ps, t.cfg.kill_replica, t.cfg.hang_ps, t.cfg.slow_ps, t.outside,  # noqa: E731
                       t.cfg.replicas, t.cfg.checkpoint_every, t.cfg.replay) for t in ts]
    assert key(a) == key(b) and key(a) != key(c)
    assert len(a) == 15 and all(t.cfg.kill_ps or t.cfg.kill_node or t.cfg.kill_replica or t.cfg.hang_ps
                                or t.cfg.slow_ps or t.outside for t in a)
    assert len({t.cfg.spares for t in a}) > 1 and {t.cfg.spares for t in a} <= {0, 1, 2}
    assert {t.cfg.spares for t in plan_trials(_args(seed=4, out=tmp_path / "e", spares=0))} == {0}
    # the spares are drawn last: the faults of a seed are those it drew before spares existed
    assert key(plan_trials(_args(seed=4, out=tmp_path / "f", spares=0))) == key(a)
    assert not any(t.cfg.refill_spares for t in a)  # not drawn unless asked for
    drawn = plan_trials(_args(seed=4, out=tmp_path / "g", refill_spares="drawn"))
    assert key(drawn) == key(a)  # drawn last, like the spares
    refilled = {(t.cfg.spares > 0, t.cfg.refill_spares) for t in drawn}  # for half the trials with spares
    assert (True, True) in refilled and (True, False) in refilled and (False, True) not in refilled
    assert not any(t.cfg.kill_node for t in a if t.cfg.mode != "checkpoint")
    nodes = plan_trials(_args(seed=4, out=tmp_path / "n", kinds="node"))  # every trial of checkpoint, no other
    assert [bool(t.cfg.kill_node) for t in nodes] == [t.cfg.mode == "checkpoint" for t in nodes]
    assert all(t.cfg.recovery == "job-restart" and t.cfg.spares == 0 and len(t.cfg.kill_node) == 1
               and not (t.cfg.hang_ps or t.cfg.slow_ps or t.outside) for t in nodes if t.cfg.kill_node)
    assert not any(t.cfg.kill_worker or t.cfg.hang_worker for t in a)  # not drawn unless asked for
    workers = plan_trials(_args(seed=4, out=tmp_path / "w", worker_faults="drawn", trials=20))
    assert key(workers[:5]) == key(a[:5])  # its own draw: the others stay as they were
    hit = [t for t in workers if t.cfg.kill_worker or t.cfg.hang_worker]
    assert 0 < len(hit) < len(workers) and any(t.cfg.hang_worker for t in hit) and any(t.cfg.kill_worker for t in hit)
    assert all(t.cfg.consistency == "sync" and t.cfg.allreduce == "mpi" for t in hit)
    assert {t.cfg.exchange for t in hit} == {"pipelined", "blocking"}  # the exchange as drawn: both are elastic
    mixed = plan_trials(_args(seed=4, out=tmp_path / "m", worker_faults="drawn", trials=20, consistency="sync,async"))
    hit = [t for t in mixed if t.cfg.kill_worker or t.cfg.hang_worker]
    assert {t.cfg.consistency for t in hit} == {"sync", "async"}  # async workers are elastic over anything
    assert all(t.cfg.is_async or t.cfg.allreduce == "mpi" for t in hit)
    leaders = [t for t in hit if any(f.endswith("@worker0") for f in t.cfg.kill_worker + t.cfg.hang_worker)]
    assert 0 < len(leaders) < len(hit)
    only = plan_trials(_args(seed=4, out=tmp_path / "d", kinds="pause"))
    assert all(not t.cfg.kill_ps or t.cfg.kill_ps[-1].startswith("+") for t in only)
    assert any("~" in h for t in only for h in t.cfg.hang_ps)


def _trial(tmp_path, mode="chain", **cfg_kw):
    from psmodes.config import RunConfig

    run = tmp_path / "t"
    (run / "checkpoints").mkdir(parents=True)
    cfg = RunConfig(benchmark="synthetic", mode=mode, duration_s=10, run_dir=str(run), **cfg_kw)
    return cfg, run


def _summary(**kw):
    s = {"completed": True, "exit_reason": "completed", "failures": [], "recoveries": [],
         "kills": [{"t_s": 5.0}], "metric_timeline": [[4.0, 100, 0.8], [9.0, 200, 0.85]],
         "final_metric": 0.86, "buffered_sent": 0, "buffered_applied": 0}
    s.update(kw)
    return s


def test_invariants_pass_on_a_good_trial(tmp_path):
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path)
    assert check_trial(cfg, _summary(recoveries=[{"fault": 0, "lost_steps": 0, "recovery_s": 1.0}]), 20) == []


def test_relaxed_chain_may_lose_the_state_in_flight(tmp_path):
    """K > 1: the newest shipped state may be in flight at the kill, 2K-1 lost steps are within the bound."""
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, "chain", replicate_every=5)
    assert check_trial(cfg, _summary(recoveries=[{"fault": 0, "lost_steps": 9, "recovery_s": 1.0}]), 20) == []


@pytest.mark.parametrize("mode, cfg_kw, summary_kw, needle", [
    ("chain", {}, {"recoveries": [{"fault": 0, "kind": "kill", "lost_steps": 1}]},
     "chain: recovery after fault 0 (kill) lost 1"),
    ("chain", {"replicate_every": 5}, {"recoveries": [{"fault": 0, "lost_steps": 10}]}, "allows 9"),
    ("checkpoint", {"checkpoint_every": 10}, {"recoveries": [{"fault": 0, "lost_steps": 21}]}, "allows 20"),
    ("checkpoint", {"checkpoint_every": 10, "checkpoint_sync": True}, {"recoveries": [{"fault": 0, "lost_steps": 11}]},
     "allows 10"),
    ("stateless", {}, {"buffered_sent": 40, "buffered_applied": 20}, "40 buffered updates handed over, 20 applied"),
    ("chain", {}, {"final_metric": 0.70}, "accuracy: 0.700 at the end, 0.800 before the first kill"),
    ("chain", {}, {"completed": False, "exit_reason": "watchdog: the run exceeded", "failures": []}, "deadline"),
    ("chain", {}, {"completed": False, "exit_reason": "incomplete", "failures": []}, "neither completed nor failed"),
    ("chain", {}, {"completed": False, "failures": [{"who": "worker0", "reason": "TypeError: x", "bug": True}]},
     "bug: a rank stopped on an exception psbench did not expect (worker0: TypeError: x)"),
    ("chain", {"workers": 3, "allreduce": "mpi", "exchange": "blocking", "kill_worker": ["3s"]},
     {"completed": False, "failures": [{"reason": "worker2 died; the pipelined exchange ..., so the run ends"}]},
     "elastic: a worker's death ended a run whose workers are elastic"),
    ("chain", {}, {"completed": False, "exit_reason": "PeerTimeout: evaluator receives: no answer in 60 s",
                   "failures": [{"who": "evaluator", "reason": "PeerTimeout: evaluator receives: no answer in 60 s"}]},
     "waited out its peer timeout"),
])
def test_invariants_catch_violations(tmp_path, mode, cfg_kw, summary_kw, needle):
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, mode, **cfg_kw)
    bad = check_trial(cfg, _summary(**summary_kw), 20)
    assert any(needle in b for b in bad), bad


HANG = {"kind": "hang", "planned": True, "t_s": 4.0, "role": "ps", "pid": 7}


@pytest.mark.parametrize("summary_kw, needle", [
    ({"ps_heads": [{"who": "ps", "first_s": 0.0, "last_s": 6.0}, {"who": "ps-gen1", "first_s": 5.5, "last_s": 9.0}]},
     "split brain: ps applied updates until 6.0 s, ps-gen1 from 5.5 s"),
    ({"faults": [{**HANG, "for_s": None}]}, "hang: the hang at 4.0 s was never fenced"),
    ({"faults": [{**HANG, "for_s": None, "fenced_s": 9.0}]}, "was fenced after 5.00 s"),
    ({"faults": [{**HANG, "for_s": 0.5, "fenced_s": 7.0}]}, "a 0.5 s pause at 4.0 s was fenced"),
    ({"faults": [{"kind": "unplanned", "planned": False, "t_s": 3.0, "role": "ps", "pid": 8,
                  "evidence": "suspected by worker0 (x) and fenced"}]}, "false suspicion: ps (pid 8)"),
])
def test_fault_invariants_catch_violations(tmp_path, summary_kw, needle):
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, "checkpoint")  # --suspect-after 3 s
    bad = check_trial(cfg, _summary(**summary_kw), 20)
    assert any(needle in b for b in bad), bad
    fine = {"faults": [{**HANG, "for_s": None, "fenced_s": 7.2}, {**HANG, "t_s": 8.0, "for_s": 0.5, "ended_s": 8.5}],
            "ps_heads": [{"who": "ps", "first_s": 0.0, "last_s": 4.0}, {"who": "ps-gen1", "first_s": 9.0, "last_s": 12}]}
    assert check_trial(cfg, _summary(**fine), 20) == []
    # found by psbench chaos: a PS stopped after it had answered the last step of a completed run
    assert check_trial(cfg, _summary(faults=[{**HANG, "t_s": 10.05, "for_s": None}], train_s=9.99), 20) == []
    # ... or 17 ms before the last answer came, the replacement being what the hang had waited for
    assert check_trial(cfg, _summary(faults=[{**HANG, "t_s": 7.991, "for_s": None}], train_s=8.008), 20) == []
    unrecorded = check_trial(cfg, _summary(faults=[]), 20, outside_kills=[99])
    assert any("pid 99" in b and "not a failure" in b for b in unrecorded), unrecorded


def test_an_outside_kill_that_lands_on_a_process_the_launcher_fenced_first_is_not_counted(tmp_path):
    """chaos seed 46, checkpoint trial-035: the outside killer's SIGKILL landed between the fence's SIGKILL
    of a hung PS and its death, and counted as a death from outside the run could not have seen."""
    import json

    from launch.experiments.chaos import launcher_killed_first

    (tmp_path / "events").mkdir()
    fence = {"t": 100.02, "ev": "fence", "who": "launcher", "t_fence": 100.0, "pid": 41, "host": "h", "role": "ps"}
    (tmp_path / "events" / "launcher.jsonl").write_text(json.dumps(fence) + "\n")
    assert launcher_killed_first(tmp_path, 41, 100.01, wait_s=0)
    assert not launcher_killed_first(tmp_path, 41, 99.9, wait_s=0)  # ours came first: a death from outside
    assert not launcher_killed_first(tmp_path, 42, 100.01, wait_s=0)


def test_invariants_catch_a_torn_checkpoint_and_a_missing_summary(tmp_path):
    from launch.experiments.chaos import check_trial
    from psmodes import checkpoint as ckpt

    cfg, run = _trial(tmp_path, "checkpoint")
    good = ckpt.save(run / "checkpoints", ckpt.make_state(torch.ones(100), None, 3, 0))
    ckpt.path_for(run / "checkpoints", 4).write_bytes(good.read_bytes()[:100])
    bad = check_trial(cfg, _summary(), 20)
    assert len([b for b in bad if b.startswith("checkpoints:")]) == 1, bad
    assert any("no readable summary.json" in b for b in check_trial(cfg, None, 20))


def test_chaos_refuses_bad_input_before_starting(tmp_path):
    proc = psbench("chaos", "--mode", "chain", "--trials", "2", "--consistency", "eventual", "--out", str(tmp_path / "c"))
    assert proc.returncode == 2 and "unknown consistency" in proc.stderr
    assert not (tmp_path / "c").exists()
    proc = psbench("chaos", "--mode", "chain", "--spares", "one", "--out", str(tmp_path / "c"))
    assert proc.returncode == 2 and "--spares 'one'" in proc.stderr and not (tmp_path / "c").exists()
    # a partition needs the PS on another host than the launcher's
    proc = psbench("chaos", "--mode", "chain", "--kinds", "partition", "--out", str(tmp_path / "c"))
    assert proc.returncode == 2 and "put the PS on another host" in proc.stderr and not (tmp_path / "c").exists()


def test_chaos_short_real_trials(tmp_path):
    """A real trial (mpirun, SIGKILLs) of two recovery modes, one with a replica to kill; the table and
    exit status 0. (Two each of three modes until 2026-12-05: 144 s of the suite; three modes until
    2026-12-08; the trials' long runs are psbench chaos's, quoted in the notes.)"""
    out = tmp_path / "chaos"
    proc = psbench("chaos", "--mode", "chain,stateless", "--trials", "1", "--seed", "11",
                   "--duration", "6s", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "invariant violations" in proc.stdout and "slowest recovery" in proc.stdout and "Open MPI crash" in proc.stdout
    trials = json.loads((out / "chaos.json").read_text())["trials"]
    assert len(trials) == 2 and all(not t["violations"] for t in trials)


def test_ctrl_c_ends_the_trials_not_just_one(tmp_path):
    """SIGINT during a trial stops chaos (exit 130) and takes that trial's MPI job down;
    the trials finished before it stay in chaos.json."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    out = tmp_path / "chaos"
    proc = subprocess.Popen([sys.executable, "-m", "launch.cli", "chaos", "--mode", "chain", "--trials", "3",
                             "--duration", "20s", "--out", str(out)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a suite started in the background (`make test &`) inherits SIGINT ignored,
                            # and Python keeps it so: give chaos the disposition a terminal would
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not list(out.glob("chain/trial-000/events/worker0.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted during chain/trial-000" in stderr
    assert not (out / "chain" / "trial-001").exists()
    from launch.experiments.chaos import leftover_processes

    assert leftover_processes((out / "chain" / "trial-000").resolve()) == []


def test_a_hang_behind_another_hang_is_timed_from_that_ones_fence(tmp_path):
    """psbench chaos (hybrid, seed 46, trial-001): the head hung at 2.86 s and replica1 at 3.06 s; nobody
    waits on a replica but the head, so the repair's shrink found it, --suspect-after after the head's
    fence (5.9 s): fenced 5.95 s after its hang, in time; alone it would be late."""
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, "checkpoint")  # --suspect-after 3 s
    head = {**HANG, "t_s": 2.86, "for_s": None, "fenced_s": 5.9}
    replica = {**HANG, "t_s": 3.06, "role": "replica1", "pid": 9, "for_s": None, "fenced_s": 9.01}
    assert check_trial(cfg, _summary(faults=[head, replica]), 20) == []
    late = check_trial(cfg, _summary(faults=[replica]), 20)
    assert any("fenced after 5.95 s" in b for b in late), late
    much_later = check_trial(cfg, _summary(faults=[head, {**replica, "fenced_s": 11.0}]), 20)
    assert any("fenced after 7.94 s" in b for b in much_later), much_later


def test_hybrid_loses_what_chain_would_when_its_leader_died_in_the_recovery(tmp_path):
    """Worker chaos (hybrid K=20, seed 53, trial-002): the PS hung, then the leader; the upstream backup died with
    the leader and the promoted replica lacked the 15 steps since the tail's last ACK: chain's bound (2K-1), not 0."""
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, "hybrid", workers=3, replicas=2, replicate_every=20)
    ps = {**HANG, "t_s": 2.47, "for_s": None, "fenced_s": 9.06}
    leader = {**HANG, "t_s": 3.01, "role": "worker0", "pid": 9, "for_s": None, "fenced_s": 5.95}
    rec = {"fault": 1, "kind": "hang", "lost_steps": 15, "recovery_s": 6.1}
    assert not [b for b in check_trial(cfg, _summary(faults=[ps, leader], recoveries=[rec]), 20) if "lost" in b]
    alone = check_trial(cfg, _summary(faults=[ps], recoveries=[{**rec, "fault": 0}]), 20)
    assert any("lost 15 steps (hybrid K=20 R=2 allows 0)" in b for b in alone), alone
    over = check_trial(cfg, _summary(faults=[ps, leader], recoveries=[{**rec, "lost_steps": 40}]), 20)
    assert any("allows 39, the leader lost" in b for b in over), over


def test_a_hang_whose_watcher_hung_too_is_timed_from_the_watchers_fence(tmp_path):
    """Worker chaos (hybrid, seed 53, trial-002): the PS hung at 2.48 s and the leader, the only rank waiting for
    its answer, at 3.02 s; the others found the leader by its silent beacon, the repair after its fence the PS."""
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, "checkpoint")  # --suspect-after 3 s
    ps = {**HANG, "t_s": 2.48, "for_s": None, "fenced_s": 9.3}
    leader = {**HANG, "t_s": 3.02, "role": "worker0", "pid": 9, "for_s": None, "fenced_s": 6.2}
    assert check_trial(cfg, _summary(faults=[ps, leader]), 20) == []
    assert any("fenced after 6.82 s" in b for b in check_trial(cfg, _summary(faults=[ps]), 20))
    # a watcher that hung after --suspect-after had passed is no excuse: the PS should have been found by then
    assert any("fenced after 6.82 s" in b for b in check_trial(cfg, _summary(faults=[ps, {**leader, "t_s": 5.6}]), 20))


def test_a_hang_on_a_cut_off_host_is_timed_from_the_cut_or_the_fence_it_waited_for(tmp_path):
    """psbench chaos over two hosts (seed 46, at ac07ae6): chain trial-015, the PS hung 0.6 s into a 1.8 s cut
    of its host (its answers sent before the hang arrived when the link came back) and was fenced 3.5 s
    after the link was back; chain trial-019, replica1 hung while the PS's host was cut off for 4.8 s, and
    only the shrink after the PS's fence found it, 3.1 s after that fence. Both in time; alone, late."""
    from launch.experiments.chaos import check_trial

    cfg, _ = _trial(tmp_path, "checkpoint")  # --suspect-after 3 s
    cut = {"kind": "partition", "planned": True, "t_s": 2.279, "for_s": 1.8, "role": "ps", "pid": 7, "host": "nodeb"}
    hung = {**HANG, "t_s": 2.893, "for_s": None, "fenced_s": 7.6, "host": "nodeb"}
    assert check_trial(cfg, _summary(faults=[cut, hung]), 20) == []
    assert any("fenced after 4.71 s" in b for b in check_trial(cfg, _summary(faults=[hung]), 20))
    long_cut = {**cut, "t_s": 1.36, "for_s": 4.8, "fenced_s": 6.495}
    replica = {**HANG, "t_s": 2.577, "for_s": None, "fenced_s": 9.629, "role": "replica1", "pid": 9, "host": "nodea"}
    assert check_trial(cfg, _summary(faults=[long_cut, replica]), 20) == []
    assert any("fenced after 7.05 s" in b for b in check_trial(cfg, _summary(faults=[replica]), 20))

"""The recovery modes under a real SIGKILL of the real PS process (real mpirun,
ULFM). The synthetic benchmark keeps these short; the fmnist figures are in
the issue notes."""
from __future__ import annotations

import shutil

import pytest

from conftest import ROOT, events, resumed_from_newest, run_ok

SYN = ["--benchmark", "synthetic", "--model-params", "200000", "--workers", "2", "--eval-interval", "1s",
       "--restart-delay", "2s"]


def leader_detections(out):
    return [d for d in events(out, "detect", "worker0") if d["via"] == "leader"]


def kill_times(out):
    return [k["t_kill"] for k in events(out, "kill")]


def test_none_mode_ends_cleanly_when_the_ps_dies(tmp_path):
    out, s = run_ok(tmp_path, *SYN, "--mode", "none", "--duration", "30s", "--kill-ps", "4s",
                    expect_complete=False)
    assert not s["completed"]
    assert "PS died" in s["exit_reason"] or "mode none" in s["exit_reason"], s["exit_reason"]
    assert len(s["kills"]) == 1 and s["kills"][0]["role"] == "ps"
    assert s["detections"] and 0 < s["detections"][0]["latency_s"] < 10
    assert s["wall_s"] < 40  # ended promptly, well before the 30 s of training it was given


def test_checkpoint_resumes_from_newest_checkpoint(tmp_path):
    k = 50
    out, s = run_ok(tmp_path, *SYN, "--mode", "checkpoint", "--checkpoint-every", str(k),
                    "--duration", "14s", "--kill-ps", "5s")
    assert len(s["kills"]) == 1 and len(s["recoveries"]) == 1
    resume, in_flight = resumed_from_newest(out)
    rec = s["recoveries"][0]
    (detect,) = leader_detections(out)
    assert rec["lost_steps"] == detect["version"] - resume["from_version"]
    # <= K when the newest checkpoint was durable at the kill; the background write
    # of the next one may still be in flight, adding the steps taken during it
    assert 0 <= rec["lost_steps"] <= (2 * k if in_flight else k), (rec, in_flight)
    assert rec["idle_s"] >= 2.0  # the workers waited for the restart delay
    # but not longer than the outage (from the last exchange, at most a step before the kill): the
    # repair steps of an iteration that only waited were once counted twice
    assert rec["idle_s"] <= rec["recovery_s"] + 0.5, rec
    assert s["final_metric"] is not None


def test_checkpoint_sync_loses_at_most_k(tmp_path):
    k = 10
    out, s = run_ok(tmp_path, *SYN, "--mode", "checkpoint", "--checkpoint-every", str(k), "--checkpoint-sync",
                    "--duration", "12s", "--kill-ps", "step:333")
    (resume,) = events(out, "resume")
    (detect,) = leader_detections(out)
    assert resume["from_version"] % k == 0
    if resume["from_version"] == detect["version"] + 1:
        # the PS applied and checkpointed the leader's in-flight gradient, then died before it answered
        # (seen once in a suite): the replacement must know it has that update and not apply it again
        (hello,) = events(out, "hello", "ps-gen1")
        assert hello["pending"] == "already applied", hello
    else:
        assert resume["from_version"] <= detect["version"]
    assert 0 <= s["recoveries"][0]["lost_steps"] <= k


def test_chain_replica_death_is_repaired(tmp_path):
    out, s = run_ok(tmp_path, *SYN, "--mode", "chain", "--replicas", "2", "--duration", "14s",
                    "--kill-replica", "4s")
    (kill,) = s["kills"]
    assert kill["role"] == "replica2"
    assert s["detections"] and s["recoveries"][0]["lost_steps"] == 0
    respawned = events(out, "respawned", "worker0")
    assert respawned and respawned[0]["spawned"] == ["replica2"]
    assert any(e["who"] == "replica2-gen1" for e in events(out, "done"))


def test_chain_strict_failover_loses_nothing(tmp_path):
    out, s = run_ok(tmp_path, *SYN, "--mode", "chain", "--replicas", "2", "--replicate-every", "1",
                    "--duration", "14s", "--kill-ps", "5s")
    (detect,) = leader_detections(out)
    hello = [h for h in events(out, "hello") if h.get("workers_version") == detect["version"]]
    assert hello, "the new head never reconciled with the leader"
    assert hello[0]["digest_at_workers_version"] == detect["digest"], "new head's weights differ from the workers'"
    assert hello[0]["lost_steps"] == 0 and s["recoveries"][0]["lost_steps"] == 0
    # the chain is repaired: a new tail was spawned and followed the chain to the end
    respawned = events(out, "respawned", "worker0")
    assert respawned and respawned[0]["spawned"] == ["replica2"]
    assert {e["who"] for e in events(out, "done") if e["who"].startswith("replica")} >= {"replica1", "replica2-gen1"}


def test_chain_relaxed_loses_at_most_2k_minus_1(tmp_path):
    """K > 1: the newest shipped state may be in flight at the kill (docs/modes.md)."""
    k = 20
    out, s = run_ok(tmp_path, *SYN, "--mode", "chain", "--replicas", "1", "--replicate-every", str(k),
                    "--duration", "12s", "--kill-ps", "5s")
    assert s["recoveries"][0]["lost_steps"] <= 2 * k - 1


def test_stateless_workers_keep_training_and_every_update_is_applied(tmp_path):
    out, s = run_ok(tmp_path, *SYN, "--mode", "stateless", "--replay", "sequential",
                    "--duration", "20s", "--kill-ps", "5s", "--restart-delay", "3s")
    tk = kill_times(out)[0]
    rec = s["recoveries"][0]
    buffered_steps = [e for e in events(out, "step", "worker0") if not e["applied"] and e["t"] > tk]
    assert len(buffered_steps) >= 5, "workers idled while the PS was down"
    (handover,) = events(out, "handover")
    (replayed,) = events(out, "replayed")
    assert handover["buffered"] == replayed["applied"] == rec["buffered_updates"] > 0
    det = s["detections"][0]["latency_s"]
    step_s = max(e["compute_s"] for e in events(out, "step", "worker0"))
    # Idle: detection + moving the buffer (256 gradients for `sequential`) + a
    # step. The spawn (workers join it from a helper thread) and the
    # replacement's cold start (it says READY when done) overlap training.
    assert rec["idle_s"] <= det + handover["seconds"] + step_s + 0.5, (rec, det, handover["seconds"])


# three: the third repair is the first whose shrink runs on a world made from a group after an
# earlier such world's shrink, where Open MPI 5.0.11 reused the agreements' names (psmodes.cluster.join;
# run_ok fails a run whose mpirun.log says so). Seen with chain and two replicas (4 reused names in
# one run without the fix), not with checkpoint's three ranks
@pytest.mark.parametrize("mode,extra", [("checkpoint", []), ("stateless", []), ("chain", ["--replicas", "2"])],
                         ids=["checkpoint", "stateless", "chain-R2"])
def test_three_kills_each_hit_the_replacement(tmp_path, mode, extra):
    out, s = run_ok(tmp_path, *SYN, "--mode", mode, *extra, "--duration", "26s", "--kill-ps", "4s,11s,18s",
                    "--checkpoint-every", "20", "--deadline", "100s")
    kills = s["kills"]
    assert len(kills) == 3 and len({k["pid"] for k in kills}) == 3
    assert all(k["role"] == "ps" for k in kills)
    if mode != "chain":  # a spawned PS each time (chain: the replicas are promoted in turn)
        assert [k["generation"] >= 1 for k in kills] == [False, True, True]
    assert len(s["recoveries"]) == 3


@pytest.mark.parametrize("policy", ["paper", "mean", "staleness", "local"])
def test_stateless_replay_policies(tmp_path, policy):
    out, s = run_ok(tmp_path, *SYN, "--mode", "stateless", "--replay", policy, "--duration", "12s",
                    "--kill-ps", "4s")
    (handover,) = events(out, "handover")
    (replayed,) = events(out, "replayed")
    assert handover["buffered"] == replayed["applied"] == s["recoveries"][0]["buffered_updates"] > 0
    assert replayed["policy"] == policy
    # every buffered gradient counts as one PS version, whatever the policy
    assert replayed["version"] == handover_version(out) + handover["buffered"]
    assert s["final_metric"] > 0.5  # the hand-over did not wreck the model
    check_setback(s, policy, handover["buffered"])
    rec, det = s["recoveries"][0], s["detections"][0]["latency_s"]
    step_s = max(e["compute_s"] for e in events(out, "step", "worker0"))
    assert rec["idle_s"] <= det + handover["seconds"] + step_s + 0.5, (rec, det, handover["seconds"])


def check_setback(s, policy, buffered) -> None:
    """The setback record agrees with the timeline around the kill; the paper's policy (the buffered
    gradients summed, at a reduced learning rate) has a known dip on this workload (psbench chaos:
    0.25-0.58 in 11 of 11 replays), the mean of the same gradients none (0.0 in 9 of 9)."""
    (back,) = s["setbacks"]
    t_kill = s["kills"][0]["t_s"]
    before = [(t, a) for t, _, a in s["metric_timeline"] if t < t_kill]
    after = [a for t, _, a in s["metric_timeline"] if t >= t_kill]
    assert (back["before_t_s"], back["before"]) == tuple(before[-1])
    assert back["worst"] == min(after) and back["dip"] == round(max(0.0, before[-1][1] - min(after)), 4)
    assert back["lost_steps"] == 0 and back["lost_samples"] == 0  # stateless loses no step
    assert back["cause"] == f"replay of {buffered} buffered updates (policy {policy})"
    if policy == "paper":
        assert back["dip"] > 0.1, back
    if policy == "mean":
        assert back["dip"] < 0.1, back


def handover_version(out):
    (hello,) = [h for h in events(out, "hello", "ps-gen1")]
    return hello["leader_version"]


def test_chain_fails_promptly_when_head_and_all_replicas_die(tmp_path):
    # the promoted head is killed before the new tail joined (restart delay 10 s): no copy of the state is left
    out, s = run_ok(tmp_path, *SYN[:-2], "--restart-delay", "10s", "--mode", "chain", "--duration", "30s",
                    "--kill-ps", "4s,5s", expect_complete=False)
    assert not s["completed"] and len(s["kills"]) == 2
    assert "no copy of the PS state survives" in s["exit_reason"], s["exit_reason"]
    assert s["wall_s"] < 45  # failed promptly instead of hanging until the watchdog


def test_a_user_workload_from_outside_the_repo_survives_a_ps_kill(tmp_path):
    """--benchmark FILE.py:FACTORY with the README's example (benchmarks/examples) copied to a folder outside the checkout."""
    mine = tmp_path / "elsewhere" / "my_workload.py"
    mine.parent.mkdir()
    shutil.copy(ROOT / "benchmarks" / "examples" / "custom_workload.py", mine)
    out, s = run_ok(tmp_path, "--benchmark", f"{mine}:workload", "--workers", "2", "--mode", "checkpoint",
                    "--checkpoint-every", "20", "--duration", "10s", "--kill-ps", "4s", "--restart-delay", "1s",
                    "--eval-interval", "1s")
    assert s["benchmark"] == f"{mine}:workload" and len(s["kills"]) == 1 and len(s["recoveries"]) == 1
    assert s["final_metric"] > 0.45, s["final_metric"]  # three classes: chance is 0.33

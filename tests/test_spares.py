"""Hot spares (``--spares N``, psmodes/spare.py): ranks started with the job that take a dead
role's place without ``MPI_Comm_spawn``. Real jobs, real kills at kill points; each run checks
its mode's promise exactly as tests/test_killpoints.py does for a spawned replacement."""
from __future__ import annotations

import pytest

from conftest import events, run_ok
from test_killpoints import MODE_ARGS, SYN_BASE, check_invariants, syn

pytestmark = pytest.mark.slow


def starts(out) -> dict:
    return {e["who"]: e for e in events(out, "start")}


def repairs(out) -> list[tuple[list, list]]:
    """(roles the spares took, roles spawned) of each repair, as the leader saw it."""
    return [(e["from_spares"], e["spawned"]) for e in events(out, "respawned", "worker0")]


def test_a_spare_takes_the_ps_and_a_spawn_follows_when_none_is_left(tmp_path):
    """checkpoint: the PS killed at update 100, the spare that took its place killed as it takes
    over; the pool is empty then, so the survivors spawn. Both resume from the newest checkpoint."""
    out, s = run_ok(tmp_path, *syn("checkpoint"), "--spares", "1",
                    "--kill-ps", "point:apply@100,point:takeover")
    check_invariants(out, s, "checkpoint", 2)
    assert repairs(out) == [(["ps"], []), ([], ["ps"])]
    by = starts(out)
    assert by["ps-gen1"]["pid"] == by["spare0"]["pid"] and by["ps-gen1"]["spare"] == "spare0"
    assert s["kills"][1]["pid"] == by["spare0"]["pid"], "the kill at takeover did not hit the promoted spare"
    assert "spare" not in by["ps-gen2"]  # spawned
    assert [e["from_version"] for e in events(out, "resume")] == sorted(e["from_version"] for e in events(out, "resume"))


def test_a_refilled_spare_takes_the_next_kill(tmp_path):
    """checkpoint, --spares 1 --refill-spares: the spare takes the PS at update 100; once training
    runs again the survivors spawn a new spare, which takes the PS at the second kill (and is
    refilled in turn): no PS is spawned cold, and a refill is no outage (one recovery per kill)."""
    out, s = run_ok(tmp_path, *SYN_BASE, *MODE_ARGS["checkpoint"], "--spares", "1", "--refill-spares",
                    "--duration", "14s", "--kill-ps", "point:apply@100,+7s")
    check_invariants(out, s, "checkpoint", 2)
    assert repairs(out) == [(["ps"], []), ([], ["spare0"])] * 2, repairs(out)
    refills = [e for e in events(out, "respawned", "worker0") if e["refill"]]
    assert [r["spawned"] for r in s["refills"]] == [["spare0"]] * 2 and all(r["seconds"] < 10 for r in refills)
    by = starts(out)
    new_spare = by[f"spare0-gen{refills[0]['generation']}"]
    assert s["kills"][1]["pid"] == by["ps-gen1"]["pid"] == by["spare0"]["pid"]  # the first spare, as the PS
    (taken,) = events(out, "spare_taken", new_spare["who"])  # the refilled one takes the PS next
    assert taken["role"] == "ps" and by[taken["log"]]["pid"] == new_spare["pid"]
    assert len(s["recoveries"]) == 2
    second = s["kills"][1]["t_s"]
    assert all(r["t_s"] < second or r["t_s"] > second + s["recoveries"][1]["recovery_s"] for r in s["refills"])


def test_spares_take_the_chain_tail_and_the_one_left_retires(tmp_path):
    """chain, two replicas: the head killed, replica 1 heads the chain, replica 2 moves up, and
    spare 0 becomes the new tail; spare 1 waits out the run without spinning and retires."""
    out, s = run_ok(tmp_path, *syn("chain"), "--spares", "2", "--kill-ps", "point:apply@100")
    check_invariants(out, s, "chain", 1)
    assert repairs(out) == [(["replica2"], [])]
    (taken,) = events(out, "spare_taken")
    assert taken["who"] == "spare0" and taken["role"] == "replica2"
    assert starts(out)["replica2-gen1"]["pid"] == starts(out)["spare0"]["pid"]
    waited = s["usage"]["spare1"]
    assert waited["wait_s"] > 3 and waited["wait_cpu_frac"] < 0.25, waited  # a spinning spare shows ~1.0
    assert not events(out, "spare_taken", "spare1")


def test_an_async_hand_over_reaches_a_spare(tmp_path):
    """stateless, async: every worker hands its buffered updates to the spare that took the PS's place."""
    out, s = run_ok(tmp_path, *syn("stateless"), "--consistency", "async", "--spares", "1",
                    "--kill-ps", "point:apply@100")
    check_invariants(out, s, "stateless", 1)
    assert repairs(out) == [(["ps"], [])]
    assert {h["who"] for h in events(out, "handover")} == {"worker0", "worker1"}

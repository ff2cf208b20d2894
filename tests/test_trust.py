"""Figures you can trust: a diverged run is its own outcome (never "completed", never averaged),
and a checkpoint of a replaced PS generation is never restored. Each test fails without the
protection it names."""
from __future__ import annotations

import json
import math
import os
import re

import pytest
import torch

from conftest import deaths_on_record, events, psbench, run_ok

# a regressor that the stateless replay throws over a cliff (tests/cliff_workload.py)
CLIFF = ["--benchmark", "tests/cliff_workload.py:workload", "--workers", "2", "--restart-delay", "0",
         "--eval-interval", "1s"]
DIVERGING = [*CLIFF, "--mode", "stateless", "--replay", "sequential", "--kill-ps", "step:40", "--duration", "8s"]

SWEEP = """
name = "cliff"
seeds = [0]
[base]
benchmark = "tests/cliff_workload.py:workload"
workers = 2
duration = "6s"
restart-delay = "0"
eval-interval = "1s"
kill-ps = "step:40"
replay = "sequential"
checkpoint-every = 20
[grid]
mode = ["stateless", "checkpoint"]
"""


def test_a_replay_that_diverges_ends_the_run_as_diverged_and_the_report_says_so(tmp_path):
    """The user's GRU under the paper's replay went to NaN and was reported completed. Here the replay
    of 256 gradients computed on frozen weights throws the model over its cliff: the next gradient is
    infinite, the PS records it once with what preceded it, the run stops (--on-diverge stop), the
    setback never counts a NaN as regained, and a sweep's report names the diverged run and keeps
    every figure finite."""
    sweep = tmp_path / "cliff.toml"
    sweep.write_text(SWEEP)
    out = tmp_path / "sweep"
    proc = psbench("sweep", str(sweep), "--out", str(out), "--report-dir", str(tmp_path / "report"), "--quiet",
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (stateless,) = [p for p in out.glob("runs/*/summary.json") if "stateless" in p.parent.name]
    s = json.loads(stateless.read_text())
    run = stateless.parent
    assert not s["completed"] and s["exit_reason"].startswith("diverged: "), s["exit_reason"]
    d = s["diverged"]
    assert d["who"].startswith("ps") and d["where"] == "gradient", d
    assert d["preceded_by"]["what"] == "replay" and d["preceded_by"]["policy"] == "sequential", d
    assert d["preceded_by"]["updates"] > 0 and d["preceded_by"]["updates_since"] <= 2, d
    assert len(events(run, "diverged", "ps")) == 1  # recorded once
    (setback,) = s["setbacks"]
    assert setback["diverged"] and setback["regained_s"] is None and setback["dip"] is None, setback
    assert s["final_metric"] is None  # non-finite: never a number to average
    assert "NaN" not in stateless.read_text() and "Infinity" not in stateless.read_text()  # strict JSON
    assert s["train_s"] < 6, s["train_s"]  # stopped at the divergence, not at the end of its 8 s
    text = (tmp_path / "report" / "report.md").read_text()
    assert "1/1 seeds **diverged** after a replay of" in text, text[:3000]
    assert "DIVERGED" in text and not re.search(r"\|\s*(nan|inf)\b", text, re.I), text[:3000]  # no NaN cell
    checkpoint = next(p for p in out.glob("runs/*/summary.json") if "checkpoint" in p.parent.name)
    assert json.loads(checkpoint.read_text())["completed"]  # the same model, kept state: no divergence


def test_on_diverge_continue_trains_on_and_records_the_same(tmp_path):
    out, s = run_ok(tmp_path, *DIVERGING, "--on-diverge", "continue", expect_complete=False)
    # once in a suite (2026-12-07) the run recorded no divergence, and passed 4 of 4 alone: say what it recorded
    assert s["diverged"] and s["diverged"]["policy"] == "continue", s["exit_reason"] + "\n" + deaths_on_record(out, s)
    assert not s["completed"] and s["exit_reason"].startswith("diverged")
    assert s["train_s"] > 7, s["train_s"]  # trained to the end of its 8 s
    evaluated = [e["value"] for e in events(out, "eval")]
    assert not math.isfinite(evaluated[-1])  # its weights stayed non-finite: recorded, not hidden


def test_bad_on_diverge_value_is_one_line():
    proc = psbench("run", "--on-diverge", "maybe", "--dry-run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--on-diverge" in proc.stderr and "stop, continue" in proc.stderr


# ---- checkpoint generations (psmodes/checkpoint.py)
def _state(version: int, generation: int, value: float = 1.0) -> dict:
    from psmodes import checkpoint as ckpt

    return ckpt.make_state(torch.full((10,), value), None, version, 0, generation=generation)


def test_a_replaced_generation_never_wins_a_restore_nor_prunes_the_new_one(tmp_path):
    """A PS declared dead while alive keeps writing: its higher versions must not be restored over
    the new PS's state, its prune must not delete the new PS's files, and its writes are refused."""
    from psmodes import checkpoint as ckpt

    old = ckpt.claim(tmp_path)
    assert old == 0
    ckpt.save(tmp_path, _state(100, old))
    new = ckpt.claim(tmp_path)  # the replacement
    assert new == 1
    ckpt.save(tmp_path, _state(40, new, 2.0))
    with pytest.raises(ckpt.StaleWriter):  # the old PS's next write
        ckpt.save(tmp_path, _state(200, old))
    # one that slipped in before the claim (or on a file system whose listing lags) loses anyway
    ckpt.path_for(tmp_path, 900, old).write_bytes(ckpt.path_for(tmp_path, 100, old).read_bytes())
    state, _ = ckpt.newest(tmp_path, 10)
    assert (state["generation"], state["version"]) == (1, 40)
    # the old writer's prune (as if its refusal were bypassed) keeps the new generation's file
    for v in (300, 301, 302, 303):
        ckpt.path_for(tmp_path, v, old).write_bytes(ckpt.path_for(tmp_path, 100, old).read_bytes())
    (tmp_path / ckpt.FENCE).write_text("0\n")
    ckpt.save(tmp_path, _state(304, old))
    assert ckpt.path_for(tmp_path, 40, new).exists()
    # a killed writer's temporary file is removed at restore
    (tmp_path / ".ckpt-g0001-0000000050.pt.x.tmp").write_bytes(b"torn")
    assert ckpt.remove_leftovers(tmp_path) == [".ckpt-g0001-0000000050.pt.x.tmp"]


def test_a_checkpoint_of_a_replaced_generation_is_never_restored_in_a_run(tmp_path):
    """Under mpirun: the first replacement (generation 1) takes over; a checkpoint with a far higher
    version is then planted as if the first PS, declared dead while alive, had written it; the second
    replacement must resume from generation 1's newest, not from it (its weights are NaN: had it
    been restored, the run would have diverged)."""
    import subprocess
    import threading
    import time

    from conftest import PSBENCH, ROOT
    from psmodes import checkpoint as ckpt

    out = tmp_path / "run"
    args = [*PSBENCH, "run", "--quiet", "--no-report", "--out", str(out), "--benchmark", "synthetic",
            "--model-params", "20000", "--workers", "2", "--no-evaluator", "--mode", "checkpoint",
            "--checkpoint-every", "10", "--restart-delay", "0", "--kill-ps", "step:60,step:400", "--steps", "600"]
    planted = threading.Event()

    def plant() -> None:
        folder = out / "checkpoints"
        t_end = time.time() + 120
        while time.time() < t_end and not events(out, "resume"):
            time.sleep(0.02)
        numel = ckpt.load(ckpt.checkpoint_files(folder)[-1])["weights"].numel()
        zombie = ckpt.make_state(torch.full((numel,), float("nan")), None, 10**6, 0, generation=0)
        torch.save({**zombie, "optimizer_state": torch.zeros(0)}, ckpt.path_for(folder, 10**6, 0))
        planted.set()

    helper = threading.Thread(target=plant, daemon=True)
    helper.start()
    proc = subprocess.run(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert planted.is_set(), "the first replacement never resumed"
    s = json.loads((out / "summary.json").read_text())
    resumes = events(out, "resume")
    assert [r["generation"] for r in resumes] == [1, 2], resumes
    assert resumes[1]["from_generation"] == 1 and resumes[1]["from_version"] < 10**6, resumes[1]
    assert s["completed"] and not s["diverged"], (s["exit_reason"], proc.stderr[-2000:])


# ---- world generations (psmodes.transport.Generations)
def test_async_chain_with_a_spare_takes_no_stale_answer_and_fences_nobody(tmp_path):
    """A spare's take-over relabels the same communicator: an async worker took the PS's answer to a
    gradient sent before it as the answer to its Hello after it, stayed one answer behind, and after
    training suspected the live new head, which was fenced (an unplanned failure of psbench's own
    making; reproduced with this schedule, seed 2). With generations the old answer (or the gradient
    it answers) is dropped: one planned failure, no fence, every worker reconnected in generation 1."""
    out, s = run_ok(tmp_path, "--benchmark", "synthetic", "--model-params", "200000", "--workers", "2",
                    "--consistency", "async", "--mode", "chain", "--spares", "1", "--duration", "12s",
                    "--kill-ps", "30%", "--restart-delay", "0", "--seed", "2", "--eval-interval", "2s")
    assert [f["kind"] for f in s["faults"]] == ["kill"], s["faults"]
    assert not events(out, "fence") and not events(out, "suspect")
    for w in ("worker0", "worker1"):
        assert any(e["generation"] == 1 for e in events(out, "connected", w)), w
    assert s["stale_messages"]["dropped"] == len(events(out, "stale_dropped"))


# ---- every waiting role is suspected by the one that waits on it (psmodes/suspicion.py)
@pytest.mark.parametrize("hung, every", [("replica2", "1"), ("replica1", "1"), ("replica2", "5")])
def test_the_hung_replica_of_a_chain_of_two_is_the_one_fenced(tmp_path, hung, every):
    """The head blamed its successor for the tail's missing acknowledgement: with two replicas a hung
    tail had the live replica1 fenced, then everyone waited in the shrink for the hung tail until the
    watchdog. Now the head suspects its successor for a state it does not take and the tail for a
    missing ACK, and replica1 suspects the tail for a state it cannot forward; a hung replica1 must
    not have the tail blamed either (psbench chaos, seed 44, chain trial-005): the hung pid is
    fenced, nothing else, and the run completes. Replicated every 5 updates (no ACK waited for), the
    head and replica1 both suspected their successors after the same wait, 31 ms apart, and the live
    replica1 was fenced with the hung tail (seed 46, trial-029): replica1 now suspects sooner, and the
    launcher does not fence a suspect that was itself waiting for a peer it suspected."""
    out, s = run_ok(tmp_path, "--benchmark", "synthetic", "--model-params", "200000", "--workers", "2",
                    "--no-evaluator", "--mode", "chain", "--replicas", "2", "--duration", "10s",
                    "--hang-replica", f"3s@{hung}", "--replicate-every", every, "--restart-delay", "0")
    (hang,) = events(out, "hang")
    fences = events(out, "fence")
    assert [(f["pid"], f["role"]) for f in fences] == [(hang["pid"], hung)], fences
    assert "watchdog" not in s["exit_reason"]
    assert [f["kind"] for f in s["faults"]] == ["hang"] and s["faults"][0].get("fenced_s") is not None


def test_a_hung_evaluator_is_found_by_the_repair_and_fenced(tmp_path):
    """Nobody waits on the evaluator during training: hung at 3.2 s (a drawn --failures, seed 54),
    it was found by nobody, and when the PS died at 6 s every survivor waited for it in the
    repair's shrink until the watchdog. Its beacon went silent with it (psmodes/beacon.py): the
    shrink suspects it, it is fenced, the repair goes on and the run completes."""
    out, s = run_ok(tmp_path, "--benchmark", "synthetic", "--model-params", "200000", "--workers", "2",
                    "--mode", "checkpoint", "--checkpoint-every", "20", "--restart-delay", "0", "--eval-interval", "1s",
                    "--failures", "evaluator:exp:20s:hang", "--failure-seed", "54", "--kill-ps", "6s",
                    "--duration", "14s")
    (hang,) = events(out, "hang")
    assert hang["role"] == "evaluator"
    fences = events(out, "fence")
    assert [f["pid"] for f in fences] == [hang["pid"]], fences
    assert "shrink" in fences[0]["what"], fences[0]
    assert "watchdog" not in s["exit_reason"]

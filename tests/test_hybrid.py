"""--mode hybrid (psmodes/modes/hybrid.py): chain replication every K updates plus the
leader's upstream backup. The backup's bookkeeping on its own, then real PS kills under
real mpirun: 0 lost steps with K=20, where chain with the same K may lose up to 2K-1."""
from __future__ import annotations

import pytest
import torch

from conftest import events, run_ok
from psmodes.modes.hybrid import UpstreamBackup

SYN = ["--benchmark", "synthetic", "--model-params", "200000", "--workers", "2", "--no-evaluator",
       "--restart-delay", "2s"]


def test_backup_keeps_consecutive_versions_since_the_acknowledged_one():
    b = UpstreamBackup(capacity=5)
    for v in range(10, 14):
        b.keep(v, torch.full((3,), float(v)))
    b.prune(12)  # the tail holds version 12: the gradients for 10 and 11 are no longer needed
    assert [v for v, _ in b.kept] == [12, 13]
    assert [float(t[0]) for t in b.vectors(upto=14)] == [12.0, 13.0]
    b.prune(-1)  # nothing known (a PS that just took over): keep everything
    assert len(b.kept) == 2
    b.keep(20, torch.zeros(3))  # not consecutive: the PS could not replay across the hole
    assert [v for v, _ in b.kept] == [20]
    for v in range(21, 30):
        b.keep(v, torch.zeros(3))
    assert [v for v, _ in b.kept] == list(range(25, 30)) and b.dropped == 5
    kept = [t for _, t in b.kept]
    b.prune(30)
    b.keep(30, torch.ones(3))
    assert any(b.kept[0][1] is t for t in kept), "buffers are reused, not allocated per step"


@pytest.mark.parametrize("exchange", ["blocking", "pipelined"])
def test_hybrid_loses_nothing_when_the_head_dies_between_replications(tmp_path, exchange):
    k = 20
    out, s = run_ok(tmp_path, *SYN, "--mode", "hybrid", "--replicas", "1", "--replicate-every", str(k),
                    "--duration", "12s", "--kill-ps", "point:apply@130", "--exchange", exchange)
    (rec,) = s["recoveries"]
    assert rec["lost_steps"] == 0, rec
    hello = [h for h in events(out, "hello") if "caught_up" in h]
    assert hello and hello[0]["lost_steps"] == 0, hello
    assert hello[0]["caught_up"] > 0, "the promoted replica had every update already: the kill missed the window"
    (detect,) = [d for d in events(out, "detect", "worker0") if d["via"] == "leader"]
    assert hello[0]["workers_version"] == detect["version"], (hello, detect)
    assert hello[0]["digest_at_workers_version"] == detect["digest"], "caught up, but not to the workers' weights"
    if exchange == "pipelined":  # the workers had applied the gradient in flight: the PS applied it once
        assert hello[0]["pending"] == "applied" and hello[0]["ps_version"] == detect["version"], hello
    # bitwise: the workers' copy and the PS's ended equal
    digests = {e["who"]: e.get("digest") for e in events(out, "done") if e.get("digest")}
    assert len(set(digests.values())) == 1, digests

"""Checkpoints: atomic under SIGKILL, validated on load, never unpickled beyond weights_only."""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from psmodes import checkpoint as ckpt

ROOT = Path(__file__).resolve().parent.parent

WRITER = """
import sys, torch
sys.path.insert(0, {root!r})
from psmodes import checkpoint as ckpt
w = torch.randn(3_000_000)
v = 0
while True:
    v += 1
    w.add_(1.0)
    ckpt.save({folder!r}, ckpt.make_state(w, None, v, 0))
    print(v, flush=True)
"""


def test_sigkill_during_writes_never_leaves_a_bad_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    for trial in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), folder=str(folder))],
                                stdout=subprocess.PIPE, text=True)
        # let it write a few 12 MB checkpoints, then kill it at a random point of a write
        for _ in range(2 + trial % 3):
            assert proc.stdout.readline(), "writer died"
        time.sleep(0.013 * trial)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        files = sorted(folder.glob("ckpt-*.pt"))
        assert files, "no checkpoint at all"
        for path in files:
            state = ckpt.load(path, 3_000_000)  # raises if torn
            assert state["version"] == ckpt.order(path)[1]
    # leftovers of interrupted writes are temp files, never a ckpt-*.pt
    assert all(p.name.startswith(".") for p in folder.iterdir() if not p.name.startswith("ckpt-"))


def test_newest_skips_a_damaged_newer_checkpoint(tmp_path):
    good = ckpt.save(tmp_path, ckpt.make_state(torch.ones(10), None, 5, 0))
    bad = ckpt.path_for(tmp_path, 9)
    bad.write_bytes(good.read_bytes()[:50])  # truncated
    state, skipped = ckpt.newest(tmp_path, 10)
    assert state["version"] == 5 and len(skipped) == 1 and "not a loadable" in skipped[0]


class Evil:
    """Unpickling this runs a command: it touches ``marker`` (a file of this test's own)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_foreign_pickle_is_refused_not_executed(tmp_path):
    path = ckpt.path_for(tmp_path, 1)
    marker = tmp_path / "pwned"
    torch.save({"format": 1, "weights": torch.ones(2), "evil": Evil(marker)}, path)
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load(path)
    assert "\n" not in str(err.value)
    assert not marker.exists()


def test_wrong_model_size_is_refused(tmp_path):
    ckpt.save(tmp_path, ckpt.make_state(torch.ones(10), None, 1, 0))
    with pytest.raises(ckpt.CheckpointError, match="10 weights, the model 20"):
        ckpt.load(ckpt.path_for(tmp_path, 1), 20)


def test_plain_pickle_is_refused(tmp_path):
    path = ckpt.path_for(tmp_path, 1)
    path.write_bytes(pickle.dumps({"format": 1}))
    with pytest.raises(ckpt.CheckpointError):
        ckpt.load(path)

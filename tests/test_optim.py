"""The PS's optimizers (psmodes/optim.py) against torch's, and their state in checkpoints:
in-process, no MPI (the recovery of that state under real kills is in test_killpoints.py)."""
from __future__ import annotations

import pytest
import torch

from psmodes import checkpoint as ckpt
from psmodes.optim import FlatAdamW, FlatSGD


def _steps(ours, theirs, param, n=25, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        g = torch.randn(param.numel(), generator=gen)
        param.grad = g.clone()
        theirs.step()
        ours.step(g)


def test_adamw_and_momentum_are_torchs_bitwise():
    w = torch.randn(2000, generator=torch.Generator().manual_seed(1))
    p = torch.nn.Parameter(w.clone())
    ours = FlatAdamW(w.clone(), 1e-3, (0.9, 0.999), 0.01)
    _steps(ours, torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01, foreach=False), p)
    assert torch.equal(ours.weights, p.detach()) and ours.version == 25
    q = torch.nn.Parameter(w.clone())
    sgd = FlatSGD(w.clone(), 0.05, 0.9)
    _steps(sgd, torch.optim.SGD([q], lr=0.05, momentum=0.9), q)
    assert torch.equal(sgd.weights, q.detach())


def test_adamw_state_travels_whole(tmp_path):
    """pack/unpack (chain replication) and a checkpoint carry the weights and both moments: the
    copies step on exactly as the original."""
    a = FlatAdamW(torch.randn(500), 1e-3)
    for _ in range(5):
        a.step(torch.randn(500))
    assert a.state_numel == 3 * 500
    buf = torch.zeros(a.state_numel)
    a.pack(buf)
    b = FlatAdamW(torch.zeros(500), 1e-3)
    b.unpack(buf, a.version)
    state = ckpt.load(ckpt.save(tmp_path, ckpt.state_of(a, 0)), 500, b)
    assert state["optimizer"] == "FlatAdamW" and state["version"] == 5
    c = FlatAdamW(state["weights"].clone(), 1e-3)
    c.load_state(state["optimizer_state"], state["version"])
    g = torch.randn(500)
    for opt in (a, b, c):
        opt.step(g)
    assert torch.equal(a.weights, b.weights) and torch.equal(a.weights, c.weights)


def test_a_checkpoint_of_another_optimizer_is_refused(tmp_path):
    sgd = FlatSGD(torch.ones(100), 0.01)  # no buffers
    path = ckpt.save(tmp_path, ckpt.state_of(sgd, 0))
    with pytest.raises(ckpt.CheckpointError, match="written by optimizer 'FlatSGD' with 0 state values"):
        ckpt.load(path, 100, FlatAdamW(torch.ones(100), 1e-3))
    # a checkpoint of format 1 (before the optimizers: a momentum buffer) still loads
    old = {"format": 1, "weights": torch.ones(100), "momentum": torch.full((100,), 2.0), "version": 7, "seed": 0}
    torch.save(old, tmp_path / "ckpt-0000000007.pt")
    state = ckpt.load(tmp_path / "ckpt-0000000007.pt", 100, FlatSGD(torch.ones(100), 0.01, 0.9))
    assert state["optimizer_state"].sum() == 200 and state["version"] == 7


def test_model_buffers_are_the_tail_of_the_flat_weights():
    """BatchNorm's statistics are views into the weights' tail: a forward in training mode moves
    them, capture_buffers puts them in the gradient's tail, an update copies the tail instead of
    stepping it, and the paper policy's sum keeps the newest statistics, not their sum."""
    from torch import nn

    from psmodes.flatparams import FlatParams
    from psmodes.replay import UpdateBuffer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    flat = FlatParams(model)
    n = flat.n_train
    assert n == 8 * 16 + 16 + 2 * 16 + 16 * 3 + 3 and flat.numel == n + 16 + 16 + 1
    model.train()
    model(torch.randn(32, 8)).sum().backward()
    flat.capture_buffers()
    assert torch.equal(flat.grads[n:n + 16], model[1].running_mean) and flat.grads[-1] == 1
    ps = FlatAdamW(torch.zeros(flat.numel), 1e-3, trainable=n)
    ps.step(flat.grads)
    assert torch.equal(ps.weights[n:], flat.weights[n:]) and ps.buffers[0].numel() == n
    assert ps.state_numel == flat.numel + 2 * n
    buf = UpdateBuffer("paper", flat.numel, trainable=n)
    for scale in (1.0, 2.0):
        g = flat.grads.clone()
        g[n:] *= scale
        buf.add(g)
    (total,) = buf.vectors()
    assert torch.equal(total[:n], 2 * flat.grads[:n]) and torch.equal(total[n:], 2 * flat.grads[n:])  # summed; newest


def test_a_checkpoint_of_a_model_with_buffers_loads(tmp_path):
    """The moments are the size of the trainable part, not of the weights with their buffers' tail
    (the full suite caught the first version refusing every such checkpoint)."""
    opt = FlatAdamW(torch.randn(600), 1e-3, trainable=500)
    opt.step(torch.randn(600))
    state = ckpt.load(ckpt.save(tmp_path, ckpt.state_of(opt, 0)), 600, FlatAdamW(torch.zeros(600), 1e-3, trainable=500))
    assert state["optimizer_state"].numel() == 1000 and torch.equal(state["weights"][500:], opt.weights[500:])

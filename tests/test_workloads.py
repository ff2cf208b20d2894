"""The workloads users bring (torchvision's ResNets, a transformer LM) and the metric each declares:
their models, data and losses on real inputs, and the direction every report follows.
Two runs under mpirun with a PS kill close it: the LM through a chain takeover, the ResNet's
BatchNorm statistics through a checkpoint."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from benchmarks import metrics, registry, textlm, vision
from conftest import events, run_ok
from launch.analysis.collect import time_to_target
from launch.analysis.setbacks import setbacks
from psmodes import checkpoint as ckpt
from psmodes.config import RunConfig
from psmodes.flatparams import FlatParams, digest


def test_a_metric_to_minimise_reaches_its_target_from_above():
    ppl, acc = metrics.PERPLEXITY, metrics.ACCURACY
    timeline = [[1.0, 10, 40.0], [2.0, 20, 9.0], [3.0, 30, 5.5]]
    assert time_to_target(timeline, 10.0, ppl) == 2.0 and time_to_target(timeline, 5.0, ppl) is None
    assert time_to_target([[1.0, 1, 0.5], [2.0, 2, 0.8]], 0.7, acc) == 2.0
    assert ppl.drop(before=6.0, after=8.0) == 2.0 and acc.drop(before=0.8, after=0.7) == pytest.approx(0.1)
    assert ppl.better(5.0, 6.0) and not acc.better(0.5, 0.6)
    assert acc.valid_target(1.5) and not ppl.valid_target(1.5) and ppl.valid_target(0)
    # a setback of a perplexity is a rise: a dip of 3 after the failure at t=2, back under 6 at t=4
    (row,) = setbacks([[1.0, 10, 6.0], [2.5, 20, 9.0], [4.0, 30, 5.0]], [{"t_s": 2.0}], [], None,
                      higher_is_better=False)
    assert row["dip"] == 3.0 and row["regained_s"] == 2.0


def test_old_summaries_read_as_accuracy():
    assert metrics.of_summary({}) is metrics.ACCURACY
    assert metrics.of_summary({"metric": {"name": "perplexity"}}) is metrics.PERPLEXITY
    custom = metrics.of_summary({"metric": {"name": "bleu", "higher_is_better": True}})
    assert custom.name == "bleu" and custom.higher_is_better


def test_gpt_tiny_trains_on_the_standard_library_and_scores_perplexity():
    w = registry.get("gpt-tiny")
    cfg = RunConfig(benchmark="gpt-tiny", steps=1).validate()
    assert cfg.optimizer == "adamw" and w.metric is metrics.PERPLEXITY
    x, y = w.load_train(cfg)
    assert x.shape[1] == textlm.CONTEXT and np.array_equal(x[0, 1:], y[0, :-1])  # targets: the next byte
    torch.manual_seed(0)
    model = w.build_model(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n <= 10_000_000, n
    assert FlatParams(model).numel == n  # no buffers: the causal mask is not state
    xv, yv = w.load_test(cfg)
    ppl = w.metric.score(model, w.to_inputs, xv[:32], yv[:32])
    assert 100 < ppl < 1000, ppl  # untrained: about the 256 byte values
    loss = w.loss(model(w.to_inputs(x[:4])), torch.from_numpy(y[:4]))
    assert math.isclose(math.exp(loss.item()), ppl, rel_tol=0.5)


def test_resnet18_reads_fashion_mnist_through_torchvision(fmnist_available, tmp_path, monkeypatch):
    if not fmnist_available:
        pytest.skip("Fashion-MNIST not installed")
    pytest.importorskip("torchvision")
    monkeypatch.setenv("PSBENCH_CACHE", str(tmp_path))
    w = registry.get("resnet18-fmnist")
    cfg = RunConfig(benchmark="resnet18-fmnist", steps=1).validate()
    x, y = w.load_test(cfg)
    assert x.shape == (vision.R18_TEST_IMAGES, 28, 28) and x.dtype == np.uint8 and set(np.unique(y)) == set(range(10))
    assert list((tmp_path / "torchvision").glob("fmnist-*/FashionMNIST/raw/t10k-images-idx3-ubyte"))
    inputs = w.to_inputs(x[:8])
    assert inputs.shape == (8, 1, 28, 28) and -1.0 <= float(inputs.min()) and float(inputs.max()) <= 1.0
    model = w.build_model(cfg)
    flat = FlatParams(model)
    assert flat.has_buffers and flat.numel > flat.n_train  # BatchNorm's statistics travel with the weights
    assert model(inputs).shape == (8, 10)


def test_resnet50_synthetic_has_25m_parameters():
    pytest.importorskip("torchvision")
    w = registry.get("resnet50-synthetic")
    model = w.build_model(None)
    assert 25_000_000 < sum(p.numel() for p in model.parameters()) < 26_000_000
    x, y = w.load_train(None)
    assert x.shape[1:] == vision.R50_SHAPE and y.max() < vision.R50_CLASSES


# ---- under mpirun, with a real SIGKILL of the PS

def test_gpt_tiny_trains_through_a_chain_takeover_scored_by_perplexity(tmp_path):
    """The LM with AdamW (its default) loses no step when its head dies, and every figure follows
    its metric: perplexity, lower is better."""
    out, s = run_ok(tmp_path, "--benchmark", "gpt-tiny", "--workers", "2", "--mode", "chain", "--replicas", "1",
                    "--steps", "40", "--kill-ps", "point:apply@15", "--eval-interval", "2s",
                    "--restart-delay", "1s", "--deadline", "150s", report=True)
    assert json.loads((out / "config.json").read_text())["optimizer"] == "adamw"
    assert s["metric"] == {"name": "perplexity", "higher_is_better": False}
    assert len(s["kills"]) == 1 and s["recoveries"][0]["lost_steps"] == 0
    first, final = s["metric_timeline"][0][2], s["final_metric"]
    assert final < first and final < 40, (first, final)  # it learned: 256 byte values are ~260 at the start
    report = (out / "report.md").read_text()
    assert "final perplexity" in report and (out / "perplexity.png").exists()


def test_resnet18_checkpoints_hold_its_batchnorm_statistics(tmp_path):
    """torchvision's ResNet-18 under checkpoint recovery: the checkpoint the replacement resumes from
    holds the BatchNorm running statistics the workers computed (not their initial 0 and 1), and the
    replacement resumes it bitwise."""
    pytest.importorskip("torchvision")
    out, s = run_ok(tmp_path, "--benchmark", "resnet18-fmnist", "--workers", "2", "--mode", "checkpoint",
                    "--checkpoint-every", "3", "--steps", "9", "--kill-ps", "point:apply@6", "--no-evaluator",
                    "--restart-delay", "0", "--deadline", "240s")
    (resume,) = events(out, "resume")
    # 3, taken three steps before the kill, and kept to the end: the replacement writes 3, 6 and 9, the newest
    # three (checkpoint.KEEP). Killed at 7 of 12, a run resumed from 3 when checkpoint 6, taken a step before
    # the kill, was not durable yet, and 3 was gone by the end (seen with an idle-class PS, psmodes/priority.py).
    assert resume["from_version"] == 3, resume
    # the replacement (checkpoint generation 1) writes the state it resumed from again as its first checkpoint;
    # the dead PS's generation-0 files are older, and pruned by the end (psmodes/checkpoint.py)
    state = ckpt.load(ckpt.path_for(out / "checkpoints", resume["from_version"], resume["generation"]))
    assert resume["digest"] == digest(state["weights"])
    flat = FlatParams(registry.get("resnet18-fmnist").build_model(None))
    stats = state["weights"][flat.n_train:]
    assert stats.numel() == flat.numel - flat.n_train > 0
    assert not torch.equal(stats, flat.weights[flat.n_train:]), "the checkpoint kept no BatchNorm statistics"
    assert s["completed"] and s["steps"] == 9 and s["metric"]["name"] == "accuracy"


def test_flat_params_stay_on_the_models_device():
    """The flat buffers live where the model does: host buffers moved a CUDA model back to the CPU
    (the first GPU run failed at its first forward). The meta device stands in for CUDA here."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("meta")
    flat = FlatParams(model)
    assert flat.weights.device.type == flat.grads.device.type == "meta"
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model[1].running_mean.device.type == "meta" and flat.has_buffers

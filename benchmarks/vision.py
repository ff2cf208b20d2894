"""The torchvision workloads: ResNet-18 on Fashion-MNIST, ResNet-50 on synthetic images.

``resnet18-fmnist`` is ``torchvision.models.resnet18`` with a 3x3, stride-1 first
convolution for 1x28x28 inputs (the ImageNet stem's 7x7 stride 2 would leave 7x7
maps before the first block) and 10 classes; it keeps the max-pool, so the blocks
see 14x14 maps: a quarter of the compute of a stem-less ResNet, which matters on
CPU workers. Its data is ``torchvision.datasets.FashionMNIST`` read from the local
IDX files (never downloaded: the Debian package's .gz files, or ``--data-dir``,
are checked by :mod:`benchmarks.fmnist` and decompressed once into a cache in the
layout torchvision reads). The inputs are scaled and normalised by torchvision's
``transforms.v2`` on the whole batch (one tensor op each, no per-image cost).
It has BatchNorm: its running statistics travel with the weights
(psmodes/flatparams.py).

``resnet50-synthetic`` is ``torchvision.models.resnet50`` (25.6M parameters, 1000
classes) on random 3x64x64 images with random labels, what Horovod's synthetic
benchmark measures (there at 224x224, a size a CPU worker cannot train at): for
throughput and the cost of checkpoints and replication at 25M parameters. Its
accuracy is chance; the speed is the result.
"""
from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import numpy as np

from . import fmnist

R18_TEST_IMAGES = 2000   # the evaluator's test set: the first 2000 of the 10000 (a CPU scores them in seconds)
R50_SHAPE, R50_CLASSES = (3, 64, 64), 1000
R50_TRAIN, R50_TEST = 1024, 64  # 50 MB of images per worker, drawn again each epoch


def torchvision_cache() -> Path:
    base = os.environ.get("PSBENCH_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                           os.path.expanduser("~/.cache"), "psbench")
    return Path(base) / "torchvision"


def fashion_root(data_dir: str | None) -> Path:
    """A folder in torchvision's layout (``FashionMNIST/raw/*-ubyte``) made from the validated .gz
    files of ``data_dir``; one per source folder, written once, atomically (every rank may race here)."""
    src = fmnist.find_data_dir(data_dir).resolve()
    root = torchvision_cache() / ("fmnist-" + hashlib.sha256(str(src).encode()).hexdigest()[:12])
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, _magic, _shape in fmnist.FILES.values():
        out = raw / name[:-3]  # without .gz: what torchvision's FashionMNIST checks for
        src_file = src / name
        if out.exists() and out.stat().st_mtime >= src_file.stat().st_mtime:
            continue
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        with gzip.open(src_file, "rb") as fin, open(tmp, "wb") as fout:
            fout.write(fin.read())
        os.replace(tmp, out)
    return root


def _fashion(cfg, train: bool):
    from torchvision.datasets import FashionMNIST

    ds = FashionMNIST(str(fashion_root(cfg.data_dir)), train=train, download=False)
    x, y = ds.data.numpy(), ds.targets.numpy().astype(np.int64)
    return (x, y) if train else (x[:R18_TEST_IMAGES], y[:R18_TEST_IMAGES])


def _fashion_inputs(batch: np.ndarray):
    import torch
    from torchvision.transforms import v2

    x = torch.from_numpy(np.ascontiguousarray(batch)).unsqueeze(1)  # uint8 [B,1,28,28]
    x = v2.functional.to_dtype(x, torch.float32, scale=True)
    return v2.functional.normalize(x, [fmnist.MEAN], [fmnist.STD])


def _resnet18_fmnist(cfg):
    from torch import nn
    from torchvision.models import resnet18

    model = resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    return model


def _synthetic_images(cfg, n: int, salt: int):
    rng = np.random.default_rng(4321 + salt)
    return (rng.standard_normal((n, *R50_SHAPE), dtype=np.float32),
            rng.integers(0, R50_CLASSES, n).astype(np.int64))


def _image_inputs(batch: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(batch))


def _resnet50(cfg):
    from torchvision.models import resnet50

    return resnet50(num_classes=R50_CLASSES)


def workloads():
    from .workload import Workload

    return {
        "resnet18-fmnist": Workload(
            "resnet18-fmnist", "torchvision ResNet-18 (11.2M parameters, BatchNorm) on Fashion-MNIST through "
            "torchvision.datasets, 3x3 stem; SGD 0.05, batch 32; scored on the first 2000 test images",
            lr=0.05, batch_size=32, needs_data=True, requires=("torchvision",),
            build_model=_resnet18_fmnist, load_train=lambda cfg: _fashion(cfg, True),
            load_test=lambda cfg: _fashion(cfg, False), to_inputs=_fashion_inputs),
        "resnet50-synthetic": Workload(
            "resnet50-synthetic", "torchvision ResNet-50 (25.6M parameters) on random 3x64x64 images, "
            "1000 classes: throughput and state-transfer cost only (its accuracy is chance); SGD 0.01, batch 8",
            lr=0.01, batch_size=8, needs_data=False, requires=("torchvision",),
            build_model=_resnet50, load_train=lambda cfg: _synthetic_images(cfg, R50_TRAIN, 1),
            load_test=lambda cfg: _synthetic_images(cfg, R50_TEST, 2), to_inputs=_image_inputs),
    }

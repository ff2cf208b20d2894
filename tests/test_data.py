"""The IDX loader reads the real files and refuses damaged ones with one line."""
from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from benchmarks import fmnist


def write_idx(path, magic, dims, payload: bytes):
    with gzip.open(path, "wb") as fh:
        fh.write(struct.pack(">i", magic) + struct.pack(f">{len(dims)}i", *dims) + payload)


def test_reads_real_fashion_mnist(fmnist_available):
    if not fmnist_available:
        pytest.skip("Fashion-MNIST not installed")
    x, y = fmnist.load(None, "test")
    assert x.shape == (10000, 28, 28) and x.dtype == np.uint8
    assert y.shape == (10000,) and set(np.unique(y)) == set(range(10))
    batch = fmnist.to_tensor_batch(x[:4])
    assert tuple(batch.shape) == (4, 1, 28, 28) and -1.0 <= float(batch.min()) and float(batch.max()) <= 1.0


def test_wrong_dimensions(tmp_path):
    p = tmp_path / "x.gz"
    write_idx(p, 2049, (5,), bytes(5))
    with pytest.raises(fmnist.DataError, match="dimensions"):
        fmnist.read_idx(p, 2049, (10000,))


def test_padded_file(tmp_path):
    p = tmp_path / "x.gz"
    write_idx(p, 2049, (3,), bytes(4))
    with pytest.raises(fmnist.DataError, match="truncated or padded"):
        fmnist.read_idx(p, 2049, (3,))


def test_env_variable_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PSBENCH_DATA", str(tmp_path))
    with pytest.raises(fmnist.DataError, match=str(tmp_path)):
        fmnist.find_data_dir()

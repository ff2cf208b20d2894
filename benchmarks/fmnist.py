"""Fashion-MNIST from the original IDX ``.gz`` files, read directly.

Where the files come from, in order: an explicit ``--data-dir``, the
``PSBENCH_DATA`` environment variable, Debian's ``dataset-fashion-mnist``
package (``/usr/share/datasets/fashion-mnist``). Nothing is downloaded at run
time; :func:`download_hint` tells users elsewhere how to fetch the files.
Every file's magic number, dimensions and length are checked before use, so a
truncated or foreign file is refused with one line instead of a traceback.
"""
from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train_images": ("train-images-idx3-ubyte.gz", 2051, (60000, 28, 28)),
    "train_labels": ("train-labels-idx1-ubyte.gz", 2049, (60000,)),
    "test_images": ("t10k-images-idx3-ubyte.gz", 2051, (10000, 28, 28)),
    "test_labels": ("t10k-labels-idx1-ubyte.gz", 2049, (10000,)),
}
MEAN, STD = 0.5, 0.5  # the study's normalisation


class DataError(ValueError):
    """The data set is missing or damaged; the message says what to do."""


def download_hint(directory: str | Path) -> str:
    return (
        f"get the four Fashion-MNIST IDX .gz files into {directory}: "
        "'apt-get install dataset-fashion-mnist' on Debian/Ubuntu, or download "
        + ", ".join(name for name, _, _ in FILES.values())
        + " from https://github.com/zalandoresearch/fashion-mnist (data/fashion), "
        "then pass --data-dir DIR or set PSBENCH_DATA"
    )


def find_data_dir(data_dir: str | Path | None = None) -> Path:
    """The first candidate folder holding all four files, else a DataError."""
    explicit = data_dir or os.environ.get("PSBENCH_DATA")
    candidates = [Path(explicit)] if explicit else [DEBIAN_DIR]
    for cand in candidates:
        if all((cand / name).is_file() for name, _, _ in FILES.values()):
            return cand
    where = candidates[0]
    missing = [name for name, _, _ in FILES.values() if not (where / name).is_file()]
    raise DataError(f"Fashion-MNIST not found in {where} (missing {', '.join(missing)}); {download_hint(where)}")


def read_idx(path: Path, magic: int, shape: tuple[int, ...]) -> np.ndarray:
    """One IDX file as a uint8 array of ``shape``, validated."""
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: not a readable gzip file ({exc}); replace it with an intact copy") from None
    ndim = len(shape)
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated ({len(raw)} bytes); replace it with an intact copy")
    (got_magic,) = struct.unpack(">i", raw[:4])
    if got_magic != magic:
        raise DataError(f"{path}: wrong magic number {got_magic} (expected {magic}); this is not the right IDX file")
    dims = struct.unpack(f">{ndim}i", raw[4:header])
    if tuple(dims) != shape:
        raise DataError(f"{path}: dimensions {dims}, expected {shape}; this is not Fashion-MNIST")
    need = header + int(np.prod(shape))
    if len(raw) != need:
        raise DataError(f"{path}: {len(raw)} bytes after decompression, expected {need}; the file is truncated or padded")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def load(data_dir: str | Path | None = None, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N,28,28], labels int64 [N]) for ``split`` in {train, test}."""
    root = find_data_dir(data_dir)
    name, magic, shape = FILES[f"{split}_images"]
    images = read_idx(root / name, magic, shape)
    name, magic, shape = FILES[f"{split}_labels"]
    labels = read_idx(root / name, magic, shape).astype(np.int64)
    if labels.max() > 9:
        raise DataError(f"{root / name}: labels above 9; this is not Fashion-MNIST")
    return images, labels


def validate(data_dir: str | Path | None = None) -> Path:
    """Check all four files (used by the launcher before any process starts)."""
    root = find_data_dir(data_dir)
    for split in ("train", "test"):
        load(root, split)
    return root


def to_tensor_batch(images: np.ndarray):
    """uint8 images -> normalised float32 torch tensor [B,1,28,28]."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(images)).to(torch.float32).div_(255.0)
    return x.sub_(MEAN).div_(STD).unsqueeze_(1)

"""Crash-safe file writes: write a temporary file in the same folder, fsync it,
rename it over the target, fsync the folder. A reader sees the old file or the
new one, never a torn one, even if the writer is SIGKILLed mid-write."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

# mkstemp makes 0600 files; give the final file the mode the user's umask implies.
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


def write_atomic(path: str | Path, write: Callable[[object], None], mode: str = "wb") -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
            fh.flush()
            os.fchmod(fh.fileno(), FILE_MODE)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_atomic(path, lambda fh: fh.write(text), mode="w")

"""Per-process JSONL event streams.

Each process appends one JSON object per line to ``<run_dir>/events/<name>.jsonl``
and flushes every line, so a run that dies leaves everything it recorded so far
readable (at worst the last line is torn, and readers skip it). Every event has
``t`` (wall-clock seconds, ``time.time()``), ``ev`` (its kind) and ``who``.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Iterator


class EventLog:
    def __init__(self, run_dir: str | Path, name: str) -> None:
        self.name = name
        folder = Path(run_dir) / "events"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}.jsonl"
        self._fh = open(self.path, "a", buffering=1)
        self._lock = threading.Lock()  # the PS's checkpoint thread logs too

    def emit(self, ev: str, **fields) -> dict:
        record = {"t": time.time(), "ev": ev, "who": self.name, **fields}
        line = json.dumps(record, separators=(",", ":"), default=_plain) + "\n"
        with self._lock:
            self._fh.write(line)
        return record

    def close(self) -> None:
        self._fh.close()


def _plain(value):
    """numpy scalars and arrays -> JSON types."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot log a {type(value).__name__}")


def read_events(path: str | Path) -> Iterator[dict]:
    """Records of one JSONL file; a torn or garbled line (a killed writer) is skipped."""
    try:
        with open(path, "r", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and "ev" in rec and "t" in rec:
                    yield rec
    except FileNotFoundError:
        return


def read_run_events(run_dir: str | Path) -> list[dict]:
    """All events of a run, every process, sorted by time."""
    folder = Path(run_dir) / "events"
    records = [rec for path in sorted(folder.glob("*.jsonl")) for rec in read_events(path)]
    records.sort(key=lambda r: r["t"])
    return records

"""PS checkpoints on disk: atomic writes off the critical path, safe loads.

A checkpoint is ``checkpoints/ckpt-<version>.pt`` holding a dict of tensors
and ints only (weights, the optimizer's name and state buffers, version, run seed; format 1,
written before AdamW, had a ``momentum`` buffer in their place and still loads). It is written to a
temporary file, fsynced and renamed (:mod:`psmodes.atomic`), so a PS killed
mid-write leaves the previous checkpoint intact. Loading uses
``torch.load(weights_only=True)`` and checks the keys and sizes; a damaged or
foreign file is skipped in favour of an older one, or refused with one line.
"""
from __future__ import annotations

import io
import queue
import threading
import time
from pathlib import Path

import torch

from .atomic import write_atomic

KEEP = 3
FORMAT = 2  # 2: "optimizer" + "optimizer_state" (weights-sized buffers, concatenated); 1: "momentum"


class CheckpointError(ValueError):
    pass


class CheckpointStalled(RuntimeError):
    """The previous checkpoint's write did not end in time: the checkpoint disk is stuck."""


def path_for(folder: Path, version: int) -> Path:
    return Path(folder) / f"ckpt-{version:010d}.pt"


def save(folder: Path, state: dict, hook=None) -> Path:
    """Write ``state`` atomically; ``hook(version)`` (a test kill point) runs with about
    half of the temporary file written, before the rest, the fsync and the rename."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = path_for(folder, int(state["version"]))
    # serialised in memory first: torch.save straight into a file that hits a full disk raises a
    # RuntimeError from its zip writer; plain writes raise OSError (ENOSPC), and nothing is renamed
    blob = io.BytesIO()
    torch.save(state, blob)
    data = blob.getbuffer()

    def write(fh) -> None:
        if hook is None:
            fh.write(data)
            return
        fh.write(data[: len(data) // 2])
        fh.flush()
        hook(int(state["version"]))
        fh.write(data[len(data) // 2:])

    write_atomic(path, write)
    for old in sorted(folder.glob("ckpt-*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def load(path: Path, numel: int | None = None, optimizer=None) -> dict:
    """One checkpoint, validated; CheckpointError (one line) if it is not ours or damaged."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for foreign/truncated files
        raise CheckpointError(f"{path}: not a loadable psbench checkpoint ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:120] if str(exc) else 'no detail'})") from None
    if not isinstance(state, dict) or state.get("format") not in (1, FORMAT):
        raise CheckpointError(f"{path}: not a psbench checkpoint (format key missing or unknown)")
    if state["format"] == 1:  # SGD with or without momentum, from before the optimizers
        state = {**state, "optimizer": "sgd", "optimizer_state": state.get("momentum")}
    for key, kind in (("weights", torch.Tensor), ("optimizer_state", torch.Tensor), ("version", int),
                      ("optimizer", str)):
        if not isinstance(state.get(key), kind):
            raise CheckpointError(f"{path}: checkpoint lacks a valid {key!r}")
    n = state["weights"].numel()
    if numel is not None and n != numel:
        raise CheckpointError(f"{path}: checkpoint has {n} weights, the model {numel}")
    # the optimizer's buffers are the size of the trainable part (the weights' tail holds the model's
    # buffers, psmodes/flatparams.py), which only the optimizer knows
    if optimizer is not None and state["optimizer_state"].numel() != optimizer.trainable * optimizer.n_buffers:
        raise CheckpointError(f"{path}: written by optimizer {state['optimizer']!r} with "
                              f"{state['optimizer_state'].numel()} state values, this run's "
                              f"{type(optimizer).__name__} keeps {optimizer.trainable * optimizer.n_buffers}")
    return state


def newest(folder: Path, numel: int | None = None, optimizer=None) -> tuple[dict | None, list[str]]:
    """The newest checkpoint that loads (for ``optimizer``'s state, when given), and the reasons
    older/newer ones were skipped."""
    skipped: list[str] = []
    for path in sorted(Path(folder).glob("ckpt-*.pt"), reverse=True):
        try:
            return load(path, numel, optimizer), skipped
        except CheckpointError as exc:
            skipped.append(str(exc))
    return None, skipped


def state_of(opt, seed: int, version: int | None = None) -> dict:
    """A checkpoint of optimizer ``opt`` (a psmodes.optim.FlatOptimizer): copies, so the PS goes on
    (``opt.state`` is a new tensor already: one copy of each buffer on the PS's critical path)."""
    state = make_state(opt.weights, None, opt.version if version is None else version, seed, type(opt).__name__)
    state["optimizer_state"] = opt.state
    return state


def make_state(weights: torch.Tensor, optimizer_state: torch.Tensor | None, version: int, seed: int,
               optimizer: str = "FlatSGD") -> dict:
    return {
        "format": FORMAT,
        "weights": weights.detach().clone(),
        "optimizer": optimizer,
        "optimizer_state": optimizer_state.detach().clone() if optimizer_state is not None else torch.zeros(0),
        "version": int(version),
        "seed": int(seed),
        "time": time.time(),
    }


class BackgroundWriter:
    """Writes snapshots on a thread so the PS loop only pays for the copy.

    One snapshot at a time: :meth:`submit` waits for the previous write to end
    (so checkpoints never pile up in memory, and no more than 2K versions are lost) and
    returns the seconds it waited. That wait is the PS's: a disk whose fsync stalls stalls the
    PS with it (seen: 6-12 s fsyncs on a VM's ext4 mounted with ``discard``; the PS was
    suspected and fenced, an unplanned failure in the run's record), and one that never
    returns ends the PS after ``timeout`` (CheckpointStalled) instead of hanging it."""

    def __init__(self, folder: Path, on_written, hook=None, on_failed=None) -> None:
        """``on_written(version, path, seconds)``; ``on_failed(version, exc)`` when a write
        failed (training goes on, the newest written checkpoint stays valid); ``hook``: see save."""
        self.folder = Path(folder)
        self.on_written = on_written
        self.on_failed = on_failed
        self.hook = hook
        self.failures = 0
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(self, state: dict, timeout: float = 60.0) -> float:
        t0 = time.monotonic()
        if not self._idle.wait(timeout):
            raise CheckpointStalled(f"the previous checkpoint's write did not end in {timeout:.0f} s "
                                    f"(is {self.folder} on a stuck disk?)")
        waited = time.monotonic() - t0
        self._idle.clear()
        self._queue.put(state)
        return waited

    def _run(self) -> None:
        while True:
            state = self._queue.get()
            if state is None:
                return
            t0 = time.monotonic()
            try:
                path = save(self.folder, state, self.hook)
            except Exception as exc:  # noqa: BLE001 - disk full, quota, I/O error: the previous one is intact
                self.failures += 1
                if self.on_failed is not None:
                    self.on_failed(state["version"], exc)
            else:
                self.on_written(state["version"], path, time.monotonic() - t0)
            finally:
                self._idle.set()

    def wait_idle(self, timeout: float = 60.0) -> None:
        self._idle.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        self._idle.wait(timeout)
        self._queue.put(None)
        self._thread.join(timeout)

"""PS checkpoints on disk: atomic writes off the critical path, safe loads, generations.

A checkpoint is ``checkpoints/ckpt-g<generation>-<version>.pt`` holding a dict of tensors
and ints only (weights, the optimizer's name and state buffers, version, generation, run seed;
format 1, written before AdamW, had a ``momentum`` buffer in their place and still loads;
``ckpt-<version>.pt`` files from before generations read as generation -1). It is written to a
temporary file, fsynced and renamed (:mod:`psmodes.atomic`), so a PS killed
mid-write leaves the previous checkpoint intact. Loading uses
``torch.load(weights_only=True)`` and checks the keys and sizes; a damaged or
foreign file is skipped in favour of an older one, or refused with one line.

Generations: every PS that writes checkpoints claims one (:func:`claim`: one more than the
folder's ``.generation`` file says; the run's first PS claims 0, each replacement and each
restarted job the next). A PS declared dead while alive (a runtime that outlives a lost daemon,
a stale network file system) still holds the old one, so restore and prune order files by
(generation, version), never by version alone: such a PS's higher versions are never taken over
the new PS's state, and its prune never deletes a newer generation's files. A write from a
generation that has been replaced is refused (:class:`StaleWriter`: the checkpoint mode records
it as a failure nobody injected). Temporary files of killed writers are removed at restore.
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


class StaleWriter(RuntimeError):
    """A checkpoint write from a generation that a newer PS has replaced: refused."""

    def __init__(self, mine: int, current: int) -> None:
        super().__init__(f"this PS writes checkpoints as generation {mine}, and a PS of generation {current} "
                         "has taken over: it was declared dead while alive")
        self.mine, self.current = mine, current


FENCE = ".generation"  # the newest generation claimed in a checkpoint folder


def path_for(folder: Path, version: int, generation: int = 0) -> Path:
    return Path(folder) / f"ckpt-g{generation:04d}-{version:010d}.pt"


def order(path: Path) -> tuple[int, int]:
    """(generation, version) of a checkpoint file by its name; (-1, version) for one from before
    generations; (-2, -1) for a name that is neither (sorted first, loaded last)."""
    parts = path.stem.split("-")
    try:
        if len(parts) == 3 and parts[1].startswith("g"):
            return int(parts[1][1:]), int(parts[2])
        if len(parts) == 2:
            return -1, int(parts[1])
    except ValueError:
        pass
    return -2, -1


def checkpoint_files(folder: Path) -> list[Path]:
    """The folder's checkpoints, oldest first by (generation, version)."""
    return sorted(Path(folder).glob("ckpt-*.pt"), key=order)


def current_generation(folder: Path) -> int:
    """The newest generation claimed in ``folder`` (-1: none yet, or an unreadable fence)."""
    try:
        return int((Path(folder) / FENCE).read_text().strip())
    except (OSError, ValueError):
        return -1


def claim(folder: Path) -> int:
    """A new generation for the PS that writes to ``folder`` from now on: one more than the newest
    claimed; written atomically before the PS's first checkpoint."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    generation = max(current_generation(folder), max((order(p)[0] for p in checkpoint_files(folder)), default=-1)) + 1
    write_atomic(folder / FENCE, lambda fh: fh.write(f"{generation}\n"), mode="w")
    return generation


def remove_leftovers(folder: Path) -> list[str]:
    """Delete the temporary files of writers killed mid-write (``.ckpt-*.tmp``); their names."""
    gone = []
    for tmp in Path(folder).glob(".ckpt-*.tmp"):
        tmp.unlink(missing_ok=True)
        gone.append(tmp.name)
    return gone


def save(folder: Path, state: dict, hook=None) -> Path:
    """Write ``state`` atomically; ``hook(version)`` (a test kill point) runs with about
    half of the temporary file written, before the rest, the fsync and the rename."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    generation = int(state.get("generation", 0))
    refuse_if_replaced(folder, generation)
    path = path_for(folder, int(state["version"]), generation)
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

    refuse_if_replaced(folder, generation)  # again: the serialisation and a hook take a while
    write_atomic(path, write)
    for old in checkpoint_files(folder)[:-KEEP]:
        if order(old)[0] <= generation:  # a newer generation's files are never this writer's to delete
            old.unlink(missing_ok=True)
    return path


def refuse_if_replaced(folder: Path, generation: int) -> None:
    current = current_generation(folder)
    if current > generation:
        raise StaleWriter(generation, current)


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
    for path in reversed(checkpoint_files(folder)):
        try:
            return load(path, numel, optimizer), skipped
        except CheckpointError as exc:
            skipped.append(str(exc))
    return None, skipped


def state_of(opt, seed: int, version: int | None = None, generation: int = 0) -> dict:
    """A checkpoint of optimizer ``opt`` (a psmodes.optim.FlatOptimizer): copies, so the PS goes on
    (``opt.state`` is a new tensor already: one copy of each buffer on the PS's critical path)."""
    state = make_state(opt.weights, None, opt.version if version is None else version, seed, type(opt).__name__,
                       generation)
    state["optimizer_state"] = opt.state
    return state


def make_state(weights: torch.Tensor, optimizer_state: torch.Tensor | None, version: int, seed: int,
               optimizer: str = "FlatSGD", generation: int = 0) -> dict:
    return {
        "format": FORMAT,
        "weights": weights.detach().clone(),
        "optimizer": optimizer,
        "optimizer_state": optimizer_state.detach().clone() if optimizer_state is not None else torch.zeros(0),
        "version": int(version),
        "generation": int(generation),
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

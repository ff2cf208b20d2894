"""The leader's gradient in shared memory, for a PS on the same host (pipelined exchange).

Over MPI the PS received every gradient through Open MPI's single-copy path (CMA,
``process_vm_readv``): 39 % of the PS's CPU in ``perf record`` (2026-12-04), and on 2 cores
every millisecond of it is taken from one of the synchronous workers. The pipelined leader
computes its gradients into two buffers in turn (``Worker.grad_slots``: the next backward
writes one while the PS reads the other); here those buffers are the two slots of a memfd
that the PS maps too, the gradient's header names the slot its payload is in
(``Grad.mailbox_slot``), and the PS's SGD step reads it in place: no receive, no copy.

Why the PS never reads a half-written gradient: the leader's backward writes a slot only when
the gradient posted from it has been answered (it posts the next one only after that answer,
and its next backward writes the other slot), and the PS answers after its step has read it.
A PS that dies reading loses nothing the leader has: the Hello re-sends the pending gradient
over MPI, and its slot stays as it was until then.

Why a memfd and ``/proc/<pid>/fd/<fd>``: a memfd has no name in any file system, so nothing
outlives the run's processes (a SIGKILLed leader leaves no file in ``/dev/shm``); the memory
goes when the last process that maps it exits, and a container's small ``/dev/shm`` (64 MiB
under Docker) does not bound it. The Hello names the leader's pid, the fd and a random token
written in the buffer's first bytes; a PS takes the buffer only if it is a psbench memfd of
the right size that holds that token. A PS on another host or in another PID namespace finds
no such file or another token, answers that it has no mailbox, and gets payloads over MPI.
"""
from __future__ import annotations

import mmap
import os
import secrets

import numpy as np
import torch

MAGIC = 0x70736D61696C6278  # "psmailbx"
NAME = "psbench-gradient"
HEADER_BYTES = 64  # magic, token, numel; the floats start 64-byte aligned
SLOTS = 2  # the gradient the PS reads and the one the leader's next backward writes


def _slots(shared: mmap.mmap, numel: int) -> list[torch.Tensor]:
    return [torch.frombuffer(shared, dtype=torch.float32, count=numel, offset=HEADER_BYTES + 4 * numel * k)
            for k in range(SLOTS)]


def _size(numel: int) -> int:
    return HEADER_BYTES + 4 * numel * SLOTS


class Mailbox:
    """The leader's side: :data:`SLOTS` float32 buffers of ``numel`` in a fresh memfd (:attr:`slots`)."""

    def __init__(self, numel: int) -> None:
        self.token = secrets.randbits(62) + 1  # never 0: a Hello's 0 means no mailbox
        self.fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
        os.ftruncate(self.fd, _size(numel))
        self._map = mmap.mmap(self.fd, _size(numel))
        np.frombuffer(self._map, dtype=np.int64, count=3)[:] = (MAGIC, self.token, numel)
        self.slots = _slots(self._map, numel)

    @property
    def address(self) -> tuple[int, int, int]:
        """(pid, fd, token): what a Hello carries for the PS to :func:`attach`."""
        return os.getpid(), self.fd, self.token


def attach(pid: int, fd: int, token: int, numel: int) -> list[torch.Tensor] | None:
    """The PS's side: the leader's gradient slots, or None when they are not reachable from here
    (no mailbox offered, another host, another PID namespace, a stale or foreign fd)."""
    if token <= 0 or pid <= 0 or fd < 0:
        return None
    size = _size(numel)
    path = f"/proc/{pid}/fd/{fd}"
    try:
        # only a psbench memfd is opened: a stale fd may now be a pipe, a device or another file
        if not os.readlink(path).startswith(f"/memfd:{NAME} "):
            return None
        handle = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if os.fstat(handle).st_size != size:  # mapping past a file's end would SIGBUS on access
            return None
        shared = mmap.mmap(handle, size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(handle)
    if np.frombuffer(shared, dtype=np.int64, count=3).tolist() != [MAGIC, token, numel]:
        shared.close()
        return None
    return _slots(shared, numel)

"""Gradient averaging across the workers' communicator.

Horovod is the default (``hvd.init(comm=worker_comm)``: the PS and the other
roles are not in it, so it keeps working while the PS is dead). ``--allreduce
mpi`` uses a plain ``MPI_Iallreduce`` for MPI stacks without Horovod. Both
poll with a timeout instead of blocking forever. On GPU nodes with a
NCCL-built Horovod and a GPU per worker the reduction runs on the device
tensor; otherwise (no NCCL, or workers sharing a GPU) on a host copy.

With Horovod the averaging overlaps the backward pass, as Horovod's
``DistributedOptimizer`` does: a hook on every parameter starts its allreduce
the moment its gradient is ready (the fully connected layers' gradients are
ready long before the convolutions' backward is done), and :meth:`wait_`
collects them. The gradients land in one flat buffer (psmodes/flatparams.py),
so the averages land in place.
"""
from __future__ import annotations

import time

import torch
from mpi4py import MPI

from . import transport as tp

BUCKET_BYTES = 1 << 20  # overlap(): gradients are averaged in contiguous buckets of at least this size


class Allreducer:
    def __init__(self, kind: str, comm: MPI.Intracomm, device: torch.device, fusion: bool = True) -> None:
        self.kind = kind
        self.comm = comm
        self.size = comm.Get_size()
        self.on_device = False
        self.last_s = 0.0  # the last average_'s seconds (the wait included): the step events record it
        self.overlapping = False
        self.buckets = []
        if kind == "horovod":
            import os

            import horovod.torch as hvd

            if not fusion:  # see overlap(): fixed buckets instead of timing-dependent fusion
                os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"
            hvd.init(comm=comm)
            self.hvd = hvd
            # NCCL takes one GPU per rank: workers sharing a GPU average a host copy instead (seen on
            # a one-GPU machine with 2 workers: "ncclCommInitRank failed: invalid usage")
            self.on_device = (device.type == "cuda" and bool(hvd.nccl_built())
                              and hvd.local_size() <= torch.cuda.device_count())

    def overlap(self, params: list[torch.nn.Parameter], flat_grads: torch.Tensor) -> None:
        """Average the gradients in fixed buckets, each started from a hook as soon as backward
        has produced all of its gradients (in place, in the flat buffer they were copied into).

        Buckets are contiguous slices of the flat buffer, cut in backward order at
        :data:`BUCKET_BYTES`, like PyTorch DDP's. Fixed buckets and no Horovod fusion
        (HOROVOD_FUSION_THRESHOLD=0, set before ``hvd.init``) keep every allreduce the same size
        every step: with fusion, which tensors were fused depended on timing, so the summation
        order (and the last bits of the weights) changed from run to run with 3 workers."""
        sizes = [p.numel() for p in params]
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        self.buckets: list[list] = []  # [start, end, params left this step, handle]
        owner: dict[int, int] = {}
        current: list[int] = []
        for i in reversed(range(len(params))):
            current.append(i)
            if sum(sizes[j] for j in current) * 4 >= BUCKET_BYTES or i == 0:
                lo, hi = min(current), max(current)
                self.buckets.append([offsets[lo], offsets[hi] + sizes[hi], len(current), None])
                owner.update({j: len(self.buckets) - 1 for j in current})
                current = []
        self.flat_grads = flat_grads
        self.bucket_sizes = [b[2] for b in self.buckets]

        def hook(index: int):
            def ready(_: torch.Tensor) -> None:
                bucket = self.buckets[owner[index]]
                bucket[2] -= 1
                if bucket[2] == 0:
                    self._launch(owner[index])
            return ready

        for i, p in enumerate(params):
            p.register_post_accumulate_grad_hook(hook(i))
        self.overlapping = True

    def use_grads(self, flat_grads: torch.Tensor) -> None:
        """After :meth:`overlap`: the buffer the next backward's gradients land in
        (:meth:`psmodes.flatparams.FlatParams.use_grads`)."""
        self.flat_grads = flat_grads

    def _launch(self, k: int) -> None:
        b = self.buckets[k]
        b[3] = self.hvd.allreduce_async_(self.flat_grads[b[0]:b[1]], op=self.hvd.Average, name=f"psbench.bucket.{k}")

    def wait_(self, timeout: float, suspect=None) -> None:
        """Wait for the allreduces the hooks started (:meth:`overlap`); ``suspect``: a
        :class:`psmodes.suspicion.GroupSuspicion`, checked between polls."""
        t0 = time.perf_counter()
        try:
            deadline = time.monotonic() + timeout
            for k, b in enumerate(self.buckets):
                if b[3] is None:  # a parameter without a gradient this step: start its bucket now
                    self._launch(k)
            for b in self.buckets:
                self._poll(b[3], deadline, timeout, suspect)
        finally:
            for b, n in zip(self.buckets, self.bucket_sizes):
                b[2], b[3] = n, None
            self.last_s = time.perf_counter() - t0

    def _poll(self, handle, deadline: float, timeout: float, suspect=None) -> None:
        hvd, sleep = self.hvd, 2e-5
        while not hvd.poll(handle):
            if time.monotonic() > deadline:
                raise tp.PeerTimeout(f"Horovod allreduce: no completion in {timeout:.0f} s")
            if suspect is not None:
                suspect.check()
            time.sleep(sleep)
            sleep = min(sleep * 2, tp.SHORT_POLL)
        hvd.synchronize(handle)

    def average_(self, tensor: torch.Tensor, timeout: float, name: str = "psbench.grad",
                 watch: MPI.Request | None = None, suspect=None) -> None:
        """Average ``tensor`` over the workers in place; ``name``: Horovod's, one per tensor shape;
        ``watch`` (``--allreduce mpi``): a death watch on the workers' group, so that a member's death
        ends the wait at once (psmodes/elastic.py); ``suspect``: a hung member is suspected
        (:class:`psmodes.suspicion.GroupSuspicion`)."""
        t0 = time.perf_counter()
        try:
            self._average(tensor, timeout, name, watch, suspect)
        finally:
            self.last_s = time.perf_counter() - t0

    def _average(self, tensor: torch.Tensor, timeout: float, name: str, watch: MPI.Request | None,
                 suspect) -> None:
        if self.size == 1:
            return
        if self.kind == "horovod":
            handle = self.hvd.allreduce_async_(tensor, op=self.hvd.Average, name=name)
            self._poll(handle, time.monotonic() + timeout, timeout, suspect)
        else:
            req = self.comm.Iallreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)
            tp.wait(req, timeout, "MPI allreduce", watch=watch, suspect=suspect)
            tensor.div_(self.size)

    def close(self) -> None:
        if self.kind == "horovod":
            self.hvd.shutdown()

"""Gradient averaging across the workers' communicator.

Horovod is the default (``hvd.init(comm=worker_comm)``: the PS and the other
roles are not in it, so it keeps working while the PS is dead). ``--allreduce
mpi`` uses a plain ``MPI_Iallreduce`` for MPI stacks without Horovod. Both
poll with a timeout instead of blocking forever. On GPU nodes with a
NCCL-built Horovod the reduction runs on the device tensor; otherwise on a
host copy.
"""
from __future__ import annotations

import time

import torch
from mpi4py import MPI

from . import transport as tp


class Allreducer:
    def __init__(self, kind: str, comm: MPI.Intracomm, device: torch.device) -> None:
        self.kind = kind
        self.comm = comm
        self.size = comm.Get_size()
        self.on_device = False
        if kind == "horovod":
            import horovod.torch as hvd

            hvd.init(comm=comm)
            self.hvd = hvd
            self.on_device = device.type == "cuda" and hvd.nccl_built()

    def average_(self, tensor: torch.Tensor, timeout: float) -> None:
        if self.size == 1:
            return
        if self.kind == "horovod":
            hvd = self.hvd
            handle = hvd.allreduce_async_(tensor, op=hvd.Average, name="psbench.grad")
            deadline = time.monotonic() + timeout
            sleep = 2e-5
            while not hvd.poll(handle):
                if time.monotonic() > deadline:
                    raise tp.PeerTimeout(f"Horovod allreduce: no completion in {timeout:.0f} s")
                time.sleep(sleep)
                sleep = min(sleep * 2, 1e-3)
            hvd.synchronize(handle)
        else:
            req = self.comm.Iallreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)
            tp.wait(req, timeout, "MPI allreduce")
            tensor.div_(self.size)

    def close(self) -> None:
        if self.kind == "horovod":
            self.hvd.shutdown()

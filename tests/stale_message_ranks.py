"""Two ranks for tests/test_transport.py: a message of an older world generation is dropped with its
payload, a reply to a request of the newer generation is not (psmodes.transport.Generations).

Rank 1 plays a PS that has not been through the repair yet (generation 0): it sends an answer to a
gradient of generation 0 (weights follow), then answers a HELLO of generation 1 with the request's
generation. Rank 0 plays a worker that has been through it (generation 1): its one receive must
get the HELLO's answer with its own weights, the stale answer and its payload dropped."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from psmodes import transport as tp
from psmodes.messages import Answer, Hello, parse


def main() -> int:
    comm = MPI.COMM_WORLD
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    if comm.Get_rank() == 1:
        tp.GENERATIONS.current = 0
        hello, _ = tp.recv(comm, 0, tp.TAG_TO_PS, 10, "PS waits", Hello)
        asked = tp.GENERATIONS.last_received
        reqs = tp.isend(comm, Answer(5, False, 0), np.full(1000, 5.0, dtype=np.float32), 0, tp.TAG_FROM_PS)
        reqs += tp.isend(comm, Answer(6, False, 0), np.full(1000, 6.0, dtype=np.float32), 0, tp.TAG_FROM_PS,
                         generation=asked)
        tp.wait(reqs, 10, "answers")
        return 0
    dropped = []
    tp.GENERATIONS.current = 1
    tp.GENERATIONS.on_drop = lambda **what: dropped.append(what)
    tp.send(comm, Hello(5), None, 1, tp.TAG_TO_PS, 10, "hello")
    hdr, _ = tp.recv_header(comm, 1, tp.TAG_FROM_PS, 10, "worker waits")
    weights = np.zeros(1000, dtype=np.float32)
    tp.recv_payload(comm, weights, 1, tp.TAG_FROM_PS, 10, "weights")
    print(f"answer {parse(hdr, Answer).version} weights {weights[0]:g} dropped "
          + ",".join(f"{d['kind']}@{d['generation']}" for d in dropped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

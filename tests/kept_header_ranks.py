"""Two ranks for tests/test_transport.py: a header that reaches a receive which is then withdrawn
(a wait cut short between polls, as RespawnNow does) must not be lost.

Rank 1 sends HELLOs on TAG_TO_PS when rank 0 tells it to; rank 0 prints what its receives got."""
from __future__ import annotations

import sys
import time

from mpi4py import MPI

from psmodes import transport as tp
from psmodes.messages import Hello, parse

GO = 30    # rank 0 -> rank 1: send the next HELLO now
SENT = 31  # rank 1 -> rank 0, after the first HELLO: it has arrived before this (MPI's order)


class CutShort(Exception):
    """Stands for RespawnNow: raised between polls of a wait."""


def main() -> int:
    comm = MPI.COMM_WORLD
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    if comm.Get_rank() == 1:
        for version in (7, 8):
            comm.recv(source=0, tag=GO)
            tp.send(comm, Hello(version), None, 0, tp.TAG_TO_PS, 10, "send hello")
            if version == 7:
                comm.send(None, dest=0, tag=SENT)
        comm.recv(source=0, tag=GO)
        return 0

    def idle_until_taken():
        """Let the HELLO arrive and be matched by the posted receive, then cut the wait short."""
        comm.send(None, dest=1, tag=GO)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not comm.Iprobe(source=1, tag=SENT):  # drives progress
            time.sleep(0.001)
        comm.recv(source=1, tag=SENT)
        raise CutShort()

    def cut_at_once():
        raise CutShort()

    for on_idle in (cut_at_once, idle_until_taken):  # a receive that took nothing, one that took a header
        try:
            tp.recv_header(comm, MPI.ANY_SOURCE, tp.TAG_TO_PS, 10, "wait", on_idle=on_idle)
            print("not cut short")
        except CutShort:
            pass
    got = []
    comm.send(None, dest=1, tag=GO)  # the second HELLO, sent after the first was taken and withdrawn
    for _ in range(2):
        try:
            hdr, src = tp.recv_header(comm, MPI.ANY_SOURCE, tp.TAG_TO_PS, 5, "receive")
            got.append(f"{parse(hdr, Hello).version}@{src}")
        except tp.PeerTimeout:
            got.append("lost")
    comm.send(None, dest=1, tag=GO)
    print("received", " ".join(got), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

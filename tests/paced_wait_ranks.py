"""Two ranks for tests/test_transport.py: a wait paced by :class:`psmodes.transport.Pacer` wakes up
far less often than a plain one for a message that comes at a steady pace, and still takes it soon.

Rank 1 sends a HELLO every PERIOD seconds carrying its send time (CLOCK_MONOTONIC is one clock for
the whole host); rank 0 receives N of them with plain waits and then N with paced ones, counting
the wake-ups of each wait (its ``on_idle`` calls) and how late each message was taken."""
from __future__ import annotations

import sys
import time

from mpi4py import MPI

from psmodes import transport as tp
from psmodes.messages import Hello

PERIOD = 0.02
N = 40


def now_us() -> int:
    return time.monotonic_ns() // 1000


def main() -> int:
    comm = MPI.COMM_WORLD
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    if comm.Get_rank() == 1:
        comm.barrier()
        start = time.monotonic()
        for i in range(2 * N):
            time.sleep(max(0.0, start + (i + 1) * PERIOD - time.monotonic()))
            tp.send(comm, Hello(now_us()), None, 0, tp.TAG_TO_PS, 10, "send hello")
        return 0

    wakeups = 0

    def count():
        nonlocal wakeups
        wakeups += 1

    comm.barrier()
    pacer = tp.Pacer()
    for label, paced in (("plain", False), ("paced", True)):
        wakeups, late = 0, []
        for i in range(N):
            quiet_until = pacer.begin() if paced else 0.0
            msg, _ = tp.recv(comm, 1, tp.TAG_TO_PS, 10, "receive", Hello, on_idle=count, quiet_until=quiet_until)
            if paced:
                pacer.arrived()
            if i >= tp.Pacer.WINDOW:  # the pacer has learnt the pace
                late.append((now_us() - msg.version) / 1e6)
        print(f"{label} wakeups={wakeups / N:.1f} late_max={max(late):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

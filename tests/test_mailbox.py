"""The leader's gradient mailbox (psmodes/mailbox.py): a PS in another process maps it and reads
what the leader wrote, and takes nothing that is not exactly the buffer the Hello named. Real
memfds and a real second process; the runs that use it are in test_pipeline.py."""
from __future__ import annotations

import subprocess
import sys

import torch

from psmodes.mailbox import Mailbox, attach

READ_IN_ANOTHER_PROCESS = """
import sys
from psmodes.mailbox import attach
slots = attach(*map(int, sys.argv[1:5]))
print("none" if slots is None else " ".join(str(float(t.sum())) for t in slots))
"""


def read_elsewhere(pid: int, fd: int, token: int, numel: int) -> str:
    proc = subprocess.run([sys.executable, "-c", READ_IN_ANOTHER_PROCESS, str(pid), str(fd), str(token), str(numel)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_another_process_reads_what_the_leader_wrote_in_each_slot():
    box = Mailbox(1000)
    total = float(sum(range(1000)))
    box.slots[0].copy_(torch.arange(1000.0))
    box.slots[1].fill_(1.0)
    assert read_elsewhere(*box.address, 1000) == f"{total} 1000.0"
    box.slots[0].mul_(2)  # the same memory, not a copy taken at attach; the slots do not overlap
    assert read_elsewhere(*box.address, 1000) == f"{2 * total} 1000.0"


def test_nothing_but_the_named_buffer_is_taken():
    box = Mailbox(100)
    pid, fd, token = box.address
    assert attach(pid, fd, token, 100) is not None
    assert attach(pid, fd, token + 1, 100) is None, "another run's token"
    assert attach(pid, fd, token, 101) is None, "another model's size"
    assert attach(pid, fd, 0, 100) is None, "no mailbox offered"
    assert attach(pid, 0, token, 100) is None, "an fd that is no mailbox (stdin)"
    assert attach(2 ** 22 + 1, fd, token, 100) is None, "no such process here (another host)"

"""psmodes/transport.py on two real ranks: what a withdrawn receive had taken is kept; a message of an
older world generation is dropped."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from launch.analysis.machine import find_mpirun
from launch.driver.mpirun import mpirun_env

HERE = Path(__file__).resolve().parent


def two_ranks(script: str) -> subprocess.CompletedProcess:
    """Run tests/<script> on two real ranks under mpirun."""
    return subprocess.run([find_mpirun(), "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable,
                           str(HERE / script)], env=mpirun_env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_header_taken_by_a_withdrawn_receive_is_received_next_and_in_order():
    """The promoted head lost the leader's HELLO this way in psbench chaos (hybrid, 2 spares) and was
    fenced while alive: one receive is cut short before anything arrived, the next after the HELLO
    matched it; the next two receives must get version 7 and then version 8, not time out."""
    proc = two_ranks("kept_header_ranks.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not cut short" not in proc.stdout
    assert "received 7@1 8@1" in proc.stdout, proc.stdout + proc.stderr


def test_a_member_one_generation_behind_takes_the_newest_before_a_respawn():
    """A spare still starting when a refill's first attempt failed joined the second as its first, one
    generation behind: its replacements' names and the new world's differed from the others' and every
    replacement waited in MPI_Init until the run ended (20 worker failures, --restart-delay 0)."""
    proc = two_ranks("generation_ranks.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 generation 4 stamped 4", "rank 1 generation 4 stamped 4"], proc.stdout + proc.stderr


def test_a_paced_wait_wakes_up_less_and_still_takes_the_message_soon():
    """The PS and strict-chain replicas wait for messages that come at a steady pace; their polling
    took the cores the workers need (psmodes.transport.Pacer). A 20 ms pace: the paced waits must
    wake up less than half as often as plain ones, and take each message within 15 ms."""
    proc = two_ranks("paced_wait_ranks.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {line.split()[0]: dict(kv.split("=") for kv in line.split()[1:]) for line in proc.stdout.splitlines()
           if line.startswith(("plain", "paced"))}
    assert set(got) == {"plain", "paced"}, proc.stdout + proc.stderr
    assert float(got["paced"]["wakeups"]) < float(got["plain"]["wakeups"]) / 2, got
    assert float(got["paced"]["late_max"]) < 0.015, got


def test_a_message_of_an_older_generation_is_dropped_with_its_payload():
    """An async worker took the PS's answer to a gradient sent before a spare's take-over as the answer
    to its Hello after it, stayed one answer behind and had the live head fenced (#44). The stale
    answer and its weights must be dropped, and the answer to the Hello, stamped with the Hello's
    generation by a PS still in the old one, must be taken with its own weights."""
    proc = two_ranks("stale_message_ranks.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "answer 6 weights 6 dropped Answer@0" in proc.stdout, proc.stdout + proc.stderr

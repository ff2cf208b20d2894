"""Whether a host could reach the launcher at a given moment: heartbeats from every other host of a
run, each stamped with that host's clock and with the moment it arrived here.

A fence must be decided on evidence from the moment of suspicion. In a partition both sides suspect
each other, and the side that was cut off must not have its suspicion acted on: the head on a host
cut off suspects its replica (in half of ``--suspect-after``), and fencing that replica would leave
no copy of the state. The fence used to probe the suspecting host when the launcher got to it
(``ssh host true``, 2 s to answer): a link that healed within those seconds answered, and the
innocent replica on the side that was never cut off was fenced.

Now each remote host sends a heartbeat every :data:`PERIOD_S` over the route a kill takes
(:data:`HEARTBEAT_SCRIPT`). A heartbeat made while the host was cut off arrives late, when the
link is back: its lag (arrival here minus its host's clock) exceeds the stream's smallest lag
(the clock offset plus the fastest delivery) by more than :data:`LATE_S`. A suspicion raised by
a host counts only if every heartbeat that host made during the suspicion's wait arrived on time
(:meth:`HostWatch.cut_off_during`), which no healed link can change after the fact.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time

from ..remote.lifetime import die_with

PERIOD_S = 0.2
LATE_S = 0.5  # a heartbeat this much later than the fastest was held up: its host was cut off
# $1 the period: the host's clock, until the launcher's end of the session makes the write fail
HEARTBEAT_SCRIPT = 'while date +%s.%N; do sleep "$1"; done'


class HostWatch:
    """The heartbeat stream of one host (a reader thread stamps each arrival)."""

    def __init__(self, host: str, argv: list[str]) -> None:
        self.host = host
        self.beats: list[tuple[float, float]] = []  # (the host's clock, arrival here)
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                     preexec_fn=die_with(os.getpid()))
        self._thread = threading.Thread(target=self._read, name=f"heartbeats-{host}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            arrived = time.time()
            try:
                made = float(line.strip())
            except ValueError:
                continue
            with self._lock:
                self.beats.append((made, arrived))

    def cut_off_during(self, t0: float, t1: float) -> bool | None:
        """Whether the host was cut off at some moment in [t0, t1] (the launcher's clock): True, False,
        or None while no heartbeat made after ``t1`` has arrived (not known yet)."""
        with self._lock:
            beats = list(self.beats)
        if len(beats) < 2:
            return None
        base = min(arrived - made for made, arrived in beats)  # the clock offset + the fastest delivery
        lag = lambda b: b[1] - b[0] - base  # noqa: E731 - how late a heartbeat arrived
        if not any(made + base >= t1 for made, _ in beats):
            return None
        window = [b for b in beats if t0 <= b[0] + base <= t1 + PERIOD_S]
        # no heartbeat made in the window at all (the host's clock stopped? nothing sent) counts as cut off
        return not window or any(lag(b) > LATE_S for b in window)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()

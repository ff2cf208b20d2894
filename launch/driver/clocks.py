"""Clock offsets of the run's other hosts against the launcher's clock (``summary.json``:
``clock_offsets``), so that latencies measured across hosts can be corrected."""
from __future__ import annotations

import selectors
import subprocess
import time

from ..remote.routes import first_float, remote_command


def measure_offset(host: str, route: str, samples: int = 5, timeout: float = 15.0) -> dict:
    """The clock offset of ``host`` against this machine's clock, NTP style: one remote
    shell prints its clock each time it reads a line; per ping, offset = remote time minus
    the midpoint of the ping, and the ping with the shortest round trip wins (half of it
    bounds the error). A persistent session keeps the pings symmetric: starting a remote
    command per probe put the remote clock reading at the end of a long, one-sided delay.
    Local hosts share this clock (offset 0)."""
    if route == "local":
        return {"host": host, "route": route, "offset_s": 0.0, "error_s": 0.0}
    try:
        proc = subprocess.Popen(remote_command(route, host, ["sh", "-c", "while read x; do date +%s.%N; done"]),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return {"host": host, "route": route, "offset_s": None, "error": str(exc)}
    best, error = None, None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        for i in range(samples + 1):  # the first ping also waits for the session to start: not used
            t0 = time.time()
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            if not sel.select(timeout):
                error = f"no answer from {host} within {timeout:.0f} s"
                break
            line = proc.stdout.readline()
            t1 = time.time()
            remote = first_float(line.decode(errors="replace"))
            if remote is None:
                error = f"unexpected answer {line[:80]!r}"
                break
            if i and (best is None or t1 - t0 < best[0]):
                best = (t1 - t0, remote - (t0 + t1) / 2)
    except (OSError, ValueError) as exc:
        error = str(exc)
    finally:
        sel.close()
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if best is None:
        stderr = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        return {"host": host, "route": route, "offset_s": None, "error": (error or stderr or "no answer")[-300:]}
    return {"host": host, "route": route, "offset_s": round(best[1], 6), "error_s": round(best[0] / 2, 6)}

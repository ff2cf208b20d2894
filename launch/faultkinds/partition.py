"""``partition``: the target's host cut off the network for DUR (``--partition-ps AT~DUR``): the link
it reaches the launcher's host by goes down (a detached script there; needs root on that host and the
PS on another host than the launcher's). Both sides then suspect each other; the launcher judges a
suspicion by the suspecting host's heartbeats (launch/driver/reachability.py), so only the side that
was cut off is fenced."""
from __future__ import annotations

import os
import socket
import subprocess
import time

from ..remote.lifetime import die_with
from ..remote.routes import KillFailed, kill_route, script_command
from .base import REQUIRED, FaultKind, Option, launcher_events, record

# $1 a peer host, $2 seconds: the link this host reaches the peer by goes down for $2 s. Detached
# (setsid): the ssh session that started it is cut off with the rest; prints the clock and the link
PARTITION_SCRIPT = (
    'addr=$(getent ahostsv4 "$1" | head -n1 | cut -d" " -f1); '
    'dev=$(ip -o route get "$addr" | sed -n "s/.* dev \\([^ ]*\\).*/\\1/p"); '
    '[ -n "$dev" ] || { echo "no route to $1" >&2; exit 3; }; date +%s.%N; echo "$dev"; '
    'setsid sh -c \'ip link set "$1" down; sleep "$2"; ip link set "$1" up\' sh "$dev" "$2" '
    '</dev/null >/dev/null 2>&1 &')


class Partition(FaultKind):
    def inject(self, injector, info, point):
        route = kill_route(info["host"], injector.kill_via)
        if route == "local":
            raise KillFailed(f"a partition needs the target on another host; {info['host']} is this one")
        # in the background: the ssh session is cut off with the host and returns only when the link is back
        proc = subprocess.Popen(script_command(route, info["host"], PARTITION_SCRIPT,
                                               [injector.peer_host or socket.gethostname(), f"{point.for_s:g}"]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=die_with(os.getpid()))
        injector.running.append((proc, {"kind": "partition session", "for_s": None}))
        injector.running.append((Ended(point.for_s), {"pid": info["pid"], "host": info["host"], "kind": "partition",
                                                      "for_s": point.for_s, "at": point.spec}))
        return {"how": route}

    def event(self, injector, t, point, common, how):
        return injector.log.emit("partition", t_partition=t, for_s=point.for_s, peer=injector.peer_host,
                                 **common, **how)

    def chaos_apply(self, drawn_as, cfg, spec, rng, pause_s):
        # a short cut (shorter than --suspect-after: ridden out or refused) or a long one (the head fenced
        # once the link is back), as the two-host tests have them
        cfg.partition_ps.append(f"{spec}~{rng.choice([0.6, 1.6]) * cfg.suspect_after_s:.1f}s")
        return None

    def records(self, events, out, kill_time):
        recs = []
        for e in launcher_events(events, "partition"):
            rec = record("partition", True, e["t_partition"], e, f"{e['host']} cut off from {e.get('peer')} "
                         f"at {e.get('at')}")
            rec["for_s"] = e.get("for_s")
            recs.append(rec)
        return recs


class Ended:
    """Stands for a script that runs detached on another host: it has ended ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        self.end, self.returncode, self.pid = time.monotonic() + seconds, None, None
        self.stdout = None  # nothing it printed comes back here (the injector reads a script's first line)

    def poll(self):
        if self.returncode is None and time.monotonic() >= self.end:
            self.returncode = 0
        return self.returncode

    def wait(self):
        return 0


KIND = Partition(
    name="partition", summary="the target's host cut off the network for DUR",
    emits="partition",
    options=(Option("partition_ps", "ps", "partitions", "PS cut off"),),
    length=REQUIRED, fenceable=True, chaos=("partition",), chaos_default=False,
    plot_lines={"ps": ((0, (8, 3)), "PS host cut off")},
    timeline=dict(color="teal", linestyle="--", label="partition"))

"""``kill``: SIGKILL of the role's current holder (``--kill-ps``, ``--kill-replica``, ``--kill-worker``,
``--failures ...:kill``). The run must detect the death and repair it; a remote kill also prints the
host's clock at the kill, so that latencies across hosts can be corrected."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from ..remote.routes import KillFailed, first_float, kill_command, kill_route
from .base import NONE, FaultKind, Option, launcher_events, record


def sigkill(info: dict, kill_via: str = "auto") -> dict:
    """SIGKILL the process of a pid file, here or on its host. Returns how, and for a
    remote kill the host's clock at the kill (``t_remote``) and the round trip."""
    route = kill_route(info["host"], kill_via)
    if route == "local":
        os.kill(int(info["pid"]), signal.SIGKILL)
        return {"how": "local"}
    t0 = time.time()
    out = subprocess.run(kill_command(route, info["host"], info["pid"]), capture_output=True, text=True,
                         timeout=20, stdin=subprocess.DEVNULL)
    t1 = time.time()
    if out.returncode != 0:
        raise KillFailed(f"{route} kill of pid {info['pid']} on {info['host']} failed "
                         f"(exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return {"how": route, "t_remote": first_float(out.stdout), "rtt_s": round(t1 - t0, 4)}


class Kill(FaultKind):
    def inject(self, injector, info, point):
        return sigkill(info, injector.kill_via)

    def event(self, injector, t, point, common, how):
        # t_kill: the launcher's clock when the kill was sent; a remote kill also records the
        # target host's clock when it was carried out (t_remote) and the round trip
        return injector.log.emit("kill", t_kill=t, signal="SIGKILL", **common, **how)

    def records(self, events, out, kill_time):
        return [record("kill", True, kill_time(e), e, f"SIGKILL at {e.get('at')}")
                for e in launcher_events(events, "kill") if "node" not in e]

    def chaos_apply(self, drawn_as, cfg, spec, rng, pause_s):
        cfg.kill_ps.append(spec)
        return None


KIND = Kill(
    name="kill", summary="SIGKILL of the target",
    emits="kill",
    options=(Option("kill_ps", "ps", "kills", "PS killed"),
             Option("kill_replica", "replica", "replica-kills", "replica killed"),
             Option("kill_worker", "worker", "worker-kills", "worker killed")),
    length=NONE, needs_replacement=True, takes_down=True, failure_process=True, chaos=("kill",), perf_repairs=("spawn", "spare"),
    perf_name="SIGKILL",
    plot_lines={"ps": ("--", "PS killed (SIGKILL)"), "replica": ("-.", "replica killed")},
    timeline=dict(color="red", linestyle="--", label="kill"))

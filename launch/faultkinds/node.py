"""``node``: the PS's host lost (``--kill-node AT``): every rank there SIGKILLed at once with that
host's Open MPI daemon (PS, replicas, evaluator and spares placed there; workers there end the run).
Recorded as the PS's kill, the others on its host as collateral (``node``: their roles)."""
from __future__ import annotations

import subprocess
import time

from ..remote.routes import KillFailed, first_float, kill_route, remote_command
from .base import NONE, FaultKind, Option, launcher_events, record

# $@ pids, all on one host: a node lost. Their Open MPI daemon (their parent, where it is a prted: not on
# the launcher's host, whose ranks are mpirun's own children) dies with them, as it would with its node.
NODE_SCRIPT = ('d=""; for p in "$@"; do pp=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d " "); '
               '[ -n "$pp" ] && [ "$(cat /proc/$pp/comm 2>/dev/null)" = prted ] && d="$d $pp"; done; '
               'date +%s.%N; echo "daemons:$d"; exec kill -9 "$@" $d')


def kill_node(infos: list[dict], kill_via: str = "auto") -> dict:
    """SIGKILL the processes of ``infos`` (pid files of one host) at once, with that host's Open MPI
    daemon: :data:`NODE_SCRIPT`, run there. Returns how, the daemons killed and the host's clock."""
    host = infos[0]["host"]
    route = kill_route(host, kill_via)
    argv = ["sh", "-c", NODE_SCRIPT, "sh", *(str(int(i["pid"])) for i in infos)]
    t0 = time.time()
    out = subprocess.run(argv if route == "local" else remote_command(route, host, argv), capture_output=True,
                         text=True, timeout=20, stdin=subprocess.DEVNULL)
    t1 = time.time()
    if out.returncode != 0:
        raise KillFailed(f"{route} node kill on {host} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    daemons = [int(x) for line in out.stdout.splitlines() if line.startswith("daemons:") for x in line[8:].split()]
    how = {"how": route, "daemons": daemons, "rtt_s": round(t1 - t0, 4)}
    if route != "local":
        how["t_remote"] = first_float(out.stdout)
    return how


class Node(FaultKind):
    def inject(self, injector, info, point):
        others = injector.on_host(info)
        how = kill_node([info] + [i for _, i in others], injector.kill_via)
        injector.collateral += [{"pid": i["pid"], "host": i["host"], "role": role} for role, i in others]
        injector.killed.update((i["pid"], i["host"]) for _, i in others)
        return {**how, "node": [{"role": role, "pid": i["pid"]} for role, i in others]}

    def event(self, injector, t, point, common, how):
        return injector.log.emit("kill", t_kill=t, signal="SIGKILL", **common, **how)

    def records(self, events, out, kill_time):
        recs = []
        for e in launcher_events(events, "kill"):
            if "node" in e:
                others = ", ".join(o["role"] for o in e["node"])
                recs.append(record("node", True, kill_time(e), e, f"the PS's host lost at {e.get('at')}"
                                   + (f" ({others} with it)" if others else "")))
        return recs

    def chaos_apply(self, drawn_as, cfg, spec, rng, pause_s):
        raise AssertionError("a node loss is drawn for a whole trial (chaos Trial.lose_the_node)")


KIND = Node(
    name="node", summary="the PS's host lost: every rank there and its Open MPI daemon SIGKILLed at once",
    emits="kill",
    options=(Option("kill_node", "ps", "node-losses", "PS host lost"),),
    length=NONE, needs_replacement=True, takes_down=True, chaos=("node",),
    plot_lines={"ps": ((0, (3, 1, 1, 1)), "PS host lost")},
    timeline=dict(color="darkred", linestyle="--", label="host lost"))

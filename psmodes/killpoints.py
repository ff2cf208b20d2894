"""Test-only kill points: stop the PS at a named point so the launcher can SIGKILL it there.

``psbench run --kill-ps point:NAME`` makes the launcher export
``PSBENCH_KILL_POINT=NAME`` (comma-separated, one entry per kill; ``NAME@N``:
once the PS reached version N) to the ranks.
The first process of the run that reaches a named point (a marker file in
``<run_dir>/killpoints/`` makes each entry fire exactly once per run, across
replacements) records a ``killpoint`` event (pid, host, point) in its event
stream, flushed, and stops itself with SIGSTOP: every thread freezes exactly
there. The launcher's fault injector sees the event and SIGKILLs that pid.
No sleeping and hoping: the kill lands at the point, every time.

Without the variable :func:`reached` is a dictionary lookup and returns False.

Points (where each is reached):

- ``apply``: PS, after the optimizer step of a gradient, before it is
  replicated, checkpointed or answered;
- ``send_weights``: PS, after the send of the new weights was posted;
- ``checkpoint_write``: PS's checkpoint thread, with part of the temporary
  file written, before fsync and rename (checkpoints after version 0);
- ``chain_forward``: chain head, after the state was posted to the first replica;
- ``replay``: stateless replacement, between replayed updates (before the
  second, or before the only one);
- ``takeover``: a replacement PS (respawned or promoted), right after its
  first answer to the workers;
- ``new_leader``: PS (sync), right after its answer to a leader that took over
  from a dead one (hybrid: after the forced state sync);
- ``spawn``: chain head, the root of the survivors' collective spawn of the
  missing roles, just before it starts them (the others wait in the spawn);
- ``in_spawn``: the same root, once MPI_Comm_spawn returned (the new processes
  are connected) and before it takes part in making the new world of survivors
  and replacements (the others are already in it).

Replica points (``--kill-replica point:NAME``):

- ``tail_receive``: the chain's tail, after a state's header arrived and before
  it receives the payload (its predecessor's send is then still in flight).

Worker points (``--kill-worker point:NAME``):

- ``regroup_member``: a worker other than the leader, after the world's shrink
  of another worker's death and before the workers' own group is shrunk: a
  second death inside the group's repair;
- ``refill_member``: the last worker (the highest index, not the leader), as a refill
  starts and before it joins the survivors' spawn: its replacement, spawned in the
  spawn's next attempt, takes its index again;
- ``join_member``: a worker other than the leader, as the group is made again with a
  replacement and before it takes part in the creation (a death inside a join);
- ``announced``: the leader, once its announcement of a respawn or refill reached every
  survivor and before its control header says so to the workers (they learn of the
  respawn from the announcement alone).
"""
from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from .events import Ev

ENV = "PSBENCH_KILL_POINT"
POINTS = ("apply", "send_weights", "checkpoint_write", "chain_forward", "replay", "takeover", "new_leader",
          "spawn", "in_spawn", "replacement_init")
REPLICA_POINTS = ("tail_receive",)
WORKER_POINTS = ("regroup_member", "refill_member", "join_member", "announced")


def armed_from_env(value: str | None) -> dict[str, list[int]]:
    """``apply@50,apply,takeover`` -> {"apply": [50, 0], "takeover": [0]}: per entry, the
    PS version from which it fires (``NAME@N``: not before the PS reached version N)."""
    entries: dict[str, list[int]] = {}
    for item in (value or "").split(","):
        name, _, at = item.strip().partition("@")
        if name:
            entries.setdefault(name, []).append(int(at) if at.strip().isdigit() else 0)
    return entries


_ARMED = armed_from_env(os.environ.get(ENV))


def armed(name: str) -> bool:
    return name in _ARMED


def reached(name: str, ctx, **fields) -> bool:
    """At point ``name``: if the run armed it and this is its turn, record it and stop.

    Returns False when not armed (the normal case); otherwise it does not
    return until the process is continued (never, in practice: it is killed)."""
    if name not in _ARMED:
        return False
    return reached_by(name, ctx.cfg.run_dir, ctx.log, role=ctx.cluster.me.label,
                      generation=ctx.cluster.generation, **fields)


def reached_by(name: str, run_dir: str, log, role: str, generation: int, **fields) -> bool:
    """:func:`reached` for a process that has no Context yet (a replacement before its MPI_Init)."""
    entries = _ARMED.get(name)
    if not entries:
        return False
    version = fields.get("version")
    folder = Path(run_dir) / "killpoints"
    folder.mkdir(exist_ok=True)
    for i, from_version in enumerate(entries, start=1):
        if from_version and (version is None or version < from_version):
            continue
        try:
            fd = os.open(folder / f"{name}.{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        log.emit(Ev.KILLPOINT, point=name, nth=i, pid=os.getpid(), host=socket.gethostname(),
                 role=role, generation=generation, **fields)
        os.kill(os.getpid(), signal.SIGSTOP)
        return True
    return False

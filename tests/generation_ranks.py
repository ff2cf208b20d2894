"""Two ranks for tests/test_transport.py: a member that missed a failed attempt of a respawn (one generation
behind the others) takes the newest generation before the next attempt (Cluster.agree_generation), so that both
name the replacements and the new world alike. Each rank prints the generation it then holds."""
from __future__ import annotations

from mpi4py import MPI

from psmodes import transport as tp
from psmodes.cluster import Cluster
from psmodes.roles import Role


def main() -> int:
    comm = MPI.COMM_WORLD
    roles = [Role("ps"), Role("worker", 0)]
    rank = comm.Get_rank()
    cluster = Cluster(comm, roles, roles[rank], generation=4 if rank == 0 else 3)
    cluster.agree_generation()
    print(f"rank {rank} generation {cluster.generation} stamped {tp.GENERATIONS.current}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The process remote_spawn_parent.py spawns: it joins its parents and says on which host."""
import socket, os
from mpi4py import MPI
p = MPI.Comm.Get_parent()
m = p.Merge(True); print(f"child on {socket.gethostname()} merged {m.Get_size()}", flush=True); m.Barrier()
os._exit(0)

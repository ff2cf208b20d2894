"""rank 2 (on nodeb) dies; the survivors shrink and spawn one process with info host=<argv[2]>."""
import os, signal, socket, sys, threading, time
from mpi4py import MPI
how, host = sys.argv[1], sys.argv[2]
w = MPI.COMM_WORLD.Dup(); w.Set_errhandler(MPI.ERRORS_RETURN)
r = w.Get_rank()
print(f"rank{r} on {socket.gethostname()}", flush=True)
w.Barrier()
if r == 2 and how != "nodeath":
    os.kill(os.getpid(), signal.SIGKILL)
if how != "nodeath":
    req = w.Irecv(bytearray(8), MPI.ANY_SOURCE, 5)
    t0 = time.monotonic()
    while True:
        try:
            if req.Test():
                break
        except MPI.Exception as e:
            print(f"rank{r} detected: {e.Get_error_string()} in {time.monotonic()-t0:.2f}s", flush=True)
            break
        time.sleep(0.01)
    w = w.Shrink(); w.Set_errhandler(MPI.ERRORS_RETURN)
info = MPI.Info.Create()
if host != "-":
    info.Set("host", host)
box = {}
def spawn():
    try:
        child = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote_spawn_child.py")]
        if how == "multiple":
            box["inter"] = w.Spawn_multiple([child[0]], [[child[1]]], [1], info=[info], root=0)
        else:
            box["inter"] = w.Spawn(child[0], [child[1]], 1, info=info, root=0)
    except MPI.Exception as e:
        box["err"] = e.Get_error_string()
t = threading.Thread(target=spawn, daemon=True); t.start(); t.join(20)
print(f"rank{r} spawn({how}, host={host}) alive={t.is_alive()} {box}", flush=True)
if "inter" in box:
    m = box["inter"].Merge(); m.Barrier(); print(f"rank{r} merged {m.Get_size()}", flush=True)
sys.stdout.flush()
os._exit(0)

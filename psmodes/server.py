"""The parameter server (the chain's head in ``chain`` mode).

It owns the weights and the optimizer: it receives the leader's averaged
gradient, applies one SGD step, replicates (chain) or checkpoints (checkpoint)
as configured, and returns the new weights. Between polls it pushes weight
snapshots to the evaluator on a wall-clock interval, without waiting for it.

Every conversation with the leader starts with a HELLO (at start and after any
repair) carrying the leader's weight version and, if an exchange was cut by a
failure, the gradient it had sent. The PS reconciles: a gradient it never
applied is applied, one it applied already is not applied twice, and the
leader is told which version it now holds. A replacement PS in ``stateless``
mode gets the workers' weights and buffered updates in the same hand-over.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from . import checkpoint as ckpt
from . import killpoints
from . import transport as tp
from .context import Context, RunFailed
from .flatparams import FlatParams, digest
from .messages import POLICY_NAMES, Ack, Answer, Grad, Hello, Ready, Snapshot, State, Stop
from .replay import apply_buffered
from .sgd import FlatSGD
from .events import Ev


def build_flat(ctx: Context) -> FlatParams:
    torch.manual_seed(ctx.cfg.seed)
    return FlatParams(ctx.workload.build_model(ctx.cfg))


def make_server(ctx: Context, **kwargs) -> "ParameterServer":
    """The PS for this run's consistency model."""
    if ctx.cfg.is_async:
        from .async_server import AsyncParameterServer

        return AsyncParameterServer(ctx, **kwargs)
    return ParameterServer(ctx, **kwargs)


def write_pid_file(ctx: Context, role: str) -> None:
    """The launcher's fault injector finds the current PS (or a replica) here."""
    from .atomic import write_text_atomic
    import json

    folder = Path(ctx.cfg.run_dir) / "pids"
    folder.mkdir(exist_ok=True)
    info = {"pid": os.getpid(), "host": socket.gethostname(), "rank": ctx.cluster.rank, "role": role,
            "generation": ctx.cluster.generation, "t": time.time()}
    write_text_atomic(folder / f"{role}.json", json.dumps(info) + "\n")
    ctx.log.emit(Ev.ROLE, **info)


def read_restart(cfg) -> dict | None:
    """``<run_dir>/restart.json`` ({"attempt": N, "t0_ms": ...}) of a restarted job, else None."""
    import json

    if cfg.recovery != "job-restart":
        return None
    try:
        info = json.loads((Path(cfg.run_dir) / "restart.json").read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise RunFailed(f"restart.json is unreadable: {exc}") from None
    return info if int(info.get("attempt", 0)) > 0 else None


class UpdateTiming:
    """Where the PS's time per update goes (``psbench perf``'s scaling figures): receiving
    the gradient, the SGD step alone, what follows it (replication, checkpoint copy) and
    sending the weights. A few floats per update; medians are logged at the end."""

    def __init__(self) -> None:
        self.recv_s: list[float] = []
        self.apply_s: list[float] = []
        self.after_s: list[float] = []
        self.send_s: list[float] = []

    def add(self, t0: float, t1: float, t2: float, t3: float) -> None:
        self.recv_s.append(t1 - t0)
        self.after_s.append(max(0.0, (t2 - t1) - (self.apply_s[-1] if self.apply_s else 0.0)))
        self.send_s.append(t3 - t2)

    def medians(self) -> dict:
        out = {"updates": len(self.recv_s)}
        for name in ("recv_s", "apply_s", "after_s", "send_s"):
            values = getattr(self, name)
            out[name] = round(float(np.median(values)), 6) if values else None
        return out


class ParameterServer:
    def __init__(self, ctx: Context, opt: FlatSGD | None = None, prev: tuple[int, torch.Tensor] | None = None,
                 t0_ms: int = 0, fresh: bool = True) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.flat = build_flat(ctx)
        self.numel = self.flat.numel
        if opt is None:
            opt = FlatSGD(self.flat.weights, ctx.lr, cfg.momentum)
        self.opt = opt
        self.prev = prev  # (version, weights) kept by a promoted replica, for reconciliation
        self.grad = torch.zeros(self.numel)
        self.stateless_empty = False
        self.t0_ms = t0_ms
        self.stopped = False
        self.started = not fresh
        self._eval_sends = tp.PostedSends()
        self._eval_buf = np.zeros(self.numel, dtype=np.float32)
        self._next_eval = 0.0
        self._repl_sends = tp.PostedSends()
        self._repl_buf = torch.zeros(self.opt.state_numel)
        self.timing = UpdateTiming()
        # sync SGD without momentum: after each gradient the workers can apply it themselves (the same
        # arithmetic on the same bytes), so the PS answers with the version only, not 4 bytes a weight;
        # with momentum the workers would also need the PS's momentum buffer, so the weights travel
        self.workers_apply = not cfg.is_async and not cfg.momentum
        self.writer = None
        if cfg.mode == "checkpoint":
            self.ckpt_dir = Path(cfg.run_dir) / "checkpoints"
            self.writer = ckpt.BackgroundWriter(
                self.ckpt_dir, self._on_checkpoint, on_failed=self._on_checkpoint_failed,
                hook=self._checkpoint_hook if killpoints.armed("checkpoint_write") else None)
        # a whole-job restart (--recovery job-restart): the launcher wrote restart.json before
        # starting the new job; this PS resumes from the newest checkpoint and keeps the run's clock
        self.restart = read_restart(cfg) if fresh and ctx.cluster.generation == 0 else None
        if (ctx.cluster.generation > 0 and fresh) or self.restart is not None:
            self._init_replacement()
        if self.restart is not None:
            self.t0_ms = int(self.restart["t0_ms"])
        write_pid_file(ctx, "ps")
        # a PS that takes over from a dead one (respawned, promoted or restarted): kill point `takeover`
        self.takes_over = not fresh or ctx.cluster.generation > 0 or getattr(self, "restart", None) is not None

    # ---- start-up of a replacement
    def _init_replacement(self) -> None:
        cfg, log = self.ctx.cfg, self.ctx.log
        if cfg.mode == "checkpoint":
            state, skipped = ckpt.newest(self.ckpt_dir, self.numel)
            for reason in skipped:
                log.emit(Ev.CHECKPOINT_SKIPPED, reason=reason)
            if state is None and not skipped:
                # the PS died before its first checkpoint (version 0) was durable: version 0 is the
                # seed's initial model, which build_flat made again; lose the steps, not the run
                state = ckpt.make_state(self.opt.weights, self.opt.buf, 0, cfg.seed)
                log.emit(Ev.CHECKPOINT_NONE, reason=f"no checkpoint in {self.ckpt_dir}: starting from the "
                                                   "initial weights (version 0)")
            if state is None:
                raise RunFailed(f"no loadable checkpoint in {self.ckpt_dir}")
            self.opt.weights.copy_(state["weights"])
            if self.opt.buf.numel() and state["momentum"].numel():
                self.opt.buf.copy_(state["momentum"])
                self.opt.has_buf = True
            self.opt.version = state["version"]
            log.emit(Ev.RESUME, from_version=state["version"], digest=digest(self.opt.weights),
                     attempt=self.restart["attempt"] if self.restart else None)
        elif cfg.mode == "stateless":
            self.stateless_empty = True  # weights and updates come from the workers

    # ---- the loop
    def run(self) -> None:
        ctx = self.ctx
        if not self.started and self.writer is not None:
            self.writer.submit(ckpt.make_state(self.opt.weights, self.opt.buf, self.opt.version, ctx.cfg.seed))
        # after a respawn in chain mode the new tail gets the whole state at once
        chain = ctx.cfg.mode == "chain"
        ctx.resilient(self._serve, via="ps",
                      after_respawn=(lambda: self._replicate(wait_ack=True)) if chain else None)

    def _serve(self) -> None:
        ctx = self.ctx
        world, c = ctx.cluster.world, ctx.cluster
        if self.stateless_empty:
            # tell the leader we can take the hand-over; the workers train on until then
            tp.send(world, Ready(), None, c.leader, tp.TAG_FROM_PS, ctx.peer_timeout, "PS ready")
        while not self.stopped:
            msg, _ = tp.recv(world, MPI.ANY_SOURCE, tp.TAG_TO_PS, ctx.outage_timeout, "PS waits for the leader",
                             Hello, Grad, on_idle=self._idle)
            if isinstance(msg, Hello):
                self._hello(msg)
                continue
            t0 = time.perf_counter()
            tp.recv_payload(world, self.grad.numpy(), c.leader, tp.TAG_TO_PS, ctx.peer_timeout, "PS receives gradient")
            if msg.version != self.opt.version:
                raise RunFailed(f"gradient for version {msg.version} reached a PS at version {self.opt.version}")
            t1 = time.perf_counter()
            self._update(self.grad)
            t2 = time.perf_counter()
            self._reply(weights=not self.workers_apply)
            self.timing.add(t0, t1, t2, time.perf_counter())
        self._finish()

    def _update(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        t0 = time.perf_counter()
        self.opt.step(grad, lr_scale)
        self.timing.apply_s.append(time.perf_counter() - t0)
        killpoints.reached("apply", self.ctx, version=self.opt.version)
        self._after_update()

    def _after_update(self) -> None:
        v, cfg = self.opt.version, self.ctx.cfg
        if cfg.mode == "chain" and v % cfg.replicate_every == 0:
            self._replicate(wait_ack=cfg.replicate_every == 1)
        if self.writer is not None and v % cfg.checkpoint_every == 0:
            t0 = time.perf_counter()
            state = ckpt.make_state(self.opt.weights, self.opt.buf, v, cfg.seed)
            copy_s = time.perf_counter() - t0
            waited = self.writer.submit(state)
            if cfg.checkpoint_sync:
                self.writer.wait_idle(self.ctx.peer_timeout)
            self.ctx.log.emit(Ev.CHECKPOINT_START, version=v, copy_s=copy_s, waited_s=waited)

    def _reply(self, weights: bool = True) -> None:
        """The answer to the leader: the new weights, or (``weights=False``) only the version
        that the gradient made, which the workers then apply themselves."""
        cfg = self.ctx.cfg
        elapsed = time.time() - self.t0_ms / 1000.0
        self.stopped = bool((cfg.steps and self.opt.version >= cfg.steps)
                            or (cfg.duration_s and elapsed >= cfg.duration_s))
        if self.opt.version % 10 == 0:
            self.ctx.log.emit(Ev.UPDATE, version=self.opt.version)
        answer = Answer(self.opt.version, self.stopped, self.t0_ms, weights=weights, applied=True)
        reqs = tp.isend(self.ctx.cluster.world, answer, self.opt.weights.numpy() if weights else None,
                        self.ctx.cluster.leader, tp.TAG_FROM_PS)
        killpoints.reached("send_weights", self.ctx, version=self.opt.version)
        tp.wait(reqs, self.ctx.peer_timeout, "PS sends weights")

    def _hello(self, hello: Hello) -> None:
        """Reconcile with the leader; see the module docstring."""
        ctx, world, leader = self.ctx, self.ctx.cluster.world, self.ctx.cluster.leader
        leader_version = hello.version
        info: dict = {"leader_version": leader_version, "ps_version_before": self.opt.version}
        if leader_version < 0 and self.restart is not None:
            pass  # the first contact of a restarted job: training goes on on the run's clock
        elif leader_version < 0:  # the first contact of the run
            self.t0_ms = int(time.time() * 1000)
            ctx.log.emit(Ev.TRAIN_START, t0_ms=self.t0_ms)
        else:
            self.t0_ms = hello.t0_ms
        if self.stateless_empty:
            tp.recv_payload(world, self.opt.weights.numpy(), leader, tp.TAG_HANDOVER, ctx.peer_timeout, "hand-over weights")
            self.opt.version = leader_version
            policy, n_buffered, n_vectors = POLICY_NAMES[hello.policy], hello.buffered, hello.vectors
            vectors = []
            for _ in range(n_vectors):
                vec = torch.zeros(self.numel)
                tp.recv_payload(world, vec.numpy(), leader, tp.TAG_HANDOVER, ctx.peer_timeout, "hand-over updates")
                vectors.append(vec)
            staleness = apply_buffered(self.opt, policy, n_buffered, vectors, hook=self._replay_hook)
            self.stateless_empty = False
            info.update(replayed=n_buffered, policy=policy, staleness=staleness, vectors=n_vectors)
            ctx.log.emit(Ev.REPLAYED, applied=n_buffered, policy=policy, version=self.opt.version, staleness=staleness)
            self._after_update()
        else:
            info["digest_at_leader_version"] = self._digest_at(leader_version)
            if hello.pending:
                tp.recv_payload(world, self.grad.numpy(), leader, tp.TAG_TO_PS, ctx.peer_timeout, "pending gradient")
                if self.opt.version == leader_version:
                    self._update(self.grad)
                    info["pending"] = "applied"
                elif self.opt.version == leader_version + 1:
                    info["pending"] = "already applied"
                else:
                    info["pending"] = "dropped (PS is behind the leader)"
        info["ps_version"] = self.opt.version
        info["lost_steps"] = max(0, leader_version - info["ps_version_before"]) if leader_version >= 0 else 0
        ctx.log.emit(Ev.HELLO, **info)
        self.started = True
        self._reply()
        self._took_over()

    # ---- test-only kill points (psmodes/killpoints.py)
    def _took_over(self) -> None:
        if self.takes_over:
            self.takes_over = False
            killpoints.reached("takeover", self.ctx, version=self.opt.version)

    def _replay_hook(self, i: int, n: int) -> None:
        if i == min(2, n):  # between the first and the second replayed update, or before the only one
            killpoints.reached("replay", self.ctx, version=self.opt.version, replayed=i - 1, of=n)

    def _checkpoint_hook(self, version: int) -> None:
        if version > 0:  # not the initial checkpoint, written before training starts
            killpoints.reached("checkpoint_write", self.ctx, version=version)

    def _digest_at(self, version: int) -> str | None:
        if version == self.opt.version:
            return digest(self.opt.weights)
        if self.prev is not None and self.prev[0] == version:
            return digest(self.prev[1])
        return None

    # ---- chain replication
    def _replicate(self, wait_ack: bool) -> None:
        """Send the state down the chain (strict: and wait for the tail's ACK).

        Every wait here also watches for a respawn announcement (``ctx.idle``):
        under ``--consistency async`` the leader announces at any time, also while
        the head is replicating, and a replica that notices it first goes into the
        collective spawn without posting the receive for this state; a head that
        only waited for the send (or the ACK) then waited for a replica that waits
        for it in the spawn, until the peer timeout. The head joins the spawn too,
        and after it sends the whole state again (``after_respawn``)."""
        c, ctx = self.ctx.cluster, self.ctx
        if not c.replicas:
            return
        tp.wait(self._repl_sends.on(c.world), ctx.peer_timeout, "previous replication", on_idle=ctx.idle,
                watch=ctx.death_watch())
        self.opt.pack(self._repl_buf)
        state = State(self.opt.version, wait_ack, self.t0_ms)
        self._repl_sends.post(c.world, tp.isend(c.world, state, self._repl_buf.numpy(), c.replicas[0], tp.TAG_CHAIN))
        killpoints.reached("chain_forward", ctx, version=self.opt.version)
        if wait_ack:
            tp.wait(self._repl_sends.on(c.world), ctx.peer_timeout, "replicate to the chain", on_idle=ctx.idle,
                    watch=ctx.death_watch())
            ack, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_ACK, ctx.peer_timeout, "tail acknowledges", Ack,
                             on_idle=ctx.idle)
            if ack.version != self.opt.version:
                raise RunFailed(f"tail acknowledged version {ack.version}, head is at {self.opt.version}")

    # ---- idle work: evaluator snapshots
    def _idle(self) -> None:
        self.ctx.idle()
        self._push_snapshot(final=False)

    def _push_snapshot(self, final: bool) -> None:
        c, ctx = self.ctx.cluster, self.ctx
        if c.evaluator is None or self.stateless_empty or not self.started:
            return
        now = time.monotonic()
        if not final and now < self._next_eval:
            return
        pending = self._eval_sends.on(c.world)
        if pending:
            if final:
                tp.wait(pending, ctx.outage_timeout, "final snapshot")
            elif not all(tp.test(r, "snapshot to evaluator") for r in pending):
                return  # the evaluator is still busy; never make the workers wait for it
        self._next_eval = now + ctx.cfg.eval_interval_s
        self._eval_buf[:] = self.opt.weights.numpy()
        snapshot = Snapshot(self.opt.version, final, int(time.time() * 1000), self.t0_ms)
        self._eval_sends.post(c.world, tp.isend(c.world, snapshot, self._eval_buf, c.evaluator, tp.TAG_EVAL))

    def _on_checkpoint(self, version: int, path: Path, seconds: float) -> None:
        self.ctx.log.emit(Ev.CHECKPOINT, version=version, path=path.name, write_s=seconds,
                          bytes=path.stat().st_size if path.exists() else 0)

    def _on_checkpoint_failed(self, version: int, exc: OSError) -> None:
        # training goes on; the newest checkpoint that was written stays the one to resume from
        self.ctx.log.emit(Ev.CHECKPOINT_FAILED, version=version, error=f"{type(exc).__name__}: {exc}")

    def _finish(self) -> None:
        ctx, c = self.ctx, self.ctx.cluster
        if ctx.cfg.mode == "chain" and c.replicas:
            tp.wait(self._repl_sends.on(c.world), ctx.peer_timeout, "previous replication", watch=ctx.death_watch())
            tp.send(c.world, Stop(self.opt.version), None, c.replicas[0], tp.TAG_CHAIN, ctx.peer_timeout, "stop the chain",
                    watch=ctx.death_watch())
        if c.evaluator is not None:
            self._push_snapshot(final=True)
            tp.wait(self._eval_sends.on(c.world), ctx.outage_timeout, "final snapshot")
        else:
            from .evaluator import evaluate_full

            acc = evaluate_full(ctx, self.opt.weights)
            ctx.log.emit(Ev.EVAL, ps_step=self.opt.version, accuracy=acc, final=True,
                         t_snapshot=time.time(), t0_ms=self.t0_ms, samples=None)
        if self.writer is not None:
            self.writer.close()
        ctx.log.emit(Ev.PS_TIMING, numel=self.numel, sends_weights=not self.workers_apply, **self.timing.medians())
        ctx.log.emit(Ev.DONE, version=self.opt.version, completed=True, digest=digest(self.opt.weights))

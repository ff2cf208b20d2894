"""The parameter server (the chain's head in ``chain`` mode), sync data path.

It owns the weights and the optimizer: it receives the leader's averaged
gradient, applies one SGD step, lets the recovery mode act on it (chain:
replicate; checkpoint: checkpoint; :mod:`psmodes.modes`), and returns the new
weights. Between polls it pushes weight snapshots to the evaluator on a
wall-clock interval, without waiting for it.

Every conversation with the leader starts with a HELLO (at start and after any
repair) carrying the leader's weight version and, if an exchange was cut by a
failure, the gradient it had sent. The PS reconciles: a gradient it never
applied is applied, one it applied already is not applied twice, and the
leader is told which version it now holds. A replacement that awaits a
hand-over (``stateless``) gets the workers' weights and buffered updates with
the Hello (:mod:`psmodes.modes.stateless`).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from . import divergence, killpoints, mailbox, transport as tp
from .context import Context, RunFailed, build_flat
from .pidfiles import write_pid_file
from .priority import yield_cores
from .suspicion import Suspicion
from .usage import since_started
from .events import Ev
from .flatparams import digest
from .messages import PENDING_APPLIED, Answer, Grad, Hello, Ready, Snapshot, generation_of, parse
from .optim import FlatOptimizer, make_optimizer


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
        self.from_mailbox = 0  # gradients read in place from the leader's mailbox (no receive)

    def add(self, t0: float, t1: float, t2: float, t3: float) -> None:
        self.recv_s.append(t1 - t0)
        self.after_s.append(max(0.0, (t2 - t1) - (self.apply_s[-1] if self.apply_s else 0.0)))
        self.send_s.append(t3 - t2)

    def medians(self) -> dict:
        out = {"updates": len(self.recv_s), "from_mailbox": self.from_mailbox}
        for name in ("recv_s", "apply_s", "after_s", "send_s"):
            values = getattr(self, name)
            # three significant digits: a receive from the mailbox takes under a microsecond, and rounded
            # to 1e-6 it read 0.0 (test_perf's scaling point, 200k parameters)
            out[name] = float(f"{np.median(values):.3g}") if values else None
        return out


class ParameterServer:
    def __init__(self, ctx: Context, opt: FlatOptimizer | None = None, prev: tuple[int, torch.Tensor] | None = None,
                 t0_ms: int = 0, fresh: bool = True) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.flat = build_flat(ctx)
        self.numel = self.flat.numel
        if opt is None:
            opt = make_optimizer(self.flat.weights, ctx, self.flat.n_train)
        self.opt = opt
        self.prev = prev  # (version, weights) kept by a promoted replica, for reconciliation
        self.grad = torch.zeros(self.numel)
        self.mailbox: list[torch.Tensor] | None = None  # the leader's gradient slots, when it is on this host
        self.mode = ctx.mode
        self.awaiting_handover = False  # a fresh replacement whose state comes from the workers (stateless)
        self.served_leader: int | None = None  # the index of the worker whose Hello this PS answered last
        self.t0_ms = t0_ms
        self.answering: int | None = None  # the world generation of the request being answered
        self.stopped = False
        self.started = not fresh
        self._eval_sends = tp.PostedSends()
        self._eval_buf = np.zeros(self.numel, dtype=np.float32)
        self._next_eval = 0.0
        self.timing = UpdateTiming()
        self.pacer = tp.Pacer()  # the leader's next message comes about a step after the answer
        # --ps-priority idle: SCHED_IDLE at its first steady update (psmodes/priority.py)
        self.yields_cores = not cfg.is_async and cfg.ps_priority == "idle"
        self.yielded = False
        # sync plain SGD: after each gradient the workers can apply it themselves (the same arithmetic
        # on the same bytes), so the PS answers with the version only, not 4 bytes a weight; with
        # momentum or AdamW the workers would also need the PS's buffers, so the weights travel
        self.workers_apply = not cfg.is_async and opt.workers_can_apply
        # a whole-job restart (--recovery job-restart): the launcher wrote restart.json before
        # starting the new job; this PS resumes from the newest checkpoint and keeps the run's clock
        self.restart = read_restart(cfg) if fresh and ctx.cluster.generation == 0 else None
        self.mode.ps_setup(self)
        if (ctx.cluster.generation > 0 and fresh) or self.restart is not None:
            self.mode.ps_restore(self)
        if not fresh:  # a promoted replica: its copy of the state is the PS's from here on
            ctx.divergence.note("takeover", self.opt.version, by="promoted replica")
        if not self.awaiting_handover:  # a stateless replacement is given its weights with the hand-over
            ctx.divergence.check_weights(self.opt.weights, self.opt.version, where=divergence.TAKEOVER)
        if self.restart is not None:
            self.t0_ms = int(self.restart["t0_ms"])
        write_pid_file(ctx, "ps")
        # a PS that takes over from a dead one (respawned, promoted or restarted): kill point `takeover`
        self.takes_over = not fresh or ctx.cluster.generation > 0 or getattr(self, "restart", None) is not None

    # ---- the loop
    def run(self) -> None:
        self.mode.ps_start(self)
        self.ctx.resilient(self._serve, via="ps", after_respawn=self.mode.ps_after_respawn(self))

    def _serve(self) -> None:
        ctx = self.ctx
        world, c = ctx.cluster.world, ctx.cluster
        if self.awaiting_handover:
            # tell the leader we can take the hand-over; the workers train on until then
            tp.send(world, Ready(), None, c.leader, tp.TAG_FROM_PS, ctx.peer_timeout, "PS ready")
        while not self.stopped:
            hdr, src = tp.recv_header(world, MPI.ANY_SOURCE, tp.TAG_TO_PS, ctx.outage_timeout, "PS waits for the leader",
                                      on_idle=self._idle, quiet_until=self.pacer.begin())
            if generation_of(hdr) > tp.GENERATIONS.current:
                self._repair_first(hdr, src)  # raises RespawnNow
            msg = parse(hdr, Hello, Grad)
            self.answering = tp.GENERATIONS.last_received  # the answer belongs to the request's generation
            self.pacer.arrived()
            if isinstance(msg, Hello):
                self._hello(msg)
                continue
            if self.yields_cores:  # steady updates from here on (a take-over's catch-up is done)
                self.yields_cores, self.yielded = False, yield_cores()
            t0 = time.perf_counter()
            if msg.mailbox_slot >= 0:  # read in place by the SGD step; the leader writes it again after the answer
                if self.mailbox is None:
                    raise RunFailed("a gradient in a mailbox this PS has not mapped")
                grad = self.mailbox[msg.mailbox_slot]
                self.timing.from_mailbox += 1
            else:
                grad = self.grad
                tp.recv_payload(world, grad.numpy(), c.leader, tp.TAG_TO_PS, ctx.peer_timeout, "PS receives gradient")
            if msg.version != self.opt.version:
                raise RunFailed(f"gradient for version {msg.version} reached a PS at version {self.opt.version}")
            t1 = time.perf_counter()
            self._update(grad)
            t2 = time.perf_counter()
            self._reply(weights=not self.workers_apply)
            self.timing.add(t0, t1, t2, time.perf_counter())
        self._finish()

    def _repair_first(self, hdr, src: int) -> None:
        """A message of a newer world generation: its sender has been through a repair this PS has
        not joined yet, one the spares covered in place (psmodes/cluster.py: relabelled, not collective, so
        the workers may finish their part and say Hello before the PS even notices the announcement).
        Served now, its answer could be lost to the repair: seen over two hosts (psbench chaos, async chain,
        one spare), the promoted head answered both workers' Hellos before its own part of the repair,
        applied worker1's next gradient, and the repair's announcement, noticed in the chain's replication
        of that update, cut the answer off; the serve loop then started its bookkeeping afresh and waited
        for Hellos that had come already, and worker1 waited for its answer until it suspected the live
        head, which was fenced. The sync PS the same with the leader's Hello (two-host node chaos, chain
        trial-010: a spare refilled a replica in place, the head answered the leader's Hello before its own
        part of the relabelling, then each waited for the other until the live head was fenced). So the
        header is kept for the serve loop after the repair, and the PS joins the repair first."""
        ctx = self.ctx
        tp.KEPT.keep(ctx.cluster.world, src, tp.TAG_TO_PS, hdr)
        deadline = time.monotonic() + ctx.peer_timeout
        while time.monotonic() < deadline:
            ctx.idle()  # RespawnNow once the leader's announcement is in
            time.sleep(0.001)
        raise tp.PeerTimeout(f"a message of generation {generation_of(hdr)} came from rank {src}, and no repair was "
                             f"announced to this PS (generation {tp.GENERATIONS.current}) in {ctx.peer_timeout:.0f} s")

    def _update(self, grad: torch.Tensor, lr_scale: float = 1.0) -> None:
        t0 = time.perf_counter()
        self.opt.step(grad, lr_scale)
        self.timing.apply_s.append(time.perf_counter() - t0)
        killpoints.reached("apply", self.ctx, version=self.opt.version)
        self.after_update(grad)

    def after_update(self, grad: torch.Tensor | None = None) -> None:
        """After every applied update (one gradient, or a replay): the divergence check, then the
        mode's turn (replicate, checkpoint). ``grad``: the gradient applied, if one was."""
        self.ctx.divergence.check_weights(self.opt.weights, self.opt.version, grad=grad)
        self.mode.ps_after_update(self)

    @property
    def ends_training(self) -> bool:
        """The run's steps or duration are done, or its model diverged under ``--on-diverge stop``."""
        cfg = self.ctx.cfg
        elapsed = time.time() - self.t0_ms / 1000.0
        return bool((cfg.steps and self.opt.version >= cfg.steps) or (cfg.duration_s and elapsed >= cfg.duration_s)
                    or self.ctx.divergence.stops_run)

    def _reply(self, weights: bool = True) -> None:
        """The answer to the leader: the new weights, or (``weights=False``) only the version
        that the gradient made, which the workers then apply themselves."""
        self.stopped = self.ends_training
        if self.opt.version % 10 == 0:
            self.ctx.log.emit(Ev.UPDATE, version=self.opt.version)
        answer = Answer(self.opt.version, self.stopped, self.t0_ms, weights=weights, applied_as=self.opt.version,
                        durable=self.mode.ps_durable_version(self), mailbox=self.mailbox is not None)
        reqs = tp.isend(self.ctx.cluster.world, answer, self.opt.weights.numpy() if weights else None,
                        self.ctx.cluster.leader, tp.TAG_FROM_PS, generation=self.answering)
        killpoints.reached("send_weights", self.ctx, version=self.opt.version)
        tp.wait(reqs, self.ctx.peer_timeout, "PS sends weights")

    def _hello(self, hello: Hello) -> None:
        """Reconcile with the leader; see the module docstring."""
        ctx, world, leader = self.ctx, self.ctx.cluster.world, self.ctx.cluster.leader
        leader_version = hello.version
        applied = hello.pending == PENDING_APPLIED
        workers_version = leader_version + applied  # a first contact (-1) has nothing pending
        info: dict = {"leader_version": leader_version, "workers_version": workers_version,
                      "ps_version_before": self.opt.version}
        if leader_version < 0 and self.restart is not None:
            pass  # the first contact of a restarted job: training goes on on the run's clock
        elif leader_version < 0:  # the first contact of the run
            self.t0_ms = int(time.time() * 1000)
            ctx.log.emit(Ev.TRAIN_START, t0_ms=self.t0_ms)
        else:
            self.t0_ms = hello.t0_ms
        self.mailbox = mailbox.attach(hello.mailbox_pid, hello.mailbox_fd, hello.mailbox_token, self.numel)
        info["mailbox"] = self.mailbox is not None
        if self.awaiting_handover:
            info.update(self.mode.apply_handovers(self, [self.mode.receive_handover(self, hello, leader)]))
        else:
            if hello.pending:  # received first: the leader sends it before anything else
                tp.recv_payload(world, self.grad.numpy(), leader, tp.TAG_TO_PS, ctx.peer_timeout, "pending gradient")
            if hello.vectors:  # a promoted head catches up on the updates its copy had not seen (hybrid)
                info.update(self.mode.ps_catch_up(self, hello, leader))
            if not applied:  # the workers hold the weights the pending gradient was computed on
                info["digest_at_workers_version"] = self._digest_at(workers_version)
            if hello.pending:
                if self.opt.version == leader_version:
                    self._update(self.grad)
                    info["pending"] = "applied"
                elif self.opt.version == leader_version + 1:
                    info["pending"] = "already applied"
                else:
                    info["pending"] = "dropped (PS is behind the leader)"
            if applied:  # ... and they had applied it: the PS holds their weights once it has too
                info["digest_at_workers_version"] = self._digest_at(workers_version)
        # a leader that took over from a dead one (sync; not this PS's first leader): what only the old
        # leader held is the mode's to restore before the answer (hybrid: a state sync with the tail)
        if self.served_leader is not None and hello.worker != self.served_leader:
            info["leader_from"] = self.served_leader
            info.update(self.mode.ps_new_leader(self))
        self.served_leader = info["leader"] = hello.worker
        info["ps_version"] = self.opt.version
        # versions the workers had that this PS does not hold (a catch-up replays them first); the
        # pending gradient is applied (or was) unless the PS is behind the version it was computed on
        held = info["ps_version_before"] + info.get("caught_up", 0)
        info["lost_steps"] = workers_version - held if 0 <= leader_version and held < leader_version else 0
        ctx.log.emit(Ev.HELLO, **info)
        self.started = True
        self._reply()
        self._took_over()
        if "leader_from" in info:
            killpoints.reached("new_leader", ctx, version=self.opt.version)

    # ---- test-only kill points (psmodes/killpoints.py)
    def _took_over(self) -> None:
        if self.takes_over:
            self.takes_over = False
            killpoints.reached("takeover", self.ctx, version=self.opt.version)

    def replay_hook(self, i: int, n: int) -> None:
        if i == min(2, n):  # between the first and the second replayed update, or before the only one
            killpoints.reached("replay", self.ctx, version=self.opt.version, replayed=i - 1, of=n)

    def _digest_at(self, version: int) -> str | None:
        if version == self.opt.version:
            return digest(self.opt.weights)
        if self.prev is not None and self.prev[0] == version:
            return digest(self.prev[1])
        return None

    # ---- idle work: evaluator snapshots
    def _idle(self) -> None:
        self.ctx.idle()
        self._push_snapshot(final=False)

    def _push_snapshot(self, final: bool) -> None:
        c, ctx = self.ctx.cluster, self.ctx
        if c.evaluator is None or self.awaiting_handover or not self.started:
            return
        now = time.monotonic()
        if not final and now < self._next_eval:
            return
        pending = self._eval_sends.on(c.world)
        if pending:
            if final:
                self._delivered_to_evaluator(pending)
            elif not all(tp.test(r, "snapshot to evaluator") for r in pending):
                return  # the evaluator is still busy; never make the workers wait for it
        self._next_eval = now + ctx.cfg.eval_interval_s
        self._eval_buf[:] = self.opt.weights.numpy()
        snapshot = Snapshot(self.opt.version, final, int(time.time() * 1000), self.t0_ms)
        self._eval_sends.post(c.world, tp.isend(c.world, snapshot, self._eval_buf, c.evaluator, tp.TAG_EVAL))

    def _delivered_to_evaluator(self, reqs: list) -> None:
        """Wait for snapshots at the run's end. The evaluator may be scoring the last one, so it is
        suspected only once its beacon is silent too (psmodes/beacon.py)."""
        ctx = self.ctx
        tp.wait(reqs, ctx.outage_timeout, "final snapshot",
                suspect=Suspicion(ctx, ctx.cluster.evaluator, "the final snapshot's delivery", silent_only=True))

    def _finish(self) -> None:
        ctx, c = self.ctx, self.ctx.cluster
        # its share of a core up to here, before its final evaluation of the test set (without an
        # evaluator: 1.4 s of a 10.6 s perf run, which made the PS look like 0.2 of a core, 0.03 measured)
        trained = since_started()
        self.mode.ps_finish(self)
        if c.evaluator is not None:
            self._push_snapshot(final=True)
            self._delivered_to_evaluator(self._eval_sends.on(c.world))
        else:
            from .evaluator import emit_eval, evaluate_full

            emit_eval(ctx, evaluate_full(ctx, self.opt.weights), ps_step=self.opt.version, final=True,
                      t_snapshot=time.time(), t0_ms=self.t0_ms, samples=None)
        self.mode.ps_close(self)
        ctx.log.emit(Ev.PS_TIMING, numel=self.numel, sends_weights=not self.workers_apply, idle_class=self.yielded,
                     **self.timing.medians(),
                     **({"train_cpu_s": trained[0], "train_wall_s": trained[1]} if trained else {}))
        ctx.log.emit(Ev.DONE, version=self.opt.version, completed=True, digest=digest(self.opt.weights))

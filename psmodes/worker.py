"""A worker: computes gradients on its shard; the leader (worker 0) speaks to the PS.

One training step, sync data path:

1. every worker computes a gradient on its next batch (unless the run is
   waiting for a PS during an outage, in modes that do not train through it);
2. Horovod averages the gradients over the workers' communicator;
3. the leader sends the average to the PS and receives the new weights - or,
   with the PS down, detects the death (ULFM) and lets the recovery mode keep
   the update (stateless: :mod:`psmodes.modes.stateless`);
4. the leader broadcasts a control header (state, version, stop, repair
   action) and, when they changed, the weights to the other workers;
5. everyone takes the repair action (shrink, respawn) together; the leader
   then reconnects to the PS with a HELLO and a second control header follows.

``--exchange pipelined`` (sync, plain SGD): in step 3 the leader sends the gradient
and goes on without its answer; every worker applies it as the PS does (the same
arithmetic on the same bytes) and computes the next step while the PS applies it
(and, in chain mode, while the state travels down the chain). The leader waits for
the answer only before it sends the next gradient, so at most one is unacknowledged.
When the PS dies with one in flight, the Hello re-sends it and the PS reconciles it
as any pending gradient (stateless: the workers' weights, which contain it, are
handed over); the gradient the workers computed meanwhile is sent once the new PS
holds exactly the weights it was computed on (``Control.reuse``), so no step that a
worker computed on is lost, and runs stay bitwise equal to blocking ones. Once the
previous answer is in, a step's header is known (APPLY, version + 1): the leader
sends it before its allreduce completes, not after its exchange (``_header_early``).
"""
from __future__ import annotations

import time
from collections import deque

import numpy as np
import torch
from mpi4py import MPI

from benchmarks.registry import shard_batches

from . import elastic, killpoints, transport as tp
from .allreduce import Allreducer
from .background import Background
from .mailbox import Mailbox
from .context import JOIN_TRIES, Context, RespawnNow, no_repair
from .errors import RunFailed
from .pidfiles import write_pid_file
from .spare import retire as retire_spares
from .suspicion import GroupSuspicion, Suspicion
from .events import Ev
from .flatparams import FlatParams, digest
from .messages import (
    ACT_NONE,
    ACT_REFILL,
    ACT_REGROUP,
    ACT_SHRINK,
    ACT_SPAWN,
    ACTION_NONE,
    ACTION_REFILL,
    APPLY,
    DONE,
    FAILED,
    HEADER_LEN,
    KEEP,
    POLICY_CODES,
    RECEIVE,
    RUNNING,
    Answer,
    Control,
    Grad,
    NOT_PENDING,
    PENDING,
    PENDING_APPLIED,
    Hello,
    ProtocolError,
)
from .optim import sgd_step_
from .worker_state import InFlight, WorkerState


class Worker:
    def __init__(self, ctx: Context, worker_comm: MPI.Intracomm) -> None:
        self.ctx = ctx
        self._leader_of: list | None = None  # the roles list self.leader was decided for
        self.led = self.leader  # whether this worker has taken up the leader's duties (_take_the_lead)
        self.mode = ctx.mode
        cfg = ctx.cfg
        self.slowest_answer_s = 0.0  # the longest exchange with a live PS (sync: the leader's)
        self.index = ctx.cluster.me.index
        if worker_comm in (None, MPI.COMM_NULL):  # a replacement (psmodes/elastic.py): the group is made with it
            worker_comm = MPI.COMM_SELF if cfg.is_async else self._make_group_surviving()[0]
        self.comm = worker_comm
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.ctrl_comm = worker_comm.Dup()
        self.ctrl_comm.Set_errhandler(MPI.ERRORS_RETURN)
        torch.manual_seed(cfg.seed)  # same initial model everywhere (then overwritten by the PS's)
        self.flat = FlatParams(ctx.workload.build_model(cfg).to(ctx.device))
        self.flat.model.train()
        torch.manual_seed(cfg.seed * 1009 + self.index + 1)  # dropout differs per worker, reproducibly
        self.x, self.y = ctx.workload.load_train(cfg)
        self.batches = shard_batches(len(self.y), self.index, cfg.workers, ctx.batch_size, cfg.seed)
        self.batch, self.drawn = ctx.batch_size, 0  # this worker's batch, and the batches drawn from these shards
        # sync averages gradients over the workers; async workers push their own
        # Horovod: overlap the allreduces with backward, unless a --slow-worker must be waited for
        # after its sleep (its hooks would hand its gradients over before it); on a GPU only with
        # NCCL (device tensors)
        overlap = cfg.allreduce == "horovod" and cfg.workers > 1 and not cfg.slow_worker
        self.allreducer = None if cfg.is_async else Allreducer(cfg.allreduce, worker_comm, ctx.device,
                                                               fusion=not overlap)
        a = self.allreducer
        if a is not None and overlap and (ctx.device.type == "cpu" or a.on_device):
            a.overlap([p for p in self.flat.model.parameters() if p.requires_grad], self.flat.grads)
        spec = cfg.slow_worker_spec
        self.slow_factor = spec[1] if spec and spec[0] == self.index else 1.0
        self.loss_fn = ctx.workload.loss
        self.numel = self.flat.numel
        on_cpu = ctx.device.type == "cpu"
        # host buffers: what travels over MPI (the model may live on a GPU). On a CPU, for a model
        # without buffers, the last weights received are the model's own: the update applied in place
        # needs no copy into the model (0.25 ms of a 12.5 ms step on fmnist-cnn, issue #18). BatchNorm's
        # forward writes its statistics into the model's buffers: those models keep a copy of their own.
        # (Async workers copy at their own moments: psmodes/async_worker.py.)
        self.weights_shared = on_cpu and not self.flat.has_buffers and not cfg.is_async
        # the last weights received (the PS's, bit for bit)
        self.weights_in = self.flat.weights.numpy() if self.weights_shared else np.zeros(self.numel, dtype=np.float32)
        self.recv_buf = np.zeros(self.numel, dtype=np.float32)    # staging: a cut receive never tears weights_in
        self.on_cpu = on_cpu
        self.grad_host = self.flat.grads if on_cpu else self._host_buffer()  # the gradient that travels
        self.pipelined = cfg.exchange == "pipelined"
        # pipelined, the leader: two gradient buffers used in turn, since the next step's backward
        # runs while the last gradient travels (a copy of each into a buffer of its own cost 0.25 ms of
        # a 12.5 ms step, issue #18); in shared memory that a PS on this host reads in place
        # (psmodes/mailbox.py) unless --no-mailbox
        self.mailbox = Mailbox(self.numel) if self.pipelined and self.leader and cfg.mailbox else None
        self.ps_reads_mailbox = False  # the PS of the last Hello mapped it: gradients go without payload
        self.grad_slots: list[torch.Tensor] | None = None
        if self.mailbox is not None:
            self.grad_slots = self.mailbox.slots
        elif self.pipelined and self.leader:
            self.grad_slots = [self._host_buffer(), self._host_buffer()]
        self.slot = 0
        if self.grad_slots is not None:
            self._use_slot(0)
        # what the worker keeps across failures (psmodes/worker_state.py)
        self.state = WorkerState(sent_grad=self.grad_host)
        self.ctrl = Control()  # the leader's word for the next step (the leader writes it, the others receive it)
        self.ctrl_buf = np.zeros(HEADER_LEN, dtype=np.int64)
        # pipelined, the leader: the header sent before the allreduce completed (_header_early), and the
        # answer to the gradient in flight taken then (an Answer, or the PeerFailed its wait raised)
        self.early_sent: tuple[Control, list] | None = None
        self.early_answer: Answer | tp.PeerFailed | None = None
        self.early_headers = 0  # how many went early (the DONE event)
        self.reply_weights = RECEIVE
        self.ready_buf = np.zeros(HEADER_LEN, dtype=np.int64)
        self.samples_per_step = ctx.batch_size * cfg.workers
        # elastic workers (psmodes/elastic.py): a death in the workers' group (its own watch: a PS's death is
        # the leader's to find) voids the group's operations until the leader has every survivor regroup
        self.elastic = elastic.survivable(cfg)
        self.group = self._workers_in_world()  # the workers in self.comm
        ctx.workers_replaced.clear()  # a spare that took this role: the refills it took part in made this group
        self.group_watch = tp.DeathWatch()
        self.group_broken: tp.PeerFailed | None = None
        self.t_group_lost = 0.0
        self.t_short = 0.0  # the leader: since when the group has been short of --workers (a replacement's figure)
        if ctx.cluster.generation:  # a replacement: its shards among the group it joined
            self._reshard([], [self.index])
        self.last_loss = float("nan")
        self.ctrl_waits = deque(maxlen=100_000)  # per step: the compute's end to the control header (see run)
        write_pid_file(ctx, f"worker{self.index}")  # --kill-worker finds it here

    @property
    def leader(self) -> bool:
        """Whether this worker leads (announcements, and in sync the exchange with the PS): worker0, or the
        worker of the lowest index left once the leader died (psmodes/elastic.py). Decided again only when a
        repair gave the world new roles (a new list): it is read several times a step."""
        c = self.ctx.cluster
        if self._leader_of is not c.roles:
            self._leader_of, self._is_leader = c.roles, c.leader == c.rank
        return self._is_leader

    @property
    def header_early(self) -> bool:
        """Pipelined, the leader of a group of two or more: the step's header may go before the allreduce ends."""
        return self.pipelined and self.leader and len(self.group) > 1

    def _host_buffer(self) -> torch.Tensor:
        return torch.zeros(self.numel) if self.on_cpu else torch.zeros(self.numel).pin_memory()

    def _take_the_lead(self) -> None:
        """A worker that became the leader when the leader died (in its wait for the header, or in a repair the
        dead leader had called): it leads from the version every worker holds, the last header's, with nothing
        in flight (the PS answers its Hello with its weights: a gradient the dead leader had sent is applied
        once or not at all). Pipelined: the two gradient buffers the leader uses in turn (without them the next
        backward would overwrite the gradient the PS may still be receiving); no mailbox: a mapping the PS made
        was the dead leader's."""
        self.led = True
        # the PS down too: its repair, announced in _lead
        self.state.restore(self.ctrl, self.ctx.cluster.ps is not None, self.ctx.cfg.restart_delay_s)
        if self.pipelined and self.grad_slots is None:
            self.grad_slots = [self._host_buffer(), self._host_buffer()]
            self._use_slot(0)

    # ---- one step's pieces
    def _use_slot(self, k: int) -> None:
        """The leader's next gradient goes into gradient slot ``k`` (on a CPU backward copies the
        model's gradients into it and the allreduce averages them there)."""
        self.slot, self.grad_host = k, self.grad_slots[k]
        if self.on_cpu:
            self.flat.use_grads(self.grad_host)
            if self.allreducer is not None:
                self.allreducer.use_grads(self.grad_host)

    def _compute(self) -> float:
        t0 = time.perf_counter()
        if self.grad_slots is not None and self.grad_host is self.state.sent_grad:
            # the PS may be reading the last gradient, or a Hello may re-send it: this one goes into
            # the other slot, whose gradient was answered before the last one was posted
            self._use_slot(1 - self.slot)
        idx = next(self.batches)
        self.drawn += 1
        inputs = self.ctx.workload.to_inputs(self.x[idx]).to(self.ctx.device, non_blocking=True)
        target = torch.from_numpy(self.y[idx]).to(self.ctx.device, non_blocking=True)
        loss = self.loss_fn(self.flat.model(inputs), target)
        self.flat.backward(loss)
        if self.flat.has_buffers:  # BatchNorm's statistics after this forward travel in the gradient's tail
            self.flat.capture_buffers()
        if self.slow_factor > 1:  # --slow-worker: a straggler, slowed before it joins the others
            time.sleep((time.perf_counter() - t0) * (self.slow_factor - 1))
        if self.header_early:
            self._header_early()
        if self.allreducer is None:
            if self.grad_host is not self.flat.grads:
                self.grad_host.copy_(self.flat.grads)
        elif self.allreducer.overlapping:  # started by the hooks during backward
            self.allreducer.wait_(self.ctx.peer_timeout, suspect=self._group_suspicion("the workers' allreduce"))
            if self.flat.has_buffers:  # the hooks reduce the parameters' gradients only
                self.allreducer.average_(self.flat.grads[self.flat.n_train:], self.ctx.peer_timeout, "psbench.buffers",
                                         suspect=self._group_suspicion("the workers' allreduce"))
            if self.grad_host is not self.flat.grads:
                self.grad_host.copy_(self.flat.grads)
        elif self.allreducer.on_device:  # NCCL Horovod: reduce on the GPU, then stage
            self.allreducer.average_(self.flat.grads, self.ctx.peer_timeout,
                                     suspect=self._group_suspicion("the workers' allreduce"))
            self.grad_host.copy_(self.flat.grads)
        else:
            if self.grad_host is not self.flat.grads:
                self.grad_host.copy_(self.flat.grads)
            self._in_group(lambda watch: self.allreducer.average_(
                self.grad_host, self.ctx.peer_timeout, watch=watch, suspect=self._group_suspicion("the workers' allreduce")))
        self.last_loss = loss.item()
        return time.perf_counter() - t0

    def _bcast(self, buf: np.ndarray, what: str, timeout: float) -> None:
        req = self.ctrl_comm.Ibcast(buf, root=0)
        self._in_group(lambda watch: tp.wait(req, timeout, what, watch=watch, suspect=self._group_suspicion(what)))

    def _group_suspicion(self, what: str) -> GroupSuspicion:
        """A hung member of the workers' group holds up their collectives: it is suspected by its silent beacon."""
        return GroupSuspicion(self.ctx, [f"worker{i}" for i in self.group if i != self.index], what)

    # ---- elastic workers (psmodes/elastic.py)
    def _in_group(self, op) -> None:
        """Run the workers' group operation ``op(watch)``; in an elastic run, a death in the group voids it
        (and every later one) until the regroup. Sending and receiving whatever the group computed from then
        on would mix survivors that finished an operation with those that gave it up."""
        if not self.elastic:
            op(None)
            return
        if self.group_broken is not None:
            return
        try:
            op(self.group_watch.request(self.comm))
        except tp.PeerFailed as exc:
            self.group_broken = exc
            self.t_group_lost = self.t_group_lost or time.perf_counter()

    def _a_worker_died(self) -> bool:
        """Elastic, the leader: whether the death that ended a wait was a worker's (not the PS's)."""
        if not self.elastic:
            return False
        failed = self.ctx.failed_roles()
        return any(r.kind == "worker" for r in failed) and not any(r.kind == "ps" for r in failed)

    def _workers_lost(self, exc: tp.PeerFailed) -> None:
        """The leader: a worker died. The step's update is void (KEEP); every survivor regroups. A gradient
        the PS may have taken is pending: the Hello after the regroup reconciles it (applied once)."""
        self.t_group_lost = self.t_group_lost or time.perf_counter()
        if self.early_sent is not None:
            # pipelined: this step's header went out before the allreduce failed; the workers that had the
            # group's gradient applied it, and the regroup's broadcast of the PS's weights replaces their copy
            self._headers_sent_to_survivors(self.early_sent[1])
            self.early_sent = None
        self.early_answer = None  # an Answer: nothing in flight; a PeerFailed: _lost_in_flight has run
        if self.pipelined and self.state.in_flight is not None:  # unanswered: the PS may be in the world's shrink
            self._lost_in_flight(self.state.in_flight.version, worker_died=True)
        self.state.held_valid = False  # this step's allreduce failed somewhere: no worker's gradient is the group's
        self.state.in_flight = None  # pending now if its send completed (the Hello re-sends it)
        lost = [r.label for r in self.ctx.failed_roles() if r.kind == "worker"]
        self.ctx.log.emit(Ev.DETECT, via="leader", error=str(exc), t_detect=time.time(), dead=lost,
                          version=self.state.version, role="worker0")
        self.state.begin_outage(time.time())  # the group's, to the first update after the regroup (RECOVERED)
        self._set_ctrl(KEEP, action=ACT_REGROUP)

    def _workers_in_world(self) -> list[int]:
        """The indices of the workers the world holds now (after the repairs every survivor took part in)."""
        return [r.index for r in self.ctx.cluster.roles if r.kind == "worker"]

    def _group_changed(self) -> bool:
        return self.group != self._workers_in_world() or bool(self.ctx.workers_replaced & set(self.group))

    def _take_group(self) -> tuple[list[int], list[int]]:
        """The group becomes the workers the world holds now; returns the indices it lost and those it gained
        (replacements). An index a respawn gave to a new process is both: its old holder is gone."""
        now = self._workers_in_world()
        renewed = self.ctx.workers_replaced & set(self.group) & set(now)
        lost = sorted(set(self.group) - set(now) | renewed)
        joined = sorted(set(now) - set(self.group) | renewed)
        self.group = now
        self.ctx.workers_replaced.clear()
        return lost, joined

    def _regroup(self) -> None:
        """Every worker of the group, after a repair of the world: shrink the workers' communicator too, or,
        when a replacement joined, make it again over the world with it; then go on over it (psbench's MPI
        allreduce; the data re-sharded over the group, a fresh shuffle)."""
        ctx = self.ctx
        lost, joined = self._take_group()
        if joined:
            if not self.leader and self.index not in joined:
                killpoints.reached("join_member", ctx)
            comm, shrunk = self._make_group_surviving()
        else:
            if not self.leader:
                killpoints.reached("regroup_member", ctx)
            comm = ctx.watched(lambda: tp.call(self.comm.Shrink, "shrink the workers' group"), "workers' shrink")
            comm.Set_errhandler(MPI.ERRORS_RETURN)
            shrunk = comm.Get_size() < len(self.group)
            if shrunk:
                # another worker died after the world's shrink and before this one: the world drops it too, so
                # that both agree (seen: two workers killed 0.1 s apart; the group of one against the world's
                # two ended the run with the ProtocolError below)
                ctx.after_failure(tp.PeerFailed("a worker died during the workers' shrink", MPI.ERR_PROC_FAILED),
                                  via=f"worker{self.index}")
        if shrunk:  # the world was shrunk again, as after the first death
            more, _ = self._take_group()
            lost = sorted(set(lost + more))
            self._announce_no_repair()
        self.comm, self.ctrl_comm = comm, comm.Dup()
        self.ctrl_comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.allreducer = Allreducer(ctx.cfg.allreduce, comm, ctx.device)
        self.group_watch, self.group_broken = tp.DeathWatch(), None
        if comm.Get_size() != len(self.group) or comm.Get_rank() != self.group.index(self.index):
            raise ProtocolError(f"the workers' group has {comm.Get_size()} members with worker{self.index} at rank "
                                f"{comm.Get_rank()}; the world holds the workers {self.group}")
        self._reshard(lost, joined)
        if self.leader and not self.led:
            # here, not only in _leader_lost: a leader that dies in a repair it had called (a refill's spawn) leaves
            # the next worker leading from _follow_actions, which would have said Hello with a version it never held
            # (-1: the PS takes that for the run's first contact). Found reading the code, not in a run
            self._take_the_lead()

    def _announce_no_repair(self) -> None:
        """The leader, after a shrink that leaves nothing to spawn (no PS repair due, no refill expected): complete
        the survivors' wait for the announcement, a collective that would otherwise stand before the final barrier
        (seen: it waited out its 30 s)."""
        if self.leader and self.state.repair_due is None and not self.ctx.refill_expected():
            self.ctx.announce(ACTION_NONE)

    def _make_group(self) -> MPI.Intracomm:
        """The workers' communicator made over the world (MPI_Comm_create_group: collective over the workers
        only), in the order of their indices, so the leader is its rank 0: with a replacement in it (the
        replacement calls this as it starts, the others in their regroup)."""
        c = self.ctx.cluster
        ranks = [rank for _, rank in sorted((role.index, rank) for rank, role in enumerate(c.roles)
                                            if role.kind == "worker")]
        group, ctx = c.world.Get_group().Incl(ranks), self.ctx
        # a member's death keeps the creation from returning (Open MPI 5.0.11): it is given up
        comm = ctx.watched(lambda: ctx.bounded(lambda: tp.call(c.world.Create_group, "make the workers' group", group),
                                               ctx.outage_timeout, "workers' group", stalled_by=ctx.member_died),
                           "workers' group")
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        return comm

    def _make_group_surviving(self) -> tuple[MPI.Intracomm, bool]:
        """:meth:`_make_group`, made again over the world's workers once a worker that died during the creation
        was shrunk away (every survivor of the world takes part in that shrink: the PS and the other ranks are in
        it already); the communicator, and whether the world was shrunk. Before, a worker that died while a
        replacement joined hung the creation until the peer timeout (20 worker failures in 120 s, --refill-spares:
        every mode lost runs so)."""
        shrunk = False
        for attempt in range(1, JOIN_TRIES + 1):
            try:
                return self._make_group(), shrunk
            except tp.PeerFailed as exc:
                if attempt == JOIN_TRIES:
                    raise RunFailed(f"the workers' group could not be made {JOIN_TRIES} times, the last time: {exc}") \
                        from None
                self.ctx.after_failure(exc, via=f"worker{self.index}")  # RunFailed where the run cannot go on
                shrunk = True
        raise AssertionError("unreachable")

    def _reshard(self, lost: list[int], joined: list[int]) -> None:
        """After the group lost the workers ``lost`` and gained ``joined``: this worker's shard of the data
        among the group now (``self.group``), a fresh shuffle the same on every member, with the batch
        ``--elastic-batch`` gives (psmodes/elastic.py; the learning rate follows by itself: Context.lr); the
        leader records the regroup. A loss starts the restart delay before its replacement is due."""
        ctx, cfg = self.ctx, self.ctx.cfg
        epoch = self._epoch_cut(len(self.group) + len(lost) - len(joined))
        rank, size = self.group.index(self.index), len(self.group)
        batch, lr_factor = elastic.batch_and_lr(cfg, ctx.batch_size, size)
        self.batches = shard_batches(len(self.y), rank, size, batch,
                                     elastic.shuffle_seed(cfg, ctx.cluster.generation, self.group))
        self.batch, self.drawn = batch, 0
        if not cfg.is_async:  # async: every worker's step is its own batch
            self.samples_per_step = batch * size
        if set(lost) - set(joined):  # not those replaced already
            ctx.replace_later()
        if self.leader:
            self.t_short = self.t_short or self.t_group_lost or time.perf_counter()
            since_loss = round(time.perf_counter() - self.t_short, 4) if joined else None
            ctx.log.emit(Ev.REGROUPED, workers=[f"worker{i}" for i in self.group],
                         lost=[f"worker{i}" for i in lost], joined=[f"worker{i}" for i in joined], size=size,
                         batch=batch, lr_factor=round(lr_factor, 6),
                         seconds=round(time.perf_counter() - self.t_group_lost, 4) if self.t_group_lost else None,
                         since_loss_s=since_loss, **epoch)
            if size >= cfg.workers:
                self.t_short = 0.0
        self.t_group_lost = 0.0

    def _epoch_cut(self, old_size: int) -> dict:
        """Sync: the data epoch the regroup cuts short (its samples; those the group had drawn, the step the
        death voided included; those it skipped: the survivors start a new epoch over their new shards at
        once, so no sample is seen twice in one). The workers of a sync group draw their batches in
        lockstep, so the leader's count is every worker's. Async: each worker moves through its shard at its
        own pace, and the dead one's position died with it: not accounted for ({})."""
        if self.ctx.cfg.is_async:
            return {}
        shard = len(range(0, len(self.y), old_size))  # the largest shard; the others have one sample less at most
        per_epoch = max(1, shard // self.batch)
        epoch = per_epoch * self.batch * old_size
        seen = (self.drawn % per_epoch) * self.batch * old_size
        return {"epoch_samples": epoch, "epoch_seen": seen, "epoch_skipped": epoch - seen}

    def _send_ctrl(self, ctrl: Control, skip: set[int] = frozenset()) -> list:
        """The leader posts the header ``ctrl`` to every other worker but the ranks ``skip`` (its buffer is
        untouched until _sync_ctrl)."""
        self.ctrl_buf[:] = ctrl.to_header()
        comm = self.ctrl_comm
        return [comm.Isend(self.ctrl_buf, r, tp.TAG_CTRL) for r in range(1, comm.Get_size()) if r not in skip]

    def _sync_ctrl(self) -> Control:
        """The leader's control header to every worker (point to point: W-1
        96-byte messages, and a wait that can report which peer failed)."""
        comm, timeout = self.ctrl_comm, self.ctx.outage_timeout
        if self.leader and self.early_sent is not None:
            sent, reqs = self.early_sent
            self.early_sent = None
            if sent != self.ctrl:
                raise ProtocolError(f"the control header sent early ({sent}) is not this step's ({self.ctrl})")
        elif self.leader and self.elastic:
            self._send_ctrl_elastic()
            return self.ctrl
        elif self.leader:
            reqs = self._send_ctrl(self.ctrl)
        else:
            reqs = [comm.Irecv(self.ctrl_buf, 0, tp.TAG_CTRL)]
        # the others suspect a stopped leader here by its silent beacon (a live one may take long: its exchange
        # with a hung PS, a repair). Found by psbench chaos (hybrid trial-002 of seed 53): the PS hung, then the
        # leader while it waited for the PS's answer; the workers had left the allreduce, so nobody suspected
        # either, and the replicas waited out the peer timeout
        suspect = None if self.leader else GroupSuspicion(self.ctx, [f"worker{self.group[0]}"], "the leader's header")
        try:
            tp.wait(reqs, timeout, "control header", poll=tp.SHORT_POLL, suspect=suspect)
        except tp.PeerFailed as exc:
            if self.leader or not self.elastic:
                raise
            self._leader_lost(exc)  # the header's sender, the leader, died
            return self._sync_ctrl()  # from the new leader, or as the new leader
        if not self.leader:
            self.ctrl = Control.from_header(self.ctrl_buf)
        return self.ctrl

    def _leader_lost(self, exc: tp.PeerFailed) -> None:
        """Elastic, sync: the leader died (psmodes/elastic.py says when that is survived). Every survivor
        shrinks the world and the workers' group; the worker of the lowest index left leads (Cluster.leader)
        from the version all workers hold (the last header's) and says Hello to the PS without a pending
        gradient. The PS answers with its weights, so a gradient the dead leader had sent is applied once
        (the PS is one version ahead: the workers take its weights) or not at all."""
        ctx = self.ctx
        self.t_group_lost = self.t_group_lost or time.perf_counter()
        ctx.log.emit(Ev.DETECT, via=f"worker{self.index}", error=str(exc), t_detect=time.time(),
                     dead=[r.label for r in ctx.failed_roles() if r.kind == "worker"], version=self.ctrl.version,
                     role=f"worker{self.index}")
        try:
            ctx.after_failure(exc, via=f"worker{self.index}")  # RunFailed where the run cannot go on
        except RespawnNow:
            # the dead leader had announced a respawn or refill (every other rank is in it) and died before its
            # header said so: join it here. Its new processes are in the world the regroup sees, and a new
            # leader finds the PS up again (kill point 'announced'; before, RespawnNow ended this worker)
            ctx.respawn()
        self._regroup()
        if not self.leader:
            return
        self.state.begin_outage(time.time())  # the group's, to the first update after the takeover (RECOVERED)
        if not self.state.ps_up:  # the PS is down too: the respawn is announced in _lead once the delay has passed
            self._set_ctrl(False)
            return
        self._announce_no_repair()
        self._connect_and_steer(pending=False)

    def _send_ctrl_elastic(self) -> None:
        """The leader's header in an elastic run: a send that fails is a worker's death (the others have the
        header); a regroup's header goes to the workers not known dead, and their failures are expected."""
        timeout, regroup = self.ctx.outage_timeout, self.ctrl.action == ACT_REGROUP
        reqs = self._send_ctrl(self.ctrl, skip=set(tp.failed_ranks(self.ctrl_comm)) if regroup else set())
        if regroup:
            self._headers_sent_to_survivors(reqs)
            return
        for req in reqs:
            self._in_group(lambda watch, req=req: tp.wait(req, timeout, "control header", poll=tp.SHORT_POLL))

    def _headers_sent_to_survivors(self, reqs: list) -> None:
        """Complete the sends of a header the group's regroup follows: a send that fails is a worker that died
        (the regroup drops it)."""
        for req in reqs:
            try:
                tp.wait(req, self.ctx.outage_timeout, "control header", poll=tp.SHORT_POLL)
            except tp.PeerFailed:
                pass

    # ---- the loop
    def run(self) -> None:
        ctx, log = self.ctx, self.ctx.log
        if self.leader:
            self._connect_and_steer(pending=False)
        self._sync_ctrl()
        self._follow_actions()
        self._take_weights()
        compute = self.ctrl.compute
        # not one step when the first answer already says stop: a whole-job restart that starts after
        # the run's --duration is over (seen: the leader sent a gradient to a PS that had finished, and
        # waited until it suspected it)
        while self.ctrl.stop == RUNNING:
            t_iter = time.perf_counter()
            idle_before = self.state.outage.idle_s if self.state.outage is not None else 0.0
            if self.ctrl.reuse:  # the gradient every worker holds was computed on the PS's weights now
                computed, compute_s = True, 0.0
            else:
                computed = compute and self.group_broken is None  # a broken group computes nothing until regrouped
                compute_s = self._compute() if computed else 0.0
            t_ctrl = time.perf_counter()
            if self.leader:
                self._lead(computed, compute_s)
            self._sync_ctrl()
            # the leader: its exchange and the header's send; the others: their wait for the header, which
            # the leader's part explains except for the header's own latency (issue #18: its cost per step)
            self.ctrl_waits.append(time.perf_counter() - t_ctrl)
            self._follow_actions()
            self._take_weights()
            if not computed and self.state.outage is not None:  # an iteration that only waited for the repair
                counted = self.state.outage.idle_s - idle_before  # repair steps counted above
                self._add_idle(max(0.0, time.perf_counter() - t_iter - counted))
            compute = self.ctrl.compute
            if self.ctrl.stop != RUNNING:
                self._join_repair()
                break
        self._end_repairs(self.ctrl.version)
        log.emit(Ev.DONE, completed=self.ctrl.stop == DONE, version=self.ctrl.version,
                 digest=digest(self.flat.weights), slowest_answer_s=round(self.slowest_answer_s, 4),
                 ctrl_wait_s=round(float(np.median(self.ctrl_waits)), 6) if self.ctrl_waits else None,
                 early_headers=self.early_headers)
        self.allreducer.close()

    def _follow_actions(self) -> None:
        """The repair steps the leader's header calls for (a shrink, a respawn or refill, a regroup), and the
        header after each, until one calls for none. A replacement worker starts here too: the first header
        it receives may call it into a repair already."""
        ctx = self.ctx
        action = self.ctrl.action
        while action != ACT_NONE:  # again when the PS died during the reconnection
            t_action = time.perf_counter()
            self._join_repair()
            # a refill and a regroup: the PS is up
            background = self.mode.trains_through_outage and action not in (ACT_REFILL, ACT_REGROUP)
            if action == ACT_REGROUP and not self._group_changed():
                # the world still holds the dead worker (a PS's repair may have dropped it already)
                dead = ctx.after_failure(tp.PeerFailed("the leader reported a worker dead", MPI.ERR_PROC_FAILED),
                                         via="worker")
                if self.leader and self.state.ps_up and any(r.kind == "ps" for r in dead):
                    # the PS died too, found by the shrink (seen in psbench chaos: a hung PS fenced while the
                    # survivors shrank a dead worker; the leader then sent a gradient to no PS)
                    self._ps_lost(tp.PeerFailed("the PS died in the workers' repair", MPI.ERR_PROC_FAILED),
                                  time.time(), 0.0, shrunk=True)
                self._announce_no_repair()
            elif action == ACT_SHRINK:
                shrink = lambda: ctx.after_failure(  # noqa: E731
                    tp.PeerFailed("leader reported the PS dead", MPI.ERR_PROC_FAILED), via="worker")
                self._in_background(shrink, "shrink") if background else shrink()
            elif action in (ACT_SPAWN, ACT_REFILL):
                if action == ACT_REFILL and not self.leader and self.index == max(self.group):
                    killpoints.reached("refill_member", ctx)
                self._in_background(ctx.respawn, "respawn") if background else ctx.respawn(action == ACT_REFILL)
            if not background and self._group_changed():  # a worker died (alone, or in the PS's repair)
                self._regroup()
            # counted now: a reconnection that ends the run reports the outage's idle time at once
            self._add_idle(time.perf_counter() - t_action)
            t_action = time.perf_counter()
            if self.leader:
                try:
                    self._reconnect()
                except tp.PeerFailed as exc:  # e.g. a replacement killed as soon as it joined
                    self._ps_lost(exc, time.time(), 0.0)
            self._sync_ctrl()
            self._add_idle(time.perf_counter() - t_action)
            action = self.ctrl.action

    def _end_repairs(self, version: int) -> None:
        """Leader, at the run's end (sync and async): if a shrink happened but the respawn was not
        announced, complete the survivors' pending wait for the announcement; then retire the spares."""
        if not self.leader:
            return
        if self.state.repair_due is not None or self.ctx.refill_expected():
            self.ctx.announce(ACTION_NONE)
        retire_spares(self.ctx, version)

    def _take_weights(self) -> None:
        if self.group_broken is not None:
            return  # a group operation was given up: this copy is void until the regroup's broadcast
        if self.ctrl.weights == RECEIVE:
            self._bcast(self.weights_in, "weights broadcast", self.ctx.peer_timeout)
        elif self.ctrl.weights == APPLY:  # the PS applied this step's gradient: do the same, bit for bit
            sgd_step_(torch.from_numpy(self.weights_in), self.grad_host, self.ctx.lr, self.flat.n_train)
        if self.ctrl.weights != KEEP and not self.weights_shared:
            self.flat.weights.copy_(torch.from_numpy(self.weights_in))

    # ---- leader only
    def _set_ctrl(self, new_weights: int, stop: int = RUNNING, action: int = ACT_NONE) -> None:
        self.ctrl = self._control(new_weights, self.state.version, stop, action)
        self.state.reuse = False

    def _control(self, new_weights: int, version: int, stop: int = RUNNING, action: int = ACT_NONE) -> Control:
        compute = self.state.ps_up or self.mode.trains_through_outage
        return Control(weights=int(new_weights), version=version, stop=stop, action=action, compute=compute,
                       t0_ms=self.state.t0_ms, reuse=self.state.reuse)

    def _header_early(self) -> None:
        """Pipelined, the leader's backward done and the allreduce not yet: when the PS has answered the
        gradient in flight, it does not say stop and no repair is due, this step's control header is
        known already (APPLY, version + 1, what _lead would decide after the exchange): it goes out now,
        while the allreduce completes, so the other workers do not wait for the leader's exchange after
        it (worker1 waited 0.45 ms of a 12.2 ms fmnist-cnn step for the header, issue #18). The leader
        commits here to this step's gradient as the pipelined post does: were its post to fail, the
        gradient counts as in flight and lost (_post), and the reconciliation applies it once."""
        if not self.state.ps_up or self.state.in_flight is None or self.state.reuse or self._due_action() != ACT_NONE:
            return
        try:
            if not self.ctx.cluster.world.Iprobe(MPI.ANY_SOURCE, tp.TAG_FROM_PS):
                return  # not answered yet: the exchange after the allreduce waits for it, as before
        except MPI.Exception:  # a failure: the exchange after the allreduce meets and reports it
            return
        try:
            self.early_answer = answer = self._pipelined_answer()
        except tp.PeerFailed as exc:
            self.early_answer = exc
            return
        if not answer.stop:
            ctrl = self._control(APPLY, self.state.version + 1)
            self.early_sent = ctrl, self._send_ctrl(ctrl)
            self.early_headers += 1

    def _lead(self, computed: bool, compute_s: float) -> None:
        log = self.ctx.log
        now = time.time()
        if self.group_broken is not None:
            self._workers_lost(self.group_broken)
            return
        if self.state.ps_up:
            t_send = now
            # decided before the exchange: a repair (a respawn, a refill) reconnects with a Hello, which
            # must find nothing in flight, so a pipelined step that announces one waits for its answer
            # (none when the header went early: it said none, and the repair waits one step)
            due = ACT_NONE if self.early_sent is not None else self._due_action()
            try:
                if self.pipelined:
                    stop, answered = self._exchange_pipelined(drain=due != ACT_NONE)
                else:
                    stop, answered = self._exchange(), True
            except tp.PeerFailed as exc:
                if self._a_worker_died():  # the PS went into the repair of a worker's death
                    self._workers_lost(exc)
                else:
                    self._ps_lost(exc, t_send, compute_s)
                return
            log.emit(Ev.STEP, version=self.state.version, applied=True, staleness=0, samples=self.samples_per_step,
                     compute_s=round(compute_s, 6), allreduce_s=round(self.allreducer.last_s, 6),
                     exchange_s=round(time.time() - t_send, 6), loss=round(self.last_loss, 5))
            if self.state.outage is not None and answered:  # a PS applied an update since the failure
                self._recovered()
            # no repair announced in the step that ends the run: the PS has left its loop and would never join
            # the spawn (seen: a run that ended 0.6 s after a chain promotion, its spawn waited 30 s for the PS);
            # _end_repairs completes the survivors' wait for the announcement instead
            self._set_ctrl(self.reply_weights, stop=DONE if stop else RUNNING,
                           action=ACT_NONE if stop else self._announce(due))
            return
        # the PS is down
        new_weights = False
        if computed:
            new_weights = self.mode.outage_step(self, compute_s)
        else:
            time.sleep(0.01)  # nothing to do but wait for the repair
        if self.state.repair_call is not None and not self.repair_running():
            kind = self.state.repair_kind
            self._join_repair()
            if kind == "respawn":
                self._reconnect_ready()
        if self.state.ready_req is not None:
            try:
                ready = tp.test(self.state.ready_req, "wait for the replacement PS")
            except tp.PeerFailed as exc:  # the replacement died before it was ready
                self.state.ready_req = None
                self._ps_lost(exc, time.time(), 0.0)
                return
            if ready:
                self.state.ready_req = None
                t_connect = time.perf_counter()
                try:
                    self._connect_and_steer(pending=False)
                except tp.PeerFailed as exc:  # the replacement died in the hand-over: the buffer is kept
                    self._add_idle(time.perf_counter() - t_connect)
                    self._ps_lost(exc, time.time(), 0.0)
                    return
                self._add_idle(time.perf_counter() - t_connect)
                return
        due = self._due_action()
        self._set_ctrl(new_weights, action=self._announce(due if due == ACT_SPAWN else ACT_NONE))

    def _due_action(self) -> int:
        """The repair step due now, not announced yet: once the restart delay has passed, the respawn
        of the missing roles; --refill-spares, once training runs again (the PS up, no repair under
        way), the spawn of the spares that took roles."""
        if self.state.repair_call is not None:  # the shrink is still running on its thread
            return ACT_NONE
        if self.state.repair_due is not None:
            return ACT_SPAWN if time.monotonic() >= self.state.repair_due else ACT_NONE
        return ACT_REFILL if self.ctx.refill_due() else ACT_NONE

    def _announce(self, action: int) -> int:
        """Announce the repair step ``action`` (from :meth:`_due_action`) to every survivor."""
        if action == ACT_SPAWN:
            self.state.repair_due = None
            self.ctx.announce()
        elif action == ACT_REFILL:
            self.ctx.announce(ACTION_REFILL)
        return action

    def _exchange(self) -> bool:
        """Blocking: send this step's gradient, wait for the answer; whether the run stops."""
        self._post()
        # the watch: a PS that went into the repair after a death elsewhere (a chain replica) never
        # takes this gradient; the leader must notice that death too instead of waiting out the timeout
        tp.wait(self.state.in_flight.reqs, self.ctx.peer_timeout, "leader sends gradient", watch=self.ctx.death_watch(),
                suspect=self.state.in_flight.suspect)
        self.state.pending = True  # the PS may have it: a Hello re-sends it
        return self._await_answer().stop

    def _exchange_pipelined(self, drain: bool = False) -> tuple[bool, bool]:
        """Pipelined: the answer to the gradient in flight, then this step's gradient sent without
        waiting (``drain``: and its answer waited for too); (whether the run stops, whether an answer came)."""
        answered = False
        if self.state.in_flight is not None or self.early_answer is not None:
            answered = True
            answer, self.early_answer = self.early_answer, None
            if answer is None:
                answer = self._pipelined_answer()
            elif isinstance(answer, tp.PeerFailed):  # met before the allreduce completed (_header_early)
                raise answer
            if answer.stop:  # the workers hold the PS's final weights; this gradient stays
                self.reply_weights = KEEP
                return True, answered
        self._post()
        self.state.pending = True  # from the post on: the workers apply it before its answer
        self.state.version += 1    # as every worker does now (_take_weights), bit for bit as the PS
        self.reply_weights = APPLY
        if drain:
            return self._pipelined_answer().stop, True  # stop or not, the workers apply it: the PS did
        return False, answered

    def _pipelined_answer(self) -> Answer:
        computed_on = self.state.in_flight.version
        try:
            answer = self._await_answer()
        except tp.PeerFailed:
            self._lost_in_flight(computed_on, worker_died=self._a_worker_died())
            raise
        if answer.weights or answer.version != computed_on + 1:
            raise ProtocolError(f"pipelined exchange: the gradient for version {computed_on} was answered with "
                                f"version {answer.version}{' and weights' if answer.weights else ''}")
        return answer

    def _post(self) -> None:
        """Send this step's gradient to the PS without waiting (its sends are in ``in_flight``)."""
        c, ctx = self.ctx.cluster, self.ctx
        self.state.sent_grad = self.grad_host
        # a PS that answers in milliseconds and has not for --suspect-after is hung: fenced (psmodes.suspicion)
        suspect = Suspicion(ctx, c.ps, "the PS's answer to the leader")
        error = None
        try:
            payload = None if self.ps_reads_mailbox else self.state.sent_grad.numpy()
            grad = Grad(self.state.version, mailbox_slot=self.slot if self.ps_reads_mailbox else -1)
            reqs = tp.isend(c.world, grad, payload, c.ps, tp.TAG_TO_PS)
        except MPI.Exception as exc:
            error = tp.classify(exc, "leader sends gradient")
            if self.early_sent is None or not isinstance(error, tp.PeerFailed):
                raise error from None
            # the header sent early told every worker to apply this gradient: it is in flight and lost,
            # as if the PS had died right after the post (the wait for its answer raises this)
            reqs = []
        self.state.in_flight = InFlight(self.state.version, reqs, suspect, error)

    def _await_answer(self) -> Answer:
        """The PS's answer to the gradient in flight (its sends completed first)."""
        c, ctx, sent = self.ctx.cluster, self.ctx, self.state.in_flight
        if sent.error is not None:
            raise sent.error
        tp.wait(sent.reqs, ctx.peer_timeout, "leader sends gradient", watch=ctx.death_watch(), suspect=sent.suspect)
        answer, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_FROM_PS, ctx.peer_timeout, "leader waits for weights",
                            Answer, poll=tp.SHORT_POLL, suspect=sent.suspect)
        if answer.weights:
            self._recv_weights(sent.suspect)
            self.reply_weights = RECEIVE
        else:  # the PS only acknowledged: every worker applies the same update to its copy (_take_weights)
            self.reply_weights = APPLY
        sent.suspect.done()
        self.slowest_answer_s = max(self.slowest_answer_s, sent.suspect.elapsed())  # what --suspect-after must exceed
        self.mode.after_answer(self, sent.version, answer, self.state.sent_grad)
        # blocking: the answer's version; pipelined: the workers' already (the post counted the gradient)
        self.state.commit(self.state.version if self.pipelined else answer.version, answer.t0_ms)
        return answer

    def _lost_in_flight(self, computed_on: int, worker_died: bool = False) -> None:
        """Pipelined: the PS died with the gradient computed on ``computed_on`` unanswered, or (``worker_died``)
        a worker died and the PS went into the world's repair with it. Every worker applied it as the PS
        would (they hold version computed_on + 1) and computed this step's gradient on the result."""
        self.state.in_flight = None
        self.state.pending = True
        if self.mode.trains_through_outage and not worker_died:
            # the replacement starts from the workers' weights (a hand-over), which contain the gradient
            # in flight; this step's gradient is the outage's first (Mode.on_ps_lost keeps grad_host)
            return
        # the Hello re-sends it (sent_grad) for the new PS to reconcile from the version it was computed on;
        # this step's gradient waits for a PS that holds the weights it was computed on (held)
        self.state.version = computed_on
        self.state.held = computed_on + 1

    def _recv_weights(self, suspect=None) -> None:
        c = self.ctx.cluster
        # async: the PS may leave a payload unsent when it sees a respawn announcement (it sends the
        # whole state again after), so a worker waiting for one must notice the announcement too
        tp.recv_payload(c.world, self.recv_buf, c.ps, tp.TAG_FROM_PS, self.ctx.peer_timeout, "leader receives weights",
                        on_idle=self.ctx.idle, watch=self.ctx.death_watch(), suspect=suspect)
        if self.weights_shared:  # into the model, once the whole payload is here
            np.copyto(self.weights_in, self.recv_buf)
        else:
            self.weights_in, self.recv_buf = self.recv_buf, self.weights_in

    def _ps_lost(self, exc: tp.PeerFailed, t_send: float, compute_s: float, shrunk: bool = False) -> None:
        """The leader: the PS died. Every survivor shrinks it (``shrunk``: they have already, in the repair of
        a worker's death), and its replacement is due after the restart delay."""
        cfg, log = self.ctx.cfg, self.ctx.log
        st = self.state
        held = st.version if st.held is None else st.held  # pipelined: the workers applied one more
        log.emit(Ev.DETECT, via="leader", error=str(exc), t_detect=time.time(), version=held,
                 digest=digest(self.weights_in), role="worker0")
        if cfg.dies_with_ps:
            log.emit(Ev.FAILED, reason=f"PS died ({exc}); {no_repair(cfg)}")
            self._set_ctrl(False, stop=FAILED)
            return
        st.ps_up = False
        st.in_flight = None  # what was in flight is pending now (or, stateless, part of the workers' weights)
        st.begin_outage(t_send, held)  # the exchange began right after this step's compute; idle time starts there
        self._add_idle(time.time() - t_send)  # the exchange that hung until the death was detected
        st.repair_due = time.monotonic() + cfg.restart_delay_s
        self.mode.on_ps_lost(self)
        self._set_ctrl(st.local_opt is not None, action=ACT_NONE if shrunk else ACT_SHRINK)

    def _reconnect(self) -> None:
        """After a shrink or respawn: HELLO to the PS if there is one now."""
        c = self.ctx.cluster
        if self.state.repair_call is not None:  # still spawning; _lead picks it up when done
            self._set_ctrl(self.state.local_opt is not None)
            return
        if c.ps is None:
            self._set_ctrl(False)
            return
        if self.mode.trains_through_outage and self.mode.handover(self) is not None:
            self._reconnect_ready()  # a fresh replacement takes the hand-over once it says READY; train on until then
            self._set_ctrl(self.state.local_opt is not None)
            return
        self._connect_and_steer(pending=self.state.pending)

    def _connect_and_steer(self, pending: bool) -> None:
        """HELLO (and hand-over) to the PS, then the control header for the workers."""
        stop = self._connect(pending=pending)
        if stop and self.state.outage is not None:
            self._recovered()  # the run ends right at the reconnection
        self._set_ctrl(True, stop=DONE if stop else RUNNING)

    def _reconnect_ready(self) -> None:
        """A replacement that awaits the hand-over (stateless): train on until it says READY."""
        self.state.ready_req = self.ctx.cluster.world.Irecv(self.ready_buf, MPI.ANY_SOURCE, tp.TAG_FROM_PS)

    # Stateless workers take the repair steps (MPI_Comm_shrink, which waits for
    # every survivor - an evaluator busy scoring, say - and the collective
    # MPI_Comm_spawn, a fork, exec and MPI_Init) on a helper thread
    # (MPI_THREAD_MULTIPLE) and keep training meanwhile: no worker needs the world
    # communicator until the replacement is READY.
    def _in_background(self, fn, kind: str) -> None:
        self.state.repair_call = Background(fn, kind)
        self.state.repair_kind = kind

    def repair_running(self) -> bool:
        """Whether a repair step is still running on its helper thread."""
        return self.state.repair_call is not None and self.state.repair_call.running()

    def _join_repair(self) -> None:
        if self.state.repair_call is None:
            return
        call, self.state.repair_call = self.state.repair_call, None
        if call.running(self.ctx.outage_timeout):
            raise tp.PeerTimeout(f"repair step did not finish in {self.ctx.outage_timeout:.0f} s")
        call.result()

    def _connect(self, pending: bool) -> bool:
        c, ctx, cfg = self.ctx.cluster, self.ctx, self.ctx.cfg
        if self.state.in_flight is not None:  # its answer would be taken for the Hello's (see _lead's drain)
            raise ProtocolError(f"a Hello with the gradient for version {self.state.in_flight.version} in flight")
        offer = self.mode.handover(self)  # stateless: the buffer for a fresh replacement; hybrid: the catch-up
        buffered, vectors = offer if offer is not None else (0, [])
        # pipelined: the workers applied the pending gradient (they hold self.state.held, one version more)
        pending_code = (PENDING if self.state.held is None else PENDING_APPLIED) if pending else NOT_PENDING
        pid, fd, token = self.mailbox.address if self.mailbox is not None else (0, 0, 0)
        hello = Hello(self.state.version, pending=pending_code, buffered=buffered, t0_ms=self.state.t0_ms,
                      policy=POLICY_CODES[cfg.replay], vectors=len(vectors), worker=self.index,
                      mailbox_pid=pid, mailbox_fd=fd, mailbox_token=token)
        # a replacement that hangs before it answers is fenced like a hung PS; the cold start after a
        # respawn and the holder's own start-up are not counted (psmodes.suspicion)
        suspect = Suspicion(ctx, c.ps, "the PS's answer to the leader's hello")
        tp.send(c.world, hello, None, c.ps, tp.TAG_TO_PS, ctx.peer_timeout, "leader says hello",
                watch=ctx.death_watch(), suspect=suspect)
        if pending:  # stateless buffered it instead (on_ps_lost), so it is never re-sent there
            tp.wait(c.world.Isend(self.state.sent_grad.numpy(), c.ps, tp.TAG_TO_PS), ctx.peer_timeout,
                    "re-send gradient", watch=ctx.death_watch(), suspect=suspect)
        if offer is not None:
            handover_s = self.mode.send_handover(self, vectors, suspect)
        answer, _ = tp.recv(c.world, MPI.ANY_SOURCE, tp.TAG_FROM_PS, ctx.outage_timeout, "leader waits for the PS",
                            Answer, suspect=suspect)
        self._recv_weights(suspect)
        suspect.done()
        if offer is not None:
            self.mode.handed_over(self, len(vectors), handover_s)
        if pending:  # the re-sent gradient was answered too (applied now or before): the mode may keep it
            self.mode.after_answer(self, self.state.version, answer, self.state.sent_grad)
        self.state.commit(answer.version, answer.t0_ms)
        self.ps_reads_mailbox = answer.mailbox
        if self.state.held is not None:  # pipelined: one version names one state, so the held gradient is valid
            self.state.reuse = self.state.held == self.state.version and self.state.held_valid
            self.state.held = None
        self.state.held_valid = True
        self.state.ps_up = True
        if self.state.outage is not None:  # a hand-over or a catch-up leaves the PS at or past the workers' version
            self.state.outage.lost_steps = max(0, self.state.outage.version - self.state.version)
        ctx.log.emit(Ev.CONNECTED, version=self.state.version, generation=c.generation)
        return answer.stop

    # Worker idle time during an outage, measured where the workers block: the
    # exchange that hung until the death was detected, the repair steps (shrink,
    # a synchronous spawn, reconnecting, the hand-over), and whole iterations
    # that computed nothing (checkpoint mode waiting for its replacement). The
    # other workers wait for the leader's control header meanwhile.
    def _add_idle(self, seconds: float) -> None:
        if self.state.outage is not None:
            self.state.outage.idle_s += seconds

    def _recovered(self) -> None:
        self.ctx.log.emit(Ev.RECOVERED, **self.state.outage.recovered(self.ctx.cfg.mode, self.state.version))
        self.ctx.settle_refill()
        self.state.end_outage()

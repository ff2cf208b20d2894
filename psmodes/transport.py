"""Point-to-point PS traffic on mpi4py buffer calls, with ULFM failure reporting.

Nothing here pickles: every message is a fixed 12-int64 header followed, when
the header says so, by a float32 payload of a size both sides know. The messages
themselves, with their named fields, are defined in :mod:`psmodes.messages`. Waits poll
``Request.Test`` with a short sleep instead of blocking in ``Wait``: Open MPI's
blocking waits spin a core, which starves the other ranks when ranks outnumber
cores, and a poll loop is also where timeouts and failure checks live.

Failures surface as :class:`PeerFailed` (ULFM: ``MPI_ERR_PROC_FAILED``,
``..._PENDING`` or ``MPI_ERR_REVOKED``) and hangs as :class:`PeerTimeout`.
"""
from __future__ import annotations

import time
from collections import deque

import numpy as np
from mpi4py import MPI

from .messages import GENERATION_SLOT, HEADER_LEN, Message, describe, generation_of, parse

# message tags
TAG_TO_PS = 11       # leader/worker -> PS: gradient or control
TAG_FROM_PS = 12     # PS -> leader/worker: weights
TAG_EVAL = 13        # PS -> evaluator: weight snapshot
TAG_CHAIN = 14       # head -> replica -> ... -> tail: state
TAG_ACK = 15         # tail -> head: replication acknowledged
TAG_HANDOVER = 16    # survivors -> replacement PS: state hand-over
TAG_CTRL = 17        # leader -> workers: control header
TAG_SENTINEL = 18    # never sent: an ANY_SOURCE receive on it fails as soon as any peer dies
TAG_SPARE = 19       # leader -> spares: the run is over (Retire)
TAG_INTRO = 20       # every member of a new world with spawned processes -> every other (cluster.join)

SHORT_POLL = 2e-4  # the longest sleep between polls of a wait that is short and on the critical path
# ... and of a wait whose end nobody waits on (a spare's, the evaluator's next snapshot, a replica's
# next state with K > 1): 100 wake-ups a second. At the default 1 ms such a rank woke 840 times a
# second, 7 % of a core taken from the workers on 2 cores, in its sleep (measured, 2026-12-03)
IDLE_POLL = 0.01
DEFAULT_POLL = 0.001  # any other wait: one wake-up a millisecond once it has lasted a few

FAILURE_CLASSES = {MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED}


class PeerFailed(RuntimeError):
    """A peer died (ULFM reported it) or the communicator was revoked."""

    def __init__(self, what: str, error_class: int) -> None:
        name = {MPI.ERR_PROC_FAILED: "ERR_PROC_FAILED", MPI.ERR_PROC_FAILED_PENDING: "ERR_PROC_FAILED_PENDING",
                MPI.ERR_REVOKED: "ERR_REVOKED"}.get(error_class, str(error_class))
        super().__init__(f"{what}: {name}")
        self.error_class = error_class
        self.revoked = error_class == MPI.ERR_REVOKED


class PeerTimeout(RuntimeError):
    """A wait on a peer exceeded its timeout: the run is hung, not failed over."""


def classify(exc: MPI.Exception, what: str) -> Exception:
    cls = exc.Get_error_class()
    if cls in FAILURE_CLASSES:
        return PeerFailed(what, cls)
    return exc


def wait(reqs, timeout: float, what: str, poll: float = DEFAULT_POLL, on_idle=None, status=None,
         watch: MPI.Request | None = None, suspect=None, quiet_until: float = 0.0) -> None:
    """Wait for one request or a list of them, or raise PeerFailed / PeerTimeout.

    Polls with a sleep that doubles from 20 us up to ``poll`` seconds: a long wait costs
    about one wake-up a millisecond; waits that are short and on every step's critical path
    (the leader's answer from the PS, the control header) pass :data:`SHORT_POLL`.

    ``on_idle`` is called between polls (the PS serves the evaluator there);
    ``status`` (single request only) receives the completed request's status;
    ``watch``: a :class:`DeathWatch` request, tested between polls, so that a wait on one live
    peer (a send, a payload) fails as soon as any member of the communicator died;
    ``suspect``: a :class:`psmodes.suspicion.Suspicion`, checked between polls (a peer that
    should answer in milliseconds and has not for ``--suspect-after`` is fenced);
    ``quiet_until``: a :func:`time.monotonic` time before which the wait polls only every
    :data:`IDLE_POLL`, and after which every ``poll`` seconds (a message that comes at a steady
    pace: :class:`Pacer`)."""
    if isinstance(reqs, MPI.Request):
        reqs = [reqs]
    deadline = time.monotonic() + timeout
    sleep = poll if quiet_until else 2e-5
    pending = list(reqs)
    while True:
        try:
            pending = [r for r in pending if not r.Test(status)]
            if pending and watch is not None:
                watch.Test()
        except MPI.Exception as exc:
            raise classify(exc, what) from None
        if not pending:
            return
        now = time.monotonic()
        if now > deadline:
            raise PeerTimeout(f"{what}: no answer in {timeout:.0f} s")
        if on_idle is not None:
            on_idle()
        if suspect is not None:
            suspect.check()
        if now < quiet_until:
            time.sleep(min(quiet_until - now, IDLE_POLL))
            continue
        time.sleep(sleep)
        sleep = min(sleep * 2, poll)


class Pacer:
    """The quiet start of a wait for a message that comes at a steady pace: the leader's next
    gradient at the PS, the head's next state at a strict-chain replica.

    Such a wait polled from its first moment: with the sleep doubling up to 1 ms, about 20
    wake-ups in an 18 ms step, each a Python loop, two ``MPI_Test`` calls and a context switch
    that a worker pays for when ranks outnumber cores (a strict-chain replica's CPU doubled
    against K=100 in the perf run of 2026-12-03, the workers' throughput fell with it). A
    paced wait spends :data:`SHARE` of the shortest of the last :data:`WINDOW` waits polling
    only every :data:`IDLE_POLL` (a death is still seen within 10 ms), then polls every
    ``poll`` (by then the plain wait's sleep had doubled up to it too). A message that comes
    sooner waits up to :data:`IDLE_POLL` longer, and the waits it ends are shorter, so the
    quiet part shrinks to fit a faster pace within a few messages."""

    SHARE = 0.75
    WINDOW = 8

    def __init__(self) -> None:
        self._waits: deque[float] = deque(maxlen=self.WINDOW)
        self._since: float | None = None

    def begin(self) -> float:
        """Call as the wait begins: the ``quiet_until`` for its waits (0: not paced yet)."""
        self._since = time.monotonic()
        return self._since + self.SHARE * min(self._waits) if len(self._waits) == self.WINDOW else 0.0

    def arrived(self) -> None:
        """Call when the message came: the wait's length counts for the next ones."""
        if self._since is not None:
            self._waits.append(time.monotonic() - self._since)
            self._since = None


def test(req: MPI.Request, what: str) -> bool:
    """Non-blocking completion check that reports failures like :func:`wait`."""
    try:
        return req.Test()
    except MPI.Exception as exc:
        raise classify(exc, what) from None


def call(fn, what: str, *args, **kwargs):
    """Run a blocking MPI call (Shrink, Spawn, ...) and classify its failure."""
    try:
        return fn(*args, **kwargs)
    except MPI.Exception as exc:
        raise classify(exc, what) from None


def send(comm: MPI.Comm, msg: Message, payload: np.ndarray | None, dest: int, tag: int,
         timeout: float, what: str, on_idle=None, watch: MPI.Request | None = None, suspect=None,
         generation: int | None = None) -> None:
    wait(isend(comm, msg, payload, dest, tag, generation), timeout, what, on_idle=on_idle, watch=watch,
         suspect=suspect)


class Generations:
    """The world generation this process is in, stamped on every message it sends, and the
    messages of older generations it dropped.

    A repair that spares cover relabels the same communicator (psmodes.cluster), so a message sent
    before it can be received after it: an async worker took the PS's answer to a gradient sent
    before a spare's take-over as the answer to its Hello after it, stayed one answer behind, and
    suspected the live new head after training (fenced: an unplanned failure of psbench's own
    making). Every header carries its generation (``GENERATION_SLOT``); a receiver drops one of an
    older generation than its own, with its payloads, and says so (``on_drop``: the rank's
    ``stale_dropped`` event). A reply carries the generation of the request it answers when that
    is newer (``isend(..., generation=)``): a rank that answers a request of the new generation
    before it has been through the repair itself must not have its answer dropped."""

    def __init__(self) -> None:
        self.current = 0
        self.last_received = 0  # the generation of the header a receive returned last
        self.dropped = 0
        self.on_drop = None     # (kind, generation, current, source, tag) -> None

    def stamp(self, hdr: np.ndarray, generation: int | None = None) -> np.ndarray:
        hdr[GENERATION_SLOT] = self.current if generation is None else max(self.current, generation)
        return hdr

    def stale(self, hdr: np.ndarray) -> bool:
        return generation_of(hdr) < self.current

    def drop(self, comm: MPI.Comm, hdr: np.ndarray, source: int, tag: int, timeout: float, what: str) -> None:
        """Receive and throw away the payloads that follow a stale header, and record it."""
        try:
            payloads = parse(hdr).payloads
        except Exception:  # noqa: BLE001 - a foreign header: nothing follows that we know of
            payloads = 0
        for _ in range(payloads):
            _discard_next(comm, source, tag, timeout, f"{what} (a stale message's payload)")
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop(kind=describe(hdr).split(" ")[0], generation=generation_of(hdr), current=self.current,
                         source=source, tag=tag)


GENERATIONS = Generations()


def _discard_next(comm: MPI.Comm, source: int, tag: int, timeout: float, what: str) -> None:
    """Receive the next message from ``source`` on ``tag``, whatever its size, and discard it."""
    status = MPI.Status()
    deadline = time.monotonic() + timeout
    while True:
        try:
            message = comm.Improbe(source, tag, status)
        except MPI.Exception as exc:
            raise classify(exc, what) from None
        if message is not None:
            break
        if time.monotonic() > deadline:
            raise PeerTimeout(f"{what}: no answer in {timeout:.0f} s")
        time.sleep(1e-4)
    try:
        message.Recv(np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8))
    except MPI.Exception as exc:
        raise classify(exc, what) from None


def isend(comm: MPI.Comm, msg: Message, payload: np.ndarray | None, dest: int, tag: int,
          generation: int | None = None) -> list:
    """Post a message's header (and its payload); the header buffer lives as long as the request.
    ``generation``: a reply's, the generation of the request it answers (see :class:`Generations`)."""
    reqs = [comm.Isend(GENERATIONS.stamp(msg.to_header(), generation), dest, tag)]
    if payload is not None:
        reqs.append(comm.Isend(payload, dest, tag))
    return reqs


def recv_header(comm: MPI.Comm, source: int, tag: int, timeout: float, what: str,
                on_idle=None, poll: float = DEFAULT_POLL, suspect=None, quiet_until: float = 0.0) -> tuple[np.ndarray, int]:
    """Receive one header; returns (header, source rank). ``poll``, ``quiet_until``: see :func:`wait`.

    A header that an earlier, withdrawn receive had already taken comes first (:data:`KEPT`);
    one of an older generation is dropped with its payloads (:class:`Generations`)."""
    while True:
        hdr, src = _one_header(comm, source, tag, timeout, what, on_idle, poll, suspect, quiet_until)
        if not GENERATIONS.stale(hdr):
            GENERATIONS.last_received = generation_of(hdr)
            return hdr, src
        GENERATIONS.drop(comm, hdr, src, tag, timeout, what)


def _one_header(comm, source, tag, timeout, what, on_idle, poll, suspect, quiet_until) -> tuple[np.ndarray, int]:
    kept = KEPT.take(comm, source, tag)
    if kept is not None:
        return kept
    hdr = np.empty(HEADER_LEN, dtype=np.int64)
    status = MPI.Status()
    req = comm.Irecv(hdr, source, tag)
    try:
        wait(req, timeout, what, poll=poll, on_idle=on_idle, status=status, suspect=suspect, quiet_until=quiet_until)
    except BaseException:
        KEPT.withdraw(req, comm, tag, hdr)
        raise
    return hdr, (status.Get_source() if source == MPI.ANY_SOURCE else source)


def recv(comm: MPI.Comm, source: int, tag: int, timeout: float, what: str, *expected: type[Message],
         on_idle=None, poll: float = DEFAULT_POLL, suspect=None, quiet_until: float = 0.0) -> tuple[Message, int]:
    """Receive one message (one of ``expected``, if given); returns (message, source rank)."""
    hdr, src = recv_header(comm, source, tag, timeout, what, on_idle=on_idle, poll=poll, suspect=suspect,
                           quiet_until=quiet_until)
    return parse(hdr, *expected), src


def recv_payload(comm: MPI.Comm, buf: np.ndarray, source: int, tag: int, timeout: float, what: str,
                 on_idle=None, watch: MPI.Request | None = None, suspect=None) -> None:
    req = comm.Irecv(buf, source, tag)
    try:
        wait(req, timeout, what, on_idle=on_idle, watch=watch, suspect=suspect)
    except BaseException:
        _cancel(req)
        raise


class KeptHeaders:
    """Headers that a withdrawn receive had already taken, kept for the next receive of the
    same tag on the same communicator.

    A wait cut short between polls (the leader's respawn announcement raises RespawnNow there)
    cancels its receive; if a message matched that receive meanwhile, MPI_Cancel fails and the
    message would be gone. Found by psbench chaos (hybrid, 2 spares): the promoted head took the
    leader's announcement and, in the same progress call, the HELLO the leader sent right after
    its own (instant) part of the repair. Spares fill roles in place, in the same world, so
    nobody sends that HELLO again: the leader waited for an answer, and the live head was
    suspected and fenced 3 s later. A repair that makes a new world (shrink, spawn) leaves
    the headers kept on the old one unread: their senders talk on the new world."""

    LIMIT = 64         # a few per repair at most; the oldest go first
    SETTLE_S = 0.1     # a cancelled receive completes at once: locally, or with the message it took

    def __init__(self) -> None:
        self._kept: list[tuple[MPI.Comm, int, int, np.ndarray]] = []  # (comm, source, tag, header)

    def withdraw(self, req: MPI.Request, comm: MPI.Comm, tag: int, hdr: np.ndarray) -> None:
        """Cancel a posted header receive; keep the header if it had taken one."""
        status = MPI.Status()
        try:
            if req == MPI.REQUEST_NULL:
                return
            req.Cancel()
            deadline = time.monotonic() + self.SETTLE_S
            while not req.Test(status):
                if time.monotonic() > deadline:
                    return
                time.sleep(1e-4)
        except MPI.Exception:  # a failed receive (a death): the repair makes a new world anyway
            return
        if not status.Is_cancelled():
            self.keep(comm, status.Get_source(), tag, hdr)

    def keep(self, comm: MPI.Comm, source: int, tag: int, hdr: np.ndarray) -> None:
        """Keep a header received from ``source`` for the next receive of ``tag`` on ``comm``."""
        self._kept.append((comm, source, tag, hdr.copy()))
        del self._kept[:-self.LIMIT]

    def take(self, comm: MPI.Comm, source: int, tag: int) -> tuple[np.ndarray, int] | None:
        """The oldest kept header for this receive, and its source; None if there is none."""
        for i, (kept_comm, src, kept_tag, hdr) in enumerate(self._kept):
            if kept_comm is comm and kept_tag == tag and source in (MPI.ANY_SOURCE, src):
                del self._kept[i]
                return hdr, src
        return None


KEPT = KeptHeaders()


class PostedSends:
    """Non-blocking sends and the world they were posted on.

    A send posted on a world that was repaired since (shrink, spawn) can never complete: the
    peer posts its receive on the new world. :meth:`on` forgets such sends (the next send
    carries the whole state) instead of letting a caller wait for them until its timeout:
    a PS whose last evaluator snapshot was posted just before a respawn waited the outage
    timeout for it at the end of the run, and the others left the final barrier without it."""

    def __init__(self) -> None:
        self._reqs: list = []
        self._comm: MPI.Comm | None = None

    def post(self, comm: MPI.Comm, reqs: list) -> None:
        self._comm, self._reqs = comm, reqs

    def on(self, comm: MPI.Comm) -> list:
        """The sends still worth waiting for on ``comm``, the current world."""
        if self._comm is not comm:
            self._comm, self._reqs = None, []
        return self._reqs


def failed_ranks(comm: MPI.Comm) -> list[int]:
    """Ranks of ``comm`` that this process knows to have failed (a local call)."""
    try:
        group = comm.Get_failed()
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), comm.Get_group())
    except (MPI.Exception, NotImplementedError, AttributeError):
        return []
    return [r for r in ranks if r is not None and r >= 0]


class DeathWatch:
    """An ANY_SOURCE receive on :data:`TAG_SENTINEL`, which nobody sends, on the current world.

    ULFM fails an ANY_SOURCE receive (ERR_PROC_FAILED_PENDING) as soon as any member of its
    communicator is known dead, but a send to a live peer, or a receive from one, waits on: a
    chain replica forwarding to a tail that has already gone into the repair after a death
    elsewhere waited until its peer timeout while the tail waited for it in the shrink. Waits
    like that test :meth:`request` as well. One receive per world, posted again after a repair."""

    def __init__(self) -> None:
        self._buf = np.empty(1, dtype=np.int64)
        self._comm: MPI.Comm | None = None
        self._req: MPI.Request | None = None

    def request(self, comm: MPI.Comm) -> MPI.Request:
        if comm is not self._comm:
            if self._req is not None:
                _cancel(self._req)
            self._comm, self._req = comm, comm.Irecv(self._buf, MPI.ANY_SOURCE, TAG_SENTINEL)
        return self._req


class FairInbox:
    """Headers from a fixed set of senders, served round robin.

    One receive is posted per sender instead of one ANY_SOURCE receive: Open
    MPI matches ANY_SOURCE against the senders in rank order, so under load the
    lowest ranks were always served first and the highest starved (seen: one
    of three async workers' gradients 16-25 versions stale, the others' 2).
    A :class:`DeathWatch` keeps ULFM's prompt notice of any peer's death."""

    def __init__(self, comm: MPI.Comm, senders: list[int], tag: int) -> None:
        self.comm, self.senders, self.tag = comm, list(senders), tag
        self.bufs = {r: np.empty(HEADER_LEN, dtype=np.int64) for r in self.senders}
        self.reqs: dict[int, MPI.Request | None] = dict.fromkeys(self.senders)
        self.sentinel = DeathWatch().request(comm)
        self.next = 0

    def get(self, timeout: float, what: str, on_idle=None) -> tuple[np.ndarray, int]:
        """The next header, round robin; the caller receives its payload before calling again
        (the receive for that sender is re-posted only then, so it cannot match the payload).
        A header of an older generation is dropped with its payloads (:class:`Generations`)."""
        while True:
            hdr, src = self._next(timeout, what, on_idle)
            if not GENERATIONS.stale(hdr):
                GENERATIONS.last_received = generation_of(hdr)
                return hdr, src
            GENERATIONS.drop(self.comm, hdr, src, self.tag, timeout, what)

    def _next(self, timeout: float, what: str, on_idle=None) -> tuple[np.ndarray, int]:
        for r, req in self.reqs.items():
            if req is None:
                kept = KEPT.take(self.comm, r, self.tag)
                if kept is not None:
                    return kept
                self.reqs[r] = self.comm.Irecv(self.bufs[r], r, self.tag)
        deadline = time.monotonic() + timeout
        sleep = 2e-5
        n = len(self.senders)
        while True:
            for i in range(n):
                r = self.senders[(self.next + i) % n]
                if test(self.reqs[r], what):
                    self.reqs[r] = None
                    self.next = (self.next + i + 1) % n
                    return self.bufs[r].copy(), r
            test(self.sentinel, what)
            if time.monotonic() > deadline:
                raise PeerTimeout(f"{what}: no answer in {timeout:.0f} s")
            if on_idle is not None:
                on_idle()
            time.sleep(sleep)
            sleep = min(sleep * 2, 0.001)

    def close(self) -> None:
        for r, req in self.reqs.items():
            if req is not None:
                KEPT.withdraw(req, self.comm, self.tag, self.bufs[r])
        _cancel(self.sentinel)


def _cancel(req: MPI.Request) -> None:
    try:
        if req != MPI.REQUEST_NULL:
            req.Cancel()
    except MPI.Exception:
        pass

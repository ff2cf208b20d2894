"""Every message between ranks, defined once: a small frozen type with named fields.

On the wire each message is the fixed header of :data:`HEADER_LEN` int64s that
:mod:`psmodes.transport` moves (``[kind, field 1, field 2, ..., generation]``, unused slots 0),
followed, when the message says so (:attr:`Message.payloads`), by float32 payloads of sizes
both sides know. The last slot, :data:`GENERATION_SLOT`, is the world generation the message
belongs to, which transport stamps and checks (a receiver drops a message of an older
generation: :class:`psmodes.transport.Generations`). Nothing is pickled.
:meth:`Message.to_header` and :func:`parse` are the only code that knows a field's position:
the rest of psmodes reads ``msg.version``, never ``hdr[1]``.

| message | from -> to | tag | payload that follows |
| --- | --- | --- | --- |
| :class:`Hello` | leader / async worker -> PS | TO_PS | the pending gradient (``pending``); a stateless hand-over's weights and ``vectors`` buffered updates (HANDOVER) |
| :class:`Grad` | leader / async worker -> PS | TO_PS | the gradient (none when in a ``mailbox_slot``: :mod:`psmodes.mailbox`) |
| :class:`Answer` | PS -> leader / async worker | FROM_PS | the weights, when ``weights`` |
| :class:`Ready` | stateless replacement PS -> workers | FROM_PS | none |
| :class:`Snapshot` | PS -> evaluator | EVAL | the weights |
| :class:`State` | head -> replica -> ... -> tail | CHAIN | the packed optimizer state |
| :class:`Stop` | head -> replicas | CHAIN | none |
| :class:`Ack` | tail -> head | ACK | none |
| :class:`Control` | leader -> the other workers (sync) | CTRL | none (the weights follow in a broadcast when ``weights == RECEIVE``) |
| :class:`Announce` | leader -> every survivor (broadcast) | - | none |
| :class:`Retire` | leader -> each spare, at the run's end | SPARE | none |
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

HEADER_LEN = 12
GENERATION_SLOT = HEADER_LEN - 1  # the world generation of the message (psmodes.transport stamps it)

# Control.weights: what the workers do with their copy of the model before the next step
KEEP, RECEIVE, APPLY = 0, 1, 2  # keep it; take the leader's broadcast; apply the averaged gradient
# Control.stop
RUNNING, DONE, FAILED = 0, 1, 2
# Control.action: the repair step every worker takes together
# (ACT_REGROUP: a worker died; every survivor shrinks and the workers make their group again: psmodes/elastic.py)
ACT_NONE, ACT_SHRINK, ACT_SPAWN, ACT_REFILL, ACT_REGROUP = 0, 1, 2, 3, 4
# Announce.action: respawn the missing roles; or refill: the spares used up (--refill-spares) and the lost
# workers' replacements
ACTION_NONE, ACTION_SPAWN, ACTION_REFILL = 0, 1, 2

# stateless replay policies as they travel in a Hello
POLICY_CODES = {"paper": 1, "mean": 2, "sequential": 3, "staleness": 4, "local": 5}
POLICY_NAMES = {code: name for name, code in POLICY_CODES.items()}


class ProtocolError(RuntimeError):
    """A header that is not the message its receiver expects (a bug, never a peer's failure)."""


@dataclass(frozen=True)
class Message:
    """Base of every message: its fields, in order, are the header's slots 1..7."""

    KIND: ClassVar[int] = 0

    @property
    def payloads(self) -> int:
        """The payload arrays that follow the header on its tag (a dropped message's are received
        and thrown away with it)."""
        return 0

    def to_header(self) -> np.ndarray:
        values = [int(getattr(self, f.name)) for f in dataclasses.fields(self)]
        if len(values) >= GENERATION_SLOT:
            raise ProtocolError(f"{type(self).__name__} has {len(values)} fields; a header holds {GENERATION_SLOT - 1}")
        hdr = np.zeros(HEADER_LEN, dtype=np.int64)
        hdr[0] = self.KIND
        hdr[1:1 + len(values)] = values
        return hdr

    @classmethod
    def from_header(cls, hdr: np.ndarray):
        if int(hdr[0]) != cls.KIND:
            raise ProtocolError(f"expected {cls.__name__}, got {describe(hdr)}")
        values = {}
        for i, f in enumerate(dataclasses.fields(cls), start=1):
            raw = int(hdr[i])
            values[f.name] = bool(raw) if f.type in (bool, "bool") else raw
        return cls(**values)


@dataclass(frozen=True)
class Grad(Message):
    """A gradient computed on weights of ``version``; the payload follows (``mailbox_slot`` -1),
    or is in that slot of the leader's shared buffer that the PS mapped (:mod:`psmodes.mailbox`)."""
    KIND: ClassVar[int] = 1
    version: int
    worker: int = 0  # the sender's worker index (async: the PS answers each worker on its own)
    mailbox_slot: int = -1

    @property
    def payloads(self) -> int:
        return 1 if self.mailbox_slot < 0 else 0


@dataclass(frozen=True)
class Answer(Message):
    """The PS's answer to a gradient or a Hello: the version the PS holds now.

    ``weights``: the weights follow (sync without momentum answers a gradient with the version
    only, and every worker applies the averaged gradient itself). Async answers also give the
    gradient's ``staleness`` and the version it made (``applied_as``; -1: not applied).
    ``durable``: the newest version a copy outside the PS is known to hold (hybrid: the chain's
    tail acknowledged it; -1: none known), so the leader can drop the gradients before it.
    ``mailbox`` (the answer to a Hello): the PS mapped the mailbox the Hello offered."""
    KIND: ClassVar[int] = 2
    version: int
    stop: bool
    t0_ms: int
    weights: bool = True
    staleness: int = -1
    applied_as: int = -1
    durable: int = -1
    mailbox: bool = False

    @property
    def applied(self) -> bool:
        return self.applied_as >= 0

    @property
    def payloads(self) -> int:
        return int(self.weights)


@dataclass(frozen=True)
class Stop(Message):
    """The head's last message down the chain: the run is over at ``version``."""
    KIND: ClassVar[int] = 3
    version: int


@dataclass(frozen=True)
class Snapshot(Message):
    """Weights of ``version`` for the evaluator, taken at ``t_ms``; ``final``: score the whole test set."""
    KIND: ClassVar[int] = 4
    version: int
    final: bool
    t_ms: int
    t0_ms: int
    payloads: ClassVar[int] = 1


@dataclass(frozen=True)
class State(Message):
    """The head's packed state at ``version``, forwarded down the chain; ``ack``: the tail acknowledges."""
    KIND: ClassVar[int] = 5
    version: int
    ack: bool
    t0_ms: int
    payloads: ClassVar[int] = 1


@dataclass(frozen=True)
class Ack(Message):
    """The tail has ``version``."""
    KIND: ClassVar[int] = 6
    version: int


NOT_PENDING, PENDING, PENDING_APPLIED = 0, 1, 2  # Hello.pending


@dataclass(frozen=True)
class Hello(Message):
    """The first message to a PS, at start and after every repair (see :mod:`psmodes.server`).

    ``version``: the sender's weight version (-1: the run's first contact); ``pending``: the
    gradient whose answer never came, computed on ``version``, follows (:data:`PENDING`), and
    the workers already applied it themselves (:data:`PENDING_APPLIED`: the pipelined exchange,
    so they hold ``version + 1``); a stateless hand-over carries ``buffered`` updates under
    ``policy`` in ``vectors`` payloads, after the weights. ``mailbox_pid``, ``mailbox_fd``,
    ``mailbox_token``: the leader's gradient buffer a PS on its host can map (token 0: none)."""
    KIND: ClassVar[int] = 7
    version: int
    pending: int = NOT_PENDING
    buffered: int = 0
    t0_ms: int = 0
    policy: int = 0
    vectors: int = 0
    worker: int = 0
    mailbox_pid: int = 0
    mailbox_fd: int = 0
    mailbox_token: int = 0

    @property
    def payloads(self) -> int:
        """The pending gradient on its tag. A hand-over's payloads go on TAG_HANDOVER, and only to a PS
        of the Hello's own generation (Ready, or a take-over after a shrink that made a new world):
        no Hello with a hand-over is ever of an older generation than its receiver."""
        return 1 if self.pending else 0


@dataclass(frozen=True)
class Ready(Message):
    """A stateless replacement PS can take the hand-over; the workers trained on until now."""
    KIND: ClassVar[int] = 9


@dataclass(frozen=True)
class Control(Message):
    """The leader's word to the other workers after each step (sync data path)."""
    KIND: ClassVar[int] = 10
    weights: int = KEEP     # KEEP | RECEIVE | APPLY
    version: int = -1
    stop: int = RUNNING     # RUNNING | DONE | FAILED
    action: int = ACT_NONE  # ACT_NONE | ACT_SHRINK | ACT_SPAWN | ACT_REFILL | ACT_REGROUP
    compute: bool = False   # compute a gradient in the next step
    t0_ms: int = 0
    reuse: bool = False     # instead, send the gradient every worker holds (pipelined: computed before a
                            # reconnection, on the weights the new PS holds)


@dataclass(frozen=True)
class Announce(Message):
    """The leader's repair announcement to every survivor."""
    KIND: ClassVar[int] = 11
    action: int = ACTION_NONE


@dataclass(frozen=True)
class Retire(Message):
    """The run is over at ``version``: a spare that took no role leaves."""
    KIND: ClassVar[int] = 12
    version: int = 0


MESSAGES = {cls.KIND: cls for cls in (Grad, Answer, Stop, Snapshot, State, Ack, Hello, Ready, Control, Announce,
                                      Retire)}


def parse(hdr: np.ndarray, *expected: type[Message]) -> Message:
    """The message a header holds; ProtocolError when it is none of ``expected`` (if given)."""
    cls = MESSAGES.get(int(hdr[0]))
    if cls is None or (expected and cls not in expected):
        names = " or ".join(c.__name__ for c in expected) or "a message"
        raise ProtocolError(f"expected {names}, got {describe(hdr)}")
    return cls.from_header(hdr)


def generation_of(hdr: np.ndarray) -> int:
    """The world generation a header was stamped with."""
    return int(hdr[GENERATION_SLOT])


def describe(hdr: np.ndarray) -> str:
    cls = MESSAGES.get(int(hdr[0]))
    return f"{cls.__name__} {list(int(x) for x in hdr[1:])}" if cls else f"unknown message kind {int(hdr[0])}"

"""The wire protocol's message types (psmodes/messages.py): round trips, the fixed
header, and a receiver that gets the wrong message. No MPI job needed."""
import dataclasses

import numpy as np
import pytest

from psmodes import messages as m


def example(cls):
    """A message of ``cls`` with every field set to a distinct non-default value."""
    values = {}
    for i, f in enumerate(dataclasses.fields(cls), start=2):
        values[f.name] = True if f.type in (bool, "bool") else 10 * i + 1
    return cls(**values)


@pytest.mark.parametrize("cls", sorted(m.MESSAGES.values(), key=lambda c: c.KIND), ids=lambda c: c.__name__)
def test_every_message_round_trips_through_the_fixed_header(cls):
    msg = example(cls)
    hdr = msg.to_header()
    assert hdr.dtype == np.int64 and hdr.shape == (m.HEADER_LEN,)
    assert hdr[0] == cls.KIND
    assert m.parse(hdr) == msg
    assert cls.from_header(hdr) == msg


def test_kinds_are_unique_and_fields_fit_the_header():
    kinds = [cls.KIND for cls in m.MESSAGES.values()]
    assert len(set(kinds)) == len(kinds) and 0 not in kinds
    for cls in m.MESSAGES.values():
        assert len(dataclasses.fields(cls)) <= m.HEADER_LEN - 1, cls.__name__


def test_layouts_on_the_wire_are_what_both_sides_expect():
    # the sync answer's first slots are what they were before the message types
    assert list(m.Answer(7, True, 123, weights=False).to_header()[:5]) == [2, 7, 1, 123, 0]
    assert list(m.Grad(5, worker=3).to_header()) == [1, 5, 3, -1] + [0] * (m.HEADER_LEN - 4)  # -1: no mailbox slot
    assert list(m.Hello(-1).to_header()) == [7, -1] + [0] * (m.HEADER_LEN - 2)


def test_a_receiver_refuses_a_message_it_does_not_expect():
    with pytest.raises(m.ProtocolError, match="expected Hello or Grad, got Snapshot"):
        m.parse(m.Snapshot(1, False, 2, 3).to_header(), m.Hello, m.Grad)
    with pytest.raises(m.ProtocolError, match="unknown message kind 99"):
        m.parse(np.array([99, 0, 0, 0, 0, 0, 0, 0], dtype=np.int64))
    with pytest.raises(m.ProtocolError, match="expected Ack"):
        m.Ack.from_header(m.Stop(4).to_header())


def test_policy_codes_cover_every_replay_policy():
    from psmodes.config import REPLAY_POLICIES

    assert set(m.POLICY_CODES) == set(REPLAY_POLICIES)
    assert all(m.POLICY_NAMES[code] == name for name, code in m.POLICY_CODES.items())

"""The transaction buffer's pure state: maxReadPosition, aborted index, segments, trimming."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.broker.txnbuffer.buffer import TxnBufferState
from streamtx.contracts.states import Action
from streamtx.ledger import Position

L = 42


def p(e: int) -> Position:
    return Position(L, e)


def test_max_read_position_stops_before_oldest_ongoing() -> None:
    tb = TxnBufferState()
    assert tb.max_read_position() is None
    tb.on_message(p(1), None)
    assert tb.max_read_position() == p(1)
    tb.on_message(p(2), (1, 1))
    tb.on_message(p(3), None)
    tb.on_message(p(4), (1, 2))
    assert tb.max_read_position() == p(1)
    tb.on_marker(p(5), (1, 2), Action.COMMIT)
    assert tb.max_read_position() == p(1)  # txn 1:1 is older and still open
    tb.on_marker(p(6), (1, 1), Action.ABORT)
    assert tb.max_read_position() == p(6)
    assert tb.is_aborted((1, 1)) and not tb.is_aborted((1, 2))
    assert tb.ended_as((1, 2)) is not None and tb.ended_as((1, 2)).marker == p(5)  # type: ignore[union-attr]


def test_ended_txn_messages_do_not_reopen_it() -> None:
    tb = TxnBufferState()
    tb.on_message(p(1), (1, 1))
    tb.on_marker(p(2), (1, 1), Action.ABORT)
    tb.on_message(p(3), (1, 1))  # a zombie's late write
    assert not tb.ongoing and tb.max_read_position() == p(3)


def test_segments_seal_in_marker_order_and_trim() -> None:
    tb = TxnBufferState(segment_size=3)
    e = 0
    for i in range(10):
        e += 1
        tb.on_message(p(e), (0, i))
        e += 1
        tb.on_marker(p(e), (0, i), Action.ABORT)
    assert [len(s.ids) for s in tb.sealed] == [3, 3, 3] and len(tb.unsealed) == 1
    assert [t for t, _ in tb.sealed[0].ids] == [(0, 0), (0, 1), (0, 2)]
    # Trim past the markers of txns 0..3 (markers at entries 2, 4, 6, 8).
    assert tb.trim(p(9)) == 4
    assert next(iter(tb.aborted)) == (0, 4)
    assert [s.segment_id for s in tb.sealed] == [1, 2]  # segment 0 wholly trimmed
    assert tb.stats()["abortedTxnCount"] == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["msg", "txn", "commit", "abort"]), st.integers(0, 5)),
                max_size=60))
def test_model(ops: list[tuple[str, int]]) -> None:
    """Against a brute-force model: maxReadPosition and the aborted set."""
    tb = TxnBufferState(segment_size=2)
    firsts: dict[int, int] = {}
    ended: dict[int, str] = {}
    last = 0
    for op, t in ops:
        last += 1
        txn = (9, t)
        if op == "msg":
            tb.on_message(p(last), None)
        elif op == "txn":
            tb.on_message(p(last), txn)
            if t not in ended:
                firsts.setdefault(t, last)
        elif t in firsts and t not in ended:
            tb.on_marker(p(last), txn, Action(op))
            ended[t] = op
        else:
            tb.on_entry(p(last))
        open_firsts = [f for x, f in firsts.items() if x not in ended]
        expected = p(min(open_firsts) - 1) if open_firsts else p(last)
        assert tb.max_read_position() == expected
    assert set(tb.aborted) == {(9, t) for t, a in ended.items() if a == "abort"}
    markers = list(tb.aborted.values())
    assert markers == sorted(markers)
    flat = [x for s in tb.sealed for x in s.ids] + tb.unsealed
    assert [t for t, _ in flat] == list(tb.aborted)

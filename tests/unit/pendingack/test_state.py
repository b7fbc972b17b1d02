"""Conflict rules and the optimistic check, as pure logic."""

from __future__ import annotations

import pytest

from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError
from streamtx.ledger import Position
from streamtx.records.pendingack import MessageId, PendingAck, RecordKind, TxnMarker
from streamtx.records.pendingack_state import LogSlot, SubscriptionState, TxnPhase

A, B, C = TxnId(0, 1), TxnId(0, 2), TxnId(0, 3)


def m(text: str) -> MessageId:
    return MessageId.parse(text)


def ack(state: SubscriptionState, txn: TxnId, *ids: str, cumulative: bool = False) -> None:
    mids = [m(i) for i in ids]
    state.check_ack(txn, mids, cumulative)
    state.add_ack(txn, mids, cumulative)


def commit(state: SubscriptionState, txn: TxnId) -> None:
    state.check_prepare(txn)
    state.prepare(txn)
    state.begin_end(txn)
    state.finish_end(txn, RecordKind.COMMITTED)


# --- ack time ---------------------------------------------------------------


def test_same_message_held_by_another_txn_conflicts() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5")
    with pytest.raises(ConflictError, match="held by transaction 0:1"):
        ack(s, B, "1:5")
    ack(s, A, "1:5")  # the same transaction again is fine


def test_whole_entry_and_batch_index_overlap_but_two_indexes_do_not() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5:0")
    ack(s, B, "1:5:1")
    with pytest.raises(ConflictError):
        ack(s, C, "1:5")
    with pytest.raises(ConflictError):
        ack(s, C, "1:5:0")
    s2 = SubscriptionState()
    ack(s2, A, "1:5")
    with pytest.raises(ConflictError):
        ack(s2, B, "1:5:3")


def test_committed_message_is_already_acked() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5")
    commit(s, A)
    with pytest.raises(ConflictError, match="already acked"):
        ack(s, B, "1:5")


def test_abort_releases() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5")
    s.begin_end(A)
    s.finish_end(A, RecordKind.ABORTED)
    ack(s, B, "1:5")
    assert s.held_ids() == [m("1:5")]


def test_ended_or_ending_txn_takes_no_acks() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5")
    s.begin_end(A)
    with pytest.raises(ConflictError, match="not open"):
        ack(s, A, "1:6")
    s.finish_end(A, RecordKind.ABORTED)
    with pytest.raises(ConflictError, match="not open"):
        ack(s, A, "1:6")


def test_one_cumulative_holder_at_a_time() -> None:
    s = SubscriptionState()
    ack(s, A, "1:7", cumulative=True)
    with pytest.raises(ConflictError, match="cumulative"):
        ack(s, B, "1:9", cumulative=True)


def test_cumulative_below_committed_cumulative_is_already_acked() -> None:
    s = SubscriptionState()
    ack(s, A, "1:7", cumulative=True)
    commit(s, A)
    with pytest.raises(ConflictError, match="already acked"):
        ack(s, B, "1:6", cumulative=True)
    with pytest.raises(ConflictError, match="already acked"):
        ack(s, B, "1:3")
    ack(s, B, "1:8", cumulative=True)


def test_failed_write_rollback() -> None:
    s = SubscriptionState()
    ack(s, A, "1:1")
    before = s.txns[A]
    previous = type(before)(A, set(before.ids), before.cumulative)
    ack(s, A, "1:2", "1:1")
    s.remove_ack(A, [m("1:2"), m("1:1")], False, previous)
    assert s.held_ids() == [m("1:1")]
    ack(s, B, "1:2")


# --- the optimistic check (YDB) ---------------------------------------------


def test_overlap_with_committed_individual_is_refused_at_prepare() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5")
    ack(s, B, "1:7", cumulative=True)  # passes at ack time, as in Pulsar
    commit(s, A)
    with pytest.raises(ConflictError, match="committed"):
        s.check_prepare(B)


def test_two_overlapping_prepares_cannot_both_pass() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5")
    ack(s, B, "1:7", cumulative=True)
    s.check_prepare(A)
    s.prepare(A)
    with pytest.raises(ConflictError, match="prepared"):
        s.check_prepare(B)
    # ... and in the other order too
    s2 = SubscriptionState()
    ack(s2, A, "1:5")
    ack(s2, B, "1:7", cumulative=True)
    s2.check_prepare(B)
    s2.prepare(B)
    with pytest.raises(ConflictError, match="prepared"):
        s2.check_prepare(A)


def test_disjoint_transactions_both_commit() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5", "1:6")
    ack(s, B, "1:7:0")
    ack(s, C, "1:7:1")
    for t in (A, B, C):
        commit(s, t)
    assert s.txns == {}


def test_cumulative_range_starts_after_committed_cumulative() -> None:
    s = SubscriptionState()
    ack(s, A, "1:3")
    commit(s, A)
    ack(s, B, "1:4", cumulative=True)
    with pytest.raises(ConflictError):
        s.check_prepare(B)  # B's range (-, 1:4] holds A's 1:3
    s.begin_end(B)
    s.finish_end(B, RecordKind.ABORTED)
    s2 = SubscriptionState()
    ack(s2, A, "1:9", cumulative=True)
    commit(s2, A)
    ack(s2, B, "1:12", cumulative=True)
    s2.check_prepare(B)  # range (1:9, 1:12] is free


def test_replayed_overlap_is_caught_at_prepare() -> None:
    """Replay applies without checks; prepare still refuses the overlap."""
    s = SubscriptionState()
    slot = LogSlot(Position(9, 0), 0, 1)
    s.apply(PendingAck(A, (m("1:5"),)), slot)
    s.apply(PendingAck(B, (m("1:5"),)), slot)
    s.apply(TxnMarker(RecordKind.PREPARED, A), slot)
    assert s.txns[A].phase is TxnPhase.PREPARED
    with pytest.raises(ConflictError):
        s.check_prepare(B)
    garbage = s.apply(TxnMarker(RecordKind.COMMITTED, A), LogSlot(Position(9, 1), 0, 1))
    assert len(garbage) == 3  # the ack, PREPARED, and COMMITTED itself
    with pytest.raises(ConflictError):
        s.check_prepare(B)


def test_committed_memory_is_bounded() -> None:
    s = SubscriptionState(max_committed_ids=10)
    for i in range(30):
        t = TxnId(0, 100 + i)
        ack(s, t, f"1:{i}")
        commit(s, t)
    assert s.committed_id_count <= 10
    with pytest.raises(ConflictError):
        ack(s, A, "1:29")  # recent commits are remembered
    ack(s, A, "1:0")  # the oldest were forgotten (the broker's cursor has them)


def test_committed_cumulative_drops_covered_ids() -> None:
    s = SubscriptionState()
    for i in range(5):
        t = TxnId(0, 100 + i)
        ack(s, t, f"1:{i}")
        commit(s, t)
    ack(s, A, "1:10", cumulative=True)
    # A's range covers the five committed ids, so it is refused...
    with pytest.raises(ConflictError):
        s.check_prepare(A)
    s.begin_end(A)
    s.finish_end(A, RecordKind.ABORTED)
    ack(s, B, "1:6", cumulative=True)
    s.txns[B].phase = TxnPhase.PREPARED  # as if replayed: force the commit
    s.begin_end(B)
    s.finish_end(B, RecordKind.COMMITTED)
    assert s.committed_id_count == 0
    assert s.committed_cumulative == {1: m("1:6")}


def test_held_lists_open_ids_and_cumulative() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5:1", "1:2")
    ack(s, B, "1:9", cumulative=True)
    assert s.held_ids() == [m("1:2"), m("1:5:1"), m("1:9")]


# --- cumulative acks per partition (a partition is one ledger) ------------------------


def test_one_cumulative_ack_per_partition_in_one_request() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5", "2:9", cumulative=True)  # two partitions: one position each
    assert s.txns[A].cumulative == {1: m("1:5"), 2: m("2:9")}
    with pytest.raises(ConflictError, match="one message id per partition"):
        ack(s, B, "3:1", "3:2", cumulative=True)


def test_another_txns_cumulative_conflicts_on_its_partition_only() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5", cumulative=True)
    with pytest.raises(ConflictError, match="holds a cumulative ack on the partition"):
        ack(s, B, "1:9", cumulative=True)
    ack(s, B, "2:9", cumulative=True)  # another partition: free
    ack(s, A, "1:7", cumulative=True)  # the holder moves its own position on
    assert s.txns[A].cumulative == {1: m("1:7")}


def test_committed_cumulative_is_per_partition() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5", "2:3", cumulative=True)
    commit(s, A)
    assert s.committed_cumulative == {1: m("1:5"), 2: m("2:3")}
    with pytest.raises(ConflictError, match="already acked"):
        ack(s, B, "1:4", cumulative=True)  # below its partition's mark-delete
    with pytest.raises(ConflictError, match="already acked"):
        ack(s, B, "2:3")
    ack(s, B, "1:6", "2:4", cumulative=True)  # above it, on both
    ack(s, C, "3:1")  # an entry of ledger 3 is not covered by ledger 1's or 2's mark
    commit(s, B)
    commit(s, C)
    assert s.committed_cumulative == {1: m("1:6"), 2: m("2:4")}


def test_cumulative_range_of_one_partition_ignores_the_others() -> None:
    s = SubscriptionState()
    ack(s, A, "2:5")  # partition 2, below B's cumulative position on partition 1 numerically
    commit(s, A)
    ack(s, B, "1:9", cumulative=True)
    s.check_prepare(B)  # (1:0 .. 1:9] does not contain 2:5


def test_abort_releases_the_cumulative_and_commit_after_it_moves_the_mark() -> None:
    s = SubscriptionState()
    ack(s, A, "1:5", "2:5", cumulative=True)
    s.begin_end(A)
    s.finish_end(A, RecordKind.ABORTED)
    assert s.committed_cumulative == {}
    assert s.held_ids() == []
    ack(s, B, "1:5", cumulative=True)  # deliverable again: another txn takes the same range
    commit(s, B)
    assert s.committed_cumulative == {1: m("1:5")}


def test_replayed_cumulative_record_names_a_position_per_partition() -> None:
    s = SubscriptionState()
    slot = LogSlot(Position(7, 0), 0, 1)
    s.apply(PendingAck(A, (m("1:4"), m("2:8")), cumulative=True), slot)
    assert s.txns[A].cumulative == {1: m("1:4"), 2: m("2:8")}
    assert s.txns[A].message_ids() == [m("1:4"), m("2:8")]
    s.apply(TxnMarker(RecordKind.COMMITTED, A), slot)
    assert s.committed_cumulative == {1: m("1:4"), 2: m("2:8")}

"""The transaction table: what replaying records in order rebuilds."""

from __future__ import annotations

from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position
from streamtx.records.txnlog import (
    AddPartitions,
    AddSubscriptions,
    LogRef,
    NewTxn,
    Record,
    ReserveIds,
    StatusChange,
    Subscription,
)
from streamtx.records.txnstate import EndReason, TxnState
from streamtx.records.txntable import TxnTable

T1, T2 = TxnId.of(3, 1), TxnId.of(3, 2)
S = TxnState


def _apply_all(table: TxnTable, records: list[Record]) -> list[LogRef]:
    refs = [LogRef(Position(7, i), 0, 1) for i in range(len(records))]
    for ref, record in zip(refs, records, strict=True):
        table.apply(ref, record)
    return refs


def test_a_full_life() -> None:
    table = TxnTable(3)
    sub = Subscription("persistent://t/n/x", "s")
    refs = _apply_all(table, [
        NewTxn(T1, 5000, 100),
        AddPartitions(T1, ("p0", "p1")),
        AddSubscriptions(T1, (sub,)),
        AddPartitions(T1, ("p1", "p2")),
        StatusChange(T1, S.COMMITTING, EndReason.CLIENT, 150),
    ])
    meta = table.get(T1)
    assert meta is not None
    assert (meta.state, meta.opened_at_ms, meta.timeout_at_ms) == (S.COMMITTING, 100, 5100)
    assert list(meta.partitions) == ["p0", "p1", "p2"] and all(meta.partitions.values())
    assert list(meta.subscriptions) == [sub]
    assert table.active == 1 and not table.finished
    table.apply(LogRef(Position(7, 9), 0, 1), StatusChange(T1, S.COMMITTED, EndReason.CLIENT, 170))
    assert meta.state is S.COMMITTED and meta.ended_at_ms == 170
    assert table.active == 0 and list(table.finished) == [meta]
    assert meta.refs == [*refs, LogRef(Position(7, 9), 0, 1)]
    assert table.next_counter == 2


def test_the_first_decision_wins_and_repeats_are_harmless() -> None:
    table = TxnTable(3)
    _apply_all(table, [
        NewTxn(T1, 5000, 100),
        StatusChange(T1, S.COMMITTING, EndReason.CLIENT, 1),
        StatusChange(T1, S.COMMITTING, EndReason.CLIENT, 2),  # a retried append
        StatusChange(T1, S.ABORTING, EndReason.TIMEOUT, 3),  # contrary: ignored
        StatusChange(T1, S.ABORTED, EndReason.TIMEOUT, 4),  # invalid from COMMITTING: ignored
    ])
    meta = table.get(T1)
    assert meta is not None and meta.state is S.COMMITTING and meta.reason is EndReason.CLIENT
    assert len(meta.refs) == 5  # every record is deleted with the transaction


def test_timeout_aborts_end_in_timeout() -> None:
    table = TxnTable(3)
    _apply_all(table, [
        NewTxn(T1, 10, 100),
        StatusChange(T1, S.ABORTING, EndReason.TIMEOUT, 111),
        StatusChange(T1, S.TIMEOUT, EndReason.TIMEOUT, 112),
    ])
    meta = table.get(T1)
    assert meta is not None and meta.state is S.TIMEOUT and meta.reason is EndReason.TIMEOUT


def test_records_without_their_new_are_garbage() -> None:
    # A crash cut a deletion short: NEW was deleted, later records were not.
    table = TxnTable(3)
    refs = _apply_all(table, [
        AddPartitions(T2, ("p0",)),
        StatusChange(T2, S.COMMITTED, EndReason.CLIENT, 5),
    ])
    assert table.get(T2) is None
    assert table.garbage == refs
    assert table.next_counter == 3  # their ids still count


def test_ids_resume_above_the_highest_reservation() -> None:
    table = TxnTable(3)
    refs = _apply_all(table, [
        ReserveIds(100),
        NewTxn(T1, 5, 5),
        ReserveIds(200),
        ReserveIds(150),  # lower: superseded at once
        ReserveIds(200),  # equal: a copy moved forward, takes over
    ])
    assert table.reserved == 200 and table.next_counter == 200
    assert table.reserve_ref == refs[4]
    assert set(table.garbage) == {refs[0], refs[2], refs[3]}


def test_an_empty_table_starts_at_zero() -> None:
    table = TxnTable(0)
    assert table.max_counter == -1 and table.next_counter == 0
    table.apply(LogRef(Position(1, 1), 0, 1), NewTxn(TxnId.of(0, 0), 1, 1))
    assert table.max_counter == 0 and table.next_counter == 1


def test_oldest_ending_is_the_earliest_decision_still_in_its_state() -> None:
    """What ``streamtx_coordinator_ending_oldest_seconds`` (the stuck-COMMITTING alert) reads."""
    table = TxnTable(3)
    T3 = TxnId.of(3, 3)
    _apply_all(table, [
        NewTxn(T1, 5000, 100), NewTxn(T2, 5000, 100), NewTxn(T3, 5000, 100),
        StatusChange(T2, S.COMMITTING, EndReason.CLIENT, 150),
        StatusChange(T1, S.COMMITTING, EndReason.CLIENT, 160),
        StatusChange(T3, S.ABORTING, EndReason.CLIENT, 140),
    ])
    assert table.oldest_ending_ms(S.COMMITTING) == 150
    assert table.oldest_ending_ms(S.ABORTING) == 140
    table.apply(LogRef(Position(7, 9), 0, 1), StatusChange(T2, S.COMMITTED, EndReason.CLIENT, 170))
    assert table.oldest_ending_ms(S.COMMITTING) == 160
    table.apply(LogRef(Position(7, 10), 0, 1), StatusChange(T1, S.COMMITTED, EndReason.CLIENT, 180))
    assert table.oldest_ending_ms(S.COMMITTING) is None

"""A coordinator never adopts a compacted base that lacks what its table stands on (issue 22 items 4, 5).

A base is committed by hand (what the ``compact`` job commits) over a log of a
coordinator on the memory ledger; the coordinator recovers, runs its adoption
check, and recovers again: nothing is lost, and the base is not adopted (the
log is not trimmed). Finished transactions count while
``finished_retention_ms`` keeps them: a retried commit after a restart must not
get 404.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import pytest
from prometheus_client import CollectorRegistry

from streamtx.batching import compacted
from streamtx.batching.settings import BatchingSettings
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.coordinator import CoordinatorConfig, TransactionCoordinator
from streamtx.coordinator.log import TransactionLog
from streamtx.coordinator.metrics import CoordinatorMetrics
from streamtx.coordinator.participants_client import Participants
from streamtx.ledger import LedgerFactory, open_ledger_factory
from streamtx.records import txnlog as tc
from streamtx.records.txnstate import EndReason, TxnState
from tests.support.bases import commit_base

OPEN, DONE = TxnId.of(0, 1), TxnId.of(0, 2)


@pytest.fixture
async def ledgers() -> AsyncIterator[LedgerFactory]:
    created = open_ledger_factory("memory://")
    yield created
    await created.close()


async def _coordinator(ledgers: LedgerFactory) -> TransactionCoordinator:
    txlog = await TransactionLog.open(ledgers, cluster="c1", coordinator_id=0, batching=BatchingSettings())
    participants = Participants(None, None, backoff_s=0.01, max_backoff_s=0.01, timeout_s=1.0,
                                prepare_attempts=1)
    config = CoordinatorConfig(finished_retention_ms=60_000, housekeeping_interval_ms=3_600_000)
    metrics = CoordinatorMetrics("c1", 0, CollectorRegistry())
    coordinator = TransactionCoordinator(0, txlog, participants, metrics, config)
    await coordinator.recover()
    return coordinator


async def _write_log(ledgers: LedgerFactory) -> dict[TxnId, list[compacted.BaseRecord]]:
    """An open transaction and one committed a moment ago; each one's records as base records."""
    now = int(time.time() * 1000)
    txlog = await TransactionLog.open(ledgers, cluster="c1", coordinator_id=0, batching=BatchingSettings())
    records: dict[TxnId, list[compacted.BaseRecord]] = {}
    for key, plan in ((None, [tc.ReserveIds(100)]),
                      (OPEN, [tc.NewTxn(OPEN, 3_600_000, now)]),
                      (DONE, [tc.NewTxn(DONE, 3_600_000, now), tc.AddPartitions(DONE, ("p",)),
                              tc.StatusChange(DONE, TxnState.COMMITTING, EndReason.CLIENT, now),
                              tc.StatusChange(DONE, TxnState.COMMITTED, EndReason.CLIENT, now)])):
        for record in plan:
            ref = await txlog.append(record)
            records.setdefault(key, []).append((ref.position.entry_id, ref.batch_index, ref.batch_size,  # type: ignore[arg-type]
                                                tc.encode(record)))
    await txlog.close()
    return records


def _states(coordinator: TransactionCoordinator) -> dict[TxnId, TxnState]:
    return {t: m.state for t, m in coordinator.table.txns.items()}


async def _recover_twice(ledgers: LedgerFactory, base: Sequence[compacted.BaseRecord]) -> None:
    coordinator = await _coordinator(ledgers)
    try:
        info = await commit_base(ledgers, coordinator.log._ledger, base)
    finally:
        await coordinator.close()
    expected = {OPEN: TxnState.OPEN, DONE: TxnState.COMMITTED}
    for _ in range(2):  # a restart after the first recovery's adoption check too
        coordinator = await _coordinator(ledgers)
        try:
            assert _states(coordinator) == expected
            await coordinator.adopt_compaction()
            assert coordinator.log.adopted_base == -1
            first = coordinator.log._ledger.first_position()
            assert first is not None and first.entry_id < info.cut  # not trimmed: the log still holds it all
        finally:
            await coordinator.close()


async def test_a_base_lacking_an_open_transaction_is_not_adopted_and_nothing_is_lost(
        ledgers: LedgerFactory) -> None:
    records = await _write_log(ledgers)
    await _recover_twice(ledgers, [*records[None], *records[DONE]])


async def test_a_base_lacking_a_transaction_finished_within_retention_is_not_adopted(
        ledgers: LedgerFactory) -> None:
    records = await _write_log(ledgers)
    await _recover_twice(ledgers, [*records[None], *records[OPEN]])


async def test_a_base_holding_what_the_table_stands_on_is_adopted(ledgers: LedgerFactory) -> None:
    records = await _write_log(ledgers)
    coordinator = await _coordinator(ledgers)
    try:
        info = await commit_base(ledgers, coordinator.log._ledger, [r for rs in records.values() for r in rs])
    finally:
        await coordinator.close()
    for adopted in (0, 0):
        coordinator = await _coordinator(ledgers)
        try:
            assert coordinator.log.adopted_base == adopted  # adopted at recovery, then read from the base
            assert _states(coordinator) == {OPEN: TxnState.OPEN, DONE: TxnState.COMMITTED}
            first = coordinator.log._ledger.first_position()
            assert first is None or first.entry_id >= info.cut
        finally:
            await coordinator.close()

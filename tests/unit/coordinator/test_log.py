"""The transaction log on the memory ledger: batched and unbatched entries,
batch-index deletes, replay, trim."""

from __future__ import annotations

import asyncio

from streamtx.batching import BatchingSettings
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.log import TransactionLog
from streamtx.ledger.memory import MemoryLedgerFactory
from streamtx.records.txnlog import LogRef, NewTxn, Record, StatusChange
from streamtx.records.txnstate import EndReason, TxnState


async def _open(ledgers: MemoryLedgerFactory) -> TransactionLog:
    return await TransactionLog.open(ledgers, cluster="c", coordinator_id=1, batching=BatchingSettings())


async def _replay(log: TransactionLog) -> list[tuple[LogRef, Record]]:
    out: list[tuple[LogRef, Record]] = []
    count = await log.replay(lambda ref, rec: out.append((ref, rec)))
    assert count == len(out)
    return out


def _new(i: int) -> NewTxn:
    return NewTxn(TxnId.of(1, i), 1000, i)


async def test_mixed_log_replays_without_deleted_records() -> None:
    ledgers = MemoryLedgerFactory()
    log = await _open(ledgers)
    batched = await asyncio.gather(*(log.append(_new(i)) for i in range(20)))
    assert max(r.batch_size for r in batched) > 1  # concurrent appends share entries
    log.set_batching(False)
    assert not log.batching_enabled
    unbatched = [await log.append(_new(i)) for i in range(20, 25)]
    assert all(r.batch_size == 1 for r in unbatched)
    log.set_batching(True)
    done = StatusChange(TxnId.of(1, 0), TxnState.ABORTING, EndReason.CLIENT, 9)
    last = await log.append(done)

    # Delete every third record, at batch-index level inside batched entries.
    doomed = [*batched, *unbatched][::3]
    await log.delete(doomed)
    await log.close()

    log = await _open(ledgers)
    replayed = await _replay(log)
    expected = [r for r in [*batched, *unbatched] if r not in doomed] + [last]
    assert [ref for ref, _ in replayed] == expected
    counters = [rec.txn.counter for _, rec in replayed if isinstance(rec, NewTxn)]
    assert counters == [i for i in range(25) if i % 3]
    assert replayed[-1][1] == done
    await log.close()
    await ledgers.close()


async def test_fully_deleted_entries_are_trimmed() -> None:
    ledgers = MemoryLedgerFactory()
    log = await _open(ledgers)
    first = await asyncio.gather(*(log.append(_new(i)) for i in range(8)))
    keep = await log.append(_new(100))
    before = sum(s.entries for s in log.stats())
    await log.delete(first)
    await log.trim()
    assert sum(s.entries for s in log.stats()) < before
    assert log.first_live() == keep.position
    assert [ref for ref, _ in await _replay(log)] == [keep]
    await log.close()
    await ledgers.close()


async def test_live_records_of_an_entry() -> None:
    ledgers = MemoryLedgerFactory()
    log = await _open(ledgers)
    refs = await asyncio.gather(*(log.append(_new(i)) for i in range(6)))
    by_entry = [r for r in refs if r.position == refs[0].position]
    assert len(by_entry) > 2
    assert log.live_records(by_entry[0]) == len(by_entry)
    await log.delete(by_entry[:2])
    assert log.live_records(by_entry[-1]) == len(by_entry) - 2
    await log.delete(by_entry[2:])
    assert log.live_records(by_entry[0]) == 0
    await log.close()
    await ledgers.close()

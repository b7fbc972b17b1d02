"""A pending-ack store never adopts a compacted base that lacks the acks its state holds (issue 22 item 5).

A base is committed by hand (what the ``compact`` job commits) that holds
nothing; the store recovers, runs its adoption check, and recovers again: the
acks are still held, and the log is not trimmed.
"""

from __future__ import annotations

from streamtx.batching.replay import replay_entries
from streamtx.ledger import LedgerFactory
from tests.support.bases import commit_base
from tests.unit.pendingack.test_store import A, B, RecordingBroker, ids, ledgers, open_store_

__all__ = ["ledgers"]  # the fixture


async def test_a_base_lacking_held_acks_is_not_adopted_and_nothing_is_lost(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.ack(A, ids("1:1", "1:2"), False)
    await store.ack(B, ids("1:3"), False)
    await store.prepare(A)
    info = await commit_base(ledgers, store.ledger)  # holds nothing
    await store.close()
    for _ in range(2):  # a restart after the first recovery's adoption check too
        again = await open_store_(ledgers, broker)
        try:
            assert again.held() == ["1:1", "1:2", "1:3"]
            assert again.state.txns[A].phase.value == "PREPARED"
            await again.adopt_compaction()
            assert again.adopted_base == -1
            first = again.ledger.first_position()
            assert first is not None and first.entry_id < info.cut  # not trimmed
        finally:
            await again.close()


async def test_a_base_holding_the_held_acks_is_adopted(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.ack(A, ids("1:1"), False)
    records = [(s.position.entry_id, s.batch_index, s.batch_size, raw)
               for s, raw in zip(store.state.txns[A].slots, [await _raw(store, A)], strict=True)]
    info = await commit_base(ledgers, store.ledger, records)
    await store.close()
    for _ in range(2):
        again = await open_store_(ledgers, broker)
        try:
            assert again.held() == ["1:1"] and again.adopted_base == 0
            first = again.ledger.first_position()
            assert first is None or first.entry_id >= info.cut
        finally:
            await again.close()


async def _raw(store, txn) -> bytes:  # type: ignore[no-untyped-def]
    """The record bytes of ``txn``'s one PENDING_ACK slot, as replay reads them from the log."""
    (slot,) = store.state.txns[txn].slots
    found: list[bytes] = []
    place = (slot.position, slot.batch_index, slot.batch_size)
    replay_entries(await store.ledger.read(None, 100), None,
                   lambda p, i, n, raw: found.append(raw) if (p, i, n) == place else None)
    (raw,) = found
    return raw

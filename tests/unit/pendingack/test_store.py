"""One subscription's store over the memory ledger: ack, prepare, end, replay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streamtx.contracts import Action, TxnId
from streamtx.errors import ConflictError, UnavailableError
from streamtx.ledger import LedgerFactory, open_ledger_factory
from streamtx.pendingack.broker_client import BrokerNotifier
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.store import PendingAckStore
from streamtx.pendingack.writer import writer_factory
from streamtx.records.pendingack import MessageId

TOPIC, SUB = "persistent://t/n/x-partition-0", "sub"
A, B = TxnId(0, 1), TxnId(0, 2)


class RecordingBroker(BrokerNotifier):
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = 0

    async def end(
        self, topic: str, subscription: str, txn: TxnId, action: Action, message_ids: list[str],
        *, cumulative_message_ids: list[str] | None = None,
    ) -> None:
        if self.fail:
            self.fail -= 1
            raise UnavailableError("broker down")
        self.calls.append({"txn_id": str(txn), "action": action.value, "message_ids": message_ids})


def ids(*texts: str) -> list[MessageId]:
    return [MessageId.parse(t) for t in texts]


@pytest.fixture
async def ledgers() -> AsyncIterator[LedgerFactory]:
    created = open_ledger_factory("memory://")
    yield created
    await created.close()


async def open_store_(ledgers: LedgerFactory, broker: BrokerNotifier, **kw: Any) -> PendingAckStore:
    settings = PendingAckSettings()  # type: ignore[call-arg]
    return await PendingAckStore.open(
        ledgers, TOPIC, SUB, writer_factory=writer_factory(settings, CollectorRegistry()),
        notifier=broker, batch_enabled=kw.get("batch", True), max_committed_ids=1000, max_ended_txns=1000,
        trim_every_ends=kw.get("trim_every_ends", 1),
    )


@pytest.mark.parametrize("batch", [True, False])
async def test_ack_end_and_replay(ledgers: LedgerFactory, batch: bool) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker, batch=batch)
    await store.ack(A, ids("1:1", "1:2:0"), False)
    await store.ack(B, ids("1:3"), False)
    with pytest.raises(ConflictError):
        await store.ack(B, ids("1:2"), False)
    await store.prepare(A)
    await store.end(A, commit=True)
    assert broker.calls == [{"txn_id": "0:1", "action": "commit", "message_ids": ["1:1", "1:2:0"]}]
    await store.end(A, commit=True)  # idempotent
    await store.end(TxnId(7, 7), commit=False)  # unknown: no-op
    assert len(broker.calls) == 1
    assert store.held() == ["1:3"]
    await store.close()

    # A new store replays: B still holds 1:3; A's records were deleted.
    again = await open_store_(ledgers, broker, batch=not batch)
    assert again.held() == ["1:3"]
    assert again.replay is not None and again.replay.records == 1
    with pytest.raises(ConflictError):
        await again.ack(A, ids("1:3"), False)
    await again.end(B, commit=False)
    assert broker.calls[-1]["action"] == "abort"
    await again.ack(A, ids("1:3"), False)
    await again.close()


async def test_end_fails_while_broker_down_then_retry_succeeds(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.ack(A, ids("1:1"), False)
    broker.fail = 1
    with pytest.raises(UnavailableError):
        await store.end(A, commit=True)
    assert store.held() == ["1:1"]
    with pytest.raises(ConflictError):  # ending: no more acks
        await store.ack(A, ids("1:9"), False)
    await store.end(A, commit=True)
    assert store.held() == []
    await store.close()


async def test_concurrent_acks_of_one_message_only_one_wins(ledgers: LedgerFactory) -> None:
    store = await open_store_(ledgers, RecordingBroker())
    results = await asyncio.gather(
        *(store.ack(TxnId(0, 10 + i), ids("1:1"), False) for i in range(10)), return_exceptions=True
    )
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, ConflictError) for r in results if r is not None)
    # Acks of different messages written at once share batched entries.
    await asyncio.gather(*(store.ack(TxnId(1, i), ids(f"2:{i}"), False) for i in range(50)))
    assert {s.position for t in store.state.txns.values() for s in t.slots if s.batch_size > 1}
    await store.close()


async def test_crash_between_broker_and_final_record_replays_open(ledgers: LedgerFactory) -> None:
    """The broker was told but COMMITTED never landed: replay keeps the txn, a retried end finishes."""
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.ack(A, ids("1:1"), False)
    await store.prepare(A)
    await store.close()
    again = await open_store_(ledgers, broker)
    assert again.held() == ["1:1"]
    assert again.state.txns[A].phase.value == "PREPARED"
    await again.end(A, commit=True)
    assert [c["action"] for c in broker.calls] == ["commit"]
    await again.close()


async def test_a_fenced_store_answers_unavailable(ledgers: LedgerFactory) -> None:
    old = await open_store_(ledgers, RecordingBroker())
    await old.ack(A, ids("1:1"), False)
    new = await open_store_(ledgers, RecordingBroker())  # a second process took the log over
    assert new.held() == ["1:1"]
    with pytest.raises(UnavailableError, match="owned by another store"):
        await old.ack(B, ids("1:2"), False)
    assert old.held() == ["1:1"]  # the failed ack was undone
    await new.close()


async def test_replay_reads_batched_and_unbatched_entries_and_skips_deleted(ledgers: LedgerFactory) -> None:
    """A log written with batching on and off replays alike; batch-index deletes are honoured."""
    from streamtx.batching.codec import encode_batch
    from streamtx.cursor import Cursor
    from streamtx.pendingack.store import cursor_name, log_name
    from streamtx.records.pendingack import PendingAck, encode

    C = TxnId(0, 3)
    ledger = await ledgers.open(log_name(TOPIC, SUB))
    batched = await ledger.append(encode_batch([
        encode(PendingAck(A, tuple(ids("1:1")))),
        encode(PendingAck(B, tuple(ids("1:2")))),
        encode(PendingAck(C, tuple(ids("1:3")))),
    ]))
    await ledger.append(encode(PendingAck(A, tuple(ids("1:4")))))  # unbatched
    cursor = await Cursor.open(ledgers, ledger, cursor_name)
    await cursor.delete_batch_index(batched, 1, 3)  # B's record was deleted (B ended earlier)
    await cursor.close()
    await ledger.close()

    store = await open_store_(ledgers, RecordingBroker())
    assert store.held() == ["1:1", "1:3", "1:4"]
    assert store.replay is not None and store.replay.skipped_deleted == 1
    assert [(s.batch_index, s.batch_size) for s in store.state.txns[A].slots] == [(0, 3), (0, 1)]
    await store.end(A, commit=True)
    await store.end(C, commit=False)
    await store.close()
    again = await open_store_(ledgers, RecordingBroker())
    assert again.held() == []
    assert again.replay is not None and again.replay.records == 0
    await again.close()


async def test_finished_records_are_deleted_and_the_log_trimmed(ledgers: LedgerFactory) -> None:
    store = await open_store_(ledgers, RecordingBroker(), trim_every_ends=5)
    for round_ in range(4):
        txns = [TxnId(round_, i) for i in range(10)]
        await asyncio.gather(*(store.ack(t, ids(f"1:{round_ * 100 + t.least}"), False) for t in txns))
        await asyncio.gather(*(store.end(t, commit=bool(t.least % 2)) for t in txns))
    await store.cleaned_up()  # the deletes run after the ends answer
    assert store.cursor.stats().individually_deleted_ranges == 0
    assert store.ledger.first_position() is None  # every entry finished, and trimmed
    await store.close()

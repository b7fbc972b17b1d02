"""The stores of one process: every name of a partition reaches one state (issue 32 defect 1),
a deleted subscription's state goes with it (defect 10), and logs kept under a partition's
name before are taken into the topic's store."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from streamtx.contracts import TxnId
from streamtx.errors import ConflictError
from streamtx.ledger import LedgerFactory
from streamtx.names import Partition, TopicSubscription, partition_name, split_partition
from streamtx.pendingack.registry import PendingAckStores
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.store import PendingAckStore, log_name
from streamtx.pendingack.writer import writer_factory
from tests.unit.pendingack.test_store import RecordingBroker, ids, ledgers

__all__ = ["ledgers"]  # the fixture, used by name

TOPIC, SUB = "persistent://t/n/c", "s"
P0 = partition_name(TOPIC, 0)
T1, T2, T3 = TxnId(0, 1), TxnId(0, 2), TxnId(0, 3)


def stores_over(ledgers: LedgerFactory, broker: RecordingBroker) -> PendingAckStores:
    settings = PendingAckSettings()  # type: ignore[call-arg]
    return PendingAckStores(ledgers, settings, notifier=broker,
                            writer_factory=writer_factory(settings, CollectorRegistry()))


async def ack(stores: PendingAckStores, name: str, txn: TxnId, texts: list[str], cumulative: bool) -> None:
    async with stores.use(name, SUB, create=True) as store:
        assert store is not None
        await store.ack(txn, ids(*texts), cumulative)


def test_partition_names_are_formatted_and_read_in_one_place() -> None:
    assert str(Partition(TOPIC, 3)) == P0.replace("-0", "-3")
    assert Partition.parse(P0) == Partition(TOPIC, 0)
    assert Partition.parse(TOPIC) is None
    assert split_partition(P0) == (TOPIC, 0)
    assert TopicSubscription.of(P0, SUB) == TopicSubscription.of(TOPIC, SUB) == (TOPIC, SUB)


async def test_acks_on_the_topics_and_the_partitions_name_meet_one_check(ledgers: LedgerFactory) -> None:
    # Defect 1: T1 acks 7:5 cumulatively on c, T2 7:10 on c-partition-0 (7 is partition 0's
    # ledger): the same messages, so the second is refused as with one name.
    stores = stores_over(ledgers, RecordingBroker())
    try:
        await ack(stores, TOPIC, T1, ["7:5"], True)
        with pytest.raises(ConflictError):
            await ack(stores, P0, T2, ["7:10"], True)
        await ack(stores, P0, T3, ["7:3"], False)  # individual, inside T1's open range: valid now
        async with stores.use(P0, SUB) as store:  # ... but its prepare after T1's commit is not
            assert store is not None
            await store.prepare(T1)
            await store.end(T1, commit=True)
            with pytest.raises(ConflictError):
                await store.prepare(T3)
        assert [s.topic for s in stores.opened()] == [TOPIC]
    finally:
        await stores.close()


async def test_an_end_named_by_the_partition_is_remembered_for_the_topic(ledgers: LedgerFactory) -> None:
    stores = stores_over(ledgers, RecordingBroker())
    try:
        stores.remember_end(P0, SUB, T1, commit=False)  # nothing logged yet: no store
        with pytest.raises(ConflictError):
            await ack(stores, TOPIC, T1, ["7:1"], False)
    finally:
        await stores.close()


async def test_a_deleted_subscription_leaves_no_commits_behind(ledgers: LedgerFactory) -> None:
    # Defect 10: after the delete a subscription of the same name acks the same ids afresh.
    stores = stores_over(ledgers, RecordingBroker())
    try:
        await ack(stores, TOPIC, T1, ["7:5"], True)
        with pytest.raises(ConflictError, match="open transactions 0:1"):
            await stores.delete(TOPIC, SUB, partitions=1)  # T1 still holds acks here
        async with stores.use(TOPIC, SUB) as store:
            assert store is not None
            await store.end(T1, commit=True)
        assert await stores.delete(TOPIC, SUB, partitions=1)
        assert not await ledgers.exists(log_name(TOPIC, SUB))
        await ack(stores, P0, T2, ["7:5"], True)  # was 409 "already acked" for good
        assert not await stores.delete(P0, "never")
    finally:
        await stores.close()


async def test_a_log_kept_under_a_partitions_name_is_taken_into_the_topics(ledgers: LedgerFactory) -> None:
    # Before names were canonical, acks on c-partition-0 had a log of their own: its open
    # transactions (one prepared) replay into the topic's state, and that log is deleted.
    settings = PendingAckSettings()  # type: ignore[call-arg]
    old = await PendingAckStore.open(
        ledgers, P0, SUB, writer_factory=writer_factory(settings, CollectorRegistry()),
        notifier=RecordingBroker(), batch_enabled=True, max_committed_ids=1000, max_ended_txns=1000,
        trim_every_ends=1)
    await old.ack(T1, ids("7:5"), True)
    await old.ack(T2, ids("7:8:1"), False)
    await old.prepare(T2)
    await old.close()
    stores = stores_over(ledgers, RecordingBroker())
    try:
        await ack(stores, TOPIC, T3, ["7:9"], False)
        async with stores.use(P0, SUB) as store:  # the first request naming the partition
            assert store is not None and store.topic == TOPIC
            assert set(store.state.txns) == {T1, T2, T3}
        assert not await ledgers.exists(log_name(P0, SUB))
        with pytest.raises(ConflictError):
            await ack(stores, TOPIC, T3, ["7:7"], True)  # T1 holds partition 0's cumulative ack
    finally:
        await stores.close()
    again = stores_over(ledgers, RecordingBroker())  # and it was logged under the topic's name
    try:
        async with again.use(TOPIC, SUB) as store:
            assert store is not None
            assert set(store.state.txns) == {T1, T2, T3}
            assert store.state.txns[T2].phase.value == "PREPARED"
    finally:
        await again.close()

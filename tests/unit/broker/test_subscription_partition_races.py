"""A subscription opened on a broker replica while one of the topic's partitions joins or leaves it.

Issue 21 item 5: ``_open_subscription`` listed the partitions open here, then awaited
one cursor open per partition before the subscription joined the topic; a partition
taken over meanwhile joined only the subscriptions registered at that moment, so the
new one missed it for good (and a partition handed over meanwhile left a dispatch on
a closed partition, or a KeyError). The interleavings are forced with events on the
awaits involved (a partition's open, a cursor's open), never with sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from streamtx.broker.partition import Partition
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker, Local, partition_item
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.cursor import Cursor
from streamtx.errors import NotOwnerError
from streamtx.ledger import open_ledger_factory

T = "persistent://t/n/racing"
SUB = "late"


class SpyLock(asyncio.Lock):
    """A lock that says when someone had to wait for it."""

    def __init__(self) -> None:
        super().__init__()
        self.contended = asyncio.Event()

    async def acquire(self) -> bool:
        if self.locked():
            self.contended.set()
        return await super().acquire()


@pytest.fixture
async def replica() -> AsyncIterator[Broker]:
    settings = BrokerSettings(ledger_url="memory://")  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0), replicas=True)
    await b.start()
    await b.create_topic(T, 2)
    yield b
    await b.close()


async def first_of(*waits: Any) -> None:
    """Until the first of these tasks or coroutines is done (the others are cancelled if not tasks)."""
    futures = [w if isinstance(w, asyncio.Future) else asyncio.ensure_future(w) for w in waits]
    _, pending = await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    for f, w in zip(futures, waits, strict=True):
        if f in pending and f is not w:
            f.cancel()


def gate_partition_open(monkeypatch: pytest.MonkeyPatch, item: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Partition ``item``'s open waits for the second event; the first says it began."""
    opening, go = asyncio.Event(), asyncio.Event()
    open_partition = Partition.open

    async def gated(cls: type[Partition], ledgers: Any, name: str, *a: Any, **k: Any) -> Partition:
        if name == item:
            opening.set()
            await go.wait()
        return await open_partition(ledgers, name, *a, **k)

    monkeypatch.setattr(Partition, "open", classmethod(gated))
    return opening, go


def gate_cursor_open(monkeypatch: pytest.MonkeyPatch, until: Any) -> asyncio.Event:
    """Cursor opens of the subscription SUB await ``until()`` first; the event says one began."""
    cursor_opening = asyncio.Event()
    open_cursor = Cursor.open

    async def gated(cls: type[Cursor], ledgers: Any, ledger: Any, name: str, **k: Any) -> Cursor:
        if name == SUB:
            cursor_opening.set()
            await until()
        return await open_cursor(ledgers, ledger, name, **k)

    monkeypatch.setattr(Cursor, "open", classmethod(gated))
    return cursor_opening


async def test_a_subscription_created_while_a_partition_is_taken_over_opens_on_it_too(
        replica: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    await replica.acquire(partition_item(T, 0))
    lock = replica._topic_locks[T] = SpyLock()
    opening, go = gate_partition_open(monkeypatch, partition_item(T, 1))
    # The take-over lands while the subscription's cursors open (before the fix).
    cursor_opening = gate_cursor_open(monkeypatch, lambda: acquiring)
    acquiring = asyncio.create_task(replica.acquire(partition_item(T, 1)))
    await opening.wait()  # partition 1 is opening here (its ledger recovering)
    creating = asyncio.create_task(replica.create_subscription(T, SUB, SubscriptionType.SHARED, "earliest"))
    # The creation waits: for the topic (fixed) or in its first cursor open (before the fix).
    await first_of(lock.contended.wait(), cursor_opening.wait())
    go.set()
    await asyncio.wait_for(asyncio.gather(acquiring, creating), 10)
    sub = replica.topics[T].subscriptions[SUB]
    assert [p.index for p in sub.parts] == [0, 1]
    assert sub.part(1).partition is replica.topics[T].owned[1]


async def test_a_subscription_created_while_a_partition_is_handed_over_keeps_none_of_it(
        replica: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in (0, 1):
        await replica.acquire(partition_item(T, i))
    lock = replica._topic_locks[T] = SpyLock()
    go = asyncio.Event()
    cursor_opening = gate_cursor_open(monkeypatch, go.wait)
    creating = asyncio.create_task(replica.create_subscription(T, SUB, SubscriptionType.SHARED, "earliest"))
    await cursor_opening.wait()  # its cursor on partition 0 is opening
    releasing = asyncio.create_task(replica.release(partition_item(T, 1), lost=False))
    await first_of(releasing, lock.contended.wait())
    go.set()
    await asyncio.wait_for(asyncio.gather(creating, releasing), 10)
    sub = replica.topics[T].subscriptions[SUB]
    assert [p.index for p in sub.parts] == [0]
    assert sub.part(0).partition is replica.topics[T].owned[0]


async def test_a_subscription_another_replica_recorded_opens_on_a_partition_taken_meanwhile(
        replica: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21 item 15 (the broker's catch-up outside the topic lock): the ownership tick's
    catch-up opens a subscription another replica recorded, on the partitions open here, while
    a partition is being taken over: before, the same miss as a creation here."""
    settings = BrokerSettings(ledger_url="memory://")  # type: ignore[call-arg]
    other = Broker(replica.ledgers, settings, PendingAckClient(None, 1.0), replicas=True)
    await other.start()
    try:
        await replica.acquire(partition_item(T, 0))
        lock = replica._topic_locks[T] = SpyLock()
        opening, go = gate_partition_open(monkeypatch, partition_item(T, 1))
        cursor_opening = gate_cursor_open(monkeypatch, lambda: acquiring)
        acquiring = asyncio.create_task(replica.acquire(partition_item(T, 1)))
        await opening.wait()
        # The other replica (owning no partition) records the subscription meanwhile.
        assert await other.create_subscription(T, SUB, SubscriptionType.SHARED, "earliest") is None
        catching_up = asyncio.create_task(replica.catch_up())  # this replica's next tick
        await first_of(lock.contended.wait(), cursor_opening.wait())
        go.set()
        await asyncio.wait_for(asyncio.gather(acquiring, catching_up), 10)
        assert [p.index for p in replica.topics[T].subscriptions[SUB].parts] == [0, 1]
    finally:
        await other.close()


async def test_a_partition_taken_over_is_served_here_only_once_every_subscription_has_it(
        replica: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition joined the topic (requests resolved it here) before the subscriptions' cursors
    on it opened: a fanned-out transaction end meanwhile took its ids for another owner's and
    dropped them, the pending-ack store took the end as done, and the acked messages came back
    (seen in test_broker_replicas' kill test: a backlog of 42 where 36 were left)."""
    await replica.acquire(partition_item(T, 0))
    await replica.create_subscription(T, SUB, SubscriptionType.SHARED, "earliest")
    go = asyncio.Event()
    cursor_opening = gate_cursor_open(monkeypatch, go.wait)
    acquiring = asyncio.create_task(replica.acquire(partition_item(T, 1)))
    try:
        await cursor_opening.wait()  # SUB's cursor on partition 1 is opening
        with pytest.raises(NotOwnerError):  # moving: a 503 its callers retry, not served without SUB
            replica.resolve(f"{T}-partition-1")
        assert sorted(replica.topics[T].owned) == [0]
    finally:
        go.set()
        await asyncio.wait_for(acquiring, 10)
    assert isinstance(replica.resolve(f"{T}-partition-1"), Local)
    assert [p.index for p in replica.topics[T].subscriptions[SUB].parts] == [0, 1]

"""An Exclusive consumer's long poll longer than ``exclusive_idle_ms`` is no silence (issue 21 item 15).

Before: a consumer counted as idle from the start of its fetch, so with
``exclusive_idle_ms < max_wait_ms`` a second consumer was admitted while the first one's
long poll still ran, and both were handed messages at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.broker.topic import Outgoing
from streamtx.errors import ConflictError
from streamtx.ledger import open_ledger_factory
from streamtx.records.partition import Message
from tests.support.suite import eventually

T = "persistent://t/n/excl"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    settings = BrokerSettings(ledger_url="memory://", exclusive_idle_ms=50)  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    await b.create_topic(T, 1)
    yield b
    await b.close()


async def polling(sub: Subscription, consumer: str) -> None:
    async def waiting() -> bool:
        return (info := sub.consumers.get(consumer)) is not None and info.fetching > 0

    await eventually(waiting, timeout_s=5, what=f"{consumer}'s poll")


async def test_a_second_consumer_is_refused_while_the_first_ones_long_poll_runs(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "s", SubscriptionType.EXCLUSIVE, "earliest")
    assert sub is not None
    x = asyncio.create_task(sub.fetch("x", 10, 30_000))
    await polling(sub, "x")
    sub.consumers["x"].last_seen -= 10  # x's poll began 10 s ago: far past exclusive_idle_ms
    with pytest.raises(ConflictError, match="has consumer x"):
        await sub.fetch("y", 10, 0)
    ids = await broker.topic(T).produce([Outgoing(Message(b"m", request_index=0), 0)], None, None)
    assert [m["message_id"] for m in await asyncio.wait_for(x, 5)] == ids


async def test_a_closed_consumers_long_poll_ends_when_another_takes_the_subscription(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "s", SubscriptionType.EXCLUSIVE, "earliest")
    assert sub is not None
    x = asyncio.create_task(sub.fetch("x", 10, 30_000))
    await polling(sub, "x")
    assert sub.close_consumer("x")
    assert await sub.fetch("y", 10, 0) == []  # y holds it now
    await broker.topic(T).produce([Outgoing(Message(b"m", request_index=0), 0)], None, None)
    assert await asyncio.wait_for(x, 5) == []  # x's poll hands nothing out any more
    assert len(await sub.fetch("y", 10, 0)) == 1

"""Consumer names are forgotten once their consumer goes away, and have a length limit (issue 21 item 9).

Before: every name that ever fetched stayed in a Shared or Exclusive subscription's
``consumers`` for good (3,000 names held 24 MB), and a name could be any length.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.routes.subscriptions import FetchQuery
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.errors import TooManyRequestsError
from streamtx.ledger import open_ledger_factory

T = "persistent://t/n/names"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    settings = BrokerSettings(ledger_url="memory://", consumer_idle_ms=1000, exclusive_idle_ms=1000,  # type: ignore[call-arg]
                              max_consumers_per_subscription=50)
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    await b.create_topic(T, 2)
    yield b
    await b.close()


def age(sub: Subscription, seconds: float) -> None:
    """Every consumer last fetched ``seconds`` earlier than it did, and no sweep ran since."""
    for info in sub.consumers.values():
        info.last_seen -= seconds
    if hasattr(sub, "_next_sweep"):  # the sweep's own clock, once a second
        sub._next_sweep -= seconds


@pytest.mark.parametrize("sub_type", [SubscriptionType.SHARED, SubscriptionType.EXCLUSIVE])
async def test_names_gone_idle_are_forgotten(broker: Broker, sub_type: SubscriptionType) -> None:
    sub = await broker.create_subscription(T, "s", sub_type, "earliest")
    assert sub is not None
    for i in range(20):
        await sub.fetch(f"c{i}", 10, 0)
        age(sub, 2.0)  # each gone before the next comes (Exclusive admits one at a time)
    await sub.fetch("last", 10, 0)
    assert set(sub.consumers) == {"last"}


async def test_a_name_still_fetching_or_recent_is_kept(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "s", SubscriptionType.SHARED, "earliest")
    assert sub is not None
    polling = asyncio.create_task(sub.fetch("poller", 10, 30_000))
    await asyncio.sleep(0.05)
    await sub.fetch("recent", 10, 0)
    age(sub, 5.0)  # poller's poll began long ago but still runs
    await sub.fetch("new", 10, 0)
    assert set(sub.consumers) == {"poller", "new"}
    polling.cancel()


async def test_a_subscription_full_of_live_consumers_refuses_another_with_429(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "s", SubscriptionType.SHARED, "earliest")
    assert sub is not None
    for i in range(50):
        await sub.fetch(f"c{i}", 10, 0)
    with pytest.raises(TooManyRequestsError):
        await sub.fetch("one-too-many", 10, 0)
    await sub.fetch("c7", 10, 0)  # a known one still fetches
    age(sub, 2.0)
    await sub.fetch("one-too-many", 10, 0)  # the idle ones made room at once
    assert len(sub.consumers) == 1


def test_a_consumer_name_is_at_most_400_characters() -> None:
    FetchQuery.model_validate({"consumer": "c" * 400})
    with pytest.raises(ValidationError):
        FetchQuery.model_validate({"consumer": "c" * 401})

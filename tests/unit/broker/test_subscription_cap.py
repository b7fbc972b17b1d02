"""A topic has at most ``max_subscriptions_per_topic`` subscriptions; one more is a 409 (issue 21 item 8)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, NotFoundError
from streamtx.ledger import Position, open_ledger_factory

T = "persistent://t/n/capped"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    settings = BrokerSettings(ledger_url="memory://", max_subscriptions_per_topic=3)  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    await b.create_topic(T, 2)
    await b.create_topic(T + "2", 1)
    yield b
    await b.close()


async def test_a_subscription_past_the_cap_is_a_409_and_the_others_stay(broker: Broker) -> None:
    for name in ("a", "b", "c"):
        await broker.create_subscription(T, name, SubscriptionType.SHARED, "earliest")
    with pytest.raises(ConflictError, match="MAX_SUBSCRIPTIONS_PER_TOPIC"):
        await broker.create_subscription(T, "d", SubscriptionType.SHARED, "earliest")
    assert sorted(broker.topic(T).subscriptions) == ["a", "b", "c"]
    assert "d" not in broker.catalog.topics[T].subscriptions
    # One that exists may be created again (idempotent) or retyped; another topic has its own cap.
    await broker.create_subscription(T, "a", SubscriptionType.SHARED, "earliest")
    await broker.create_subscription(T, "b", SubscriptionType.FAILOVER, "earliest")
    await broker.create_subscription(T + "2", "d", SubscriptionType.SHARED, "earliest")


async def test_deleting_one_makes_room_unless_a_transaction_holds_acks_on_it(broker: Broker) -> None:
    for name in ("a", "b", "c"):
        await broker.create_subscription(T, name, SubscriptionType.SHARED, "earliest")
    held = broker.topic(T).subscriptions["a"].parts[1].held
    held.hold([(Position(0, 0), None)], TxnId(7, 1))  # an open transaction's ack on partition 1
    with pytest.raises(ConflictError, match="open transactions"):
        await broker.delete_subscription(T, "a", force=True)  # force does not drop a txn's acks
    assert "a" in broker.catalog.topics[T].subscriptions
    held.clear()  # the transaction ended
    await broker.delete_subscription(T, "a", force=False)
    assert sorted(broker.topic(T).subscriptions) == ["b", "c"]
    assert "a" not in broker.catalog.topics[T].subscriptions
    await broker.create_subscription(T, "d", SubscriptionType.SHARED, "earliest")  # room for one
    with pytest.raises(NotFoundError):
        await broker.delete_subscription(T, "a", force=True)

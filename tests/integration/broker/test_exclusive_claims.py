"""The topic-wide Exclusive claim of broker replicas against a real redis-server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.replicas.exclusive import ExclusiveClaims
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.errors import ConflictError, UnavailableError
from streamtx.ledger import open_ledger_factory
from tests.support.suite import eventually

TOPIC = "persistent://t/n/x"


@pytest.fixture
async def two(redis_url: str) -> AsyncIterator[tuple[ExclusiveClaims, ExclusiveClaims]]:
    """Two brokers' claims of one cluster (a 600 ms idle expiry)."""
    cluster = f"c{uuid.uuid4().hex[:6]}"
    a, b = (ExclusiveClaims.from_url(redis_url, cluster, 600) for _ in range(2))
    yield a, b
    await a.aclose()
    await b.aclose()


async def test_one_consumer_holds_the_subscription_on_every_broker_until_it_closes(
        two: tuple[ExclusiveClaims, ExclusiveClaims]) -> None:
    a, b = two
    await a.claim(TOPIC, "s", "x")
    await b.claim(TOPIC, "s", "x")  # x again, through the other broker
    for claims in (a, b):
        with pytest.raises(ConflictError, match="has consumer x"):
            await claims.claim(TOPIC, "s", "y")
    await b.claim(TOPIC, "other", "y")  # another subscription is another claim
    await a.release(TOPIC, "s", "y")  # not y's to give up
    with pytest.raises(ConflictError):
        await b.claim(TOPIC, "s", "y")
    await b.release(TOPIC, "s", "x")
    await b.claim(TOPIC, "s", "y")
    with pytest.raises(ConflictError, match="has consumer y"):
        await a.claim(TOPIC, "s", "x")  # a's memory of x's claim is not trusted after a refusal


async def test_a_silent_consumers_claim_expires_and_redis_down_is_a_503(
        two: tuple[ExclusiveClaims, ExclusiveClaims]) -> None:
    a, b = two
    await a.claim(TOPIC, "s", "x")

    async def taken() -> bool:
        try:
            await b.claim(TOPIC, "s", "y")
        except ConflictError:
            return False
        return True

    await eventually(taken, timeout_s=5, what="x's claim to expire after 600 ms without a fetch")
    down = ExclusiveClaims.from_url("redis://127.0.0.1:1", "c", 600)
    with pytest.raises(UnavailableError):
        await down.claim(TOPIC, "s", "x")
    await down.aclose()


async def test_a_claim_outlives_the_long_poll_of_its_consumer(redis_url: str) -> None:
    """Issue 21 item 15: the claim lasted ``exclusive_idle_ms`` from the start of a fetch, so a
    long poll longer than that let another consumer claim the subscription through another
    broker while the first one's poll could still hand it messages (two consumers at once)."""
    cluster = f"c{uuid.uuid4().hex[:6]}"
    settings = BrokerSettings(ledger_url="memory://", exclusive_idle_ms=300)  # type: ignore[call-arg]
    broker = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    other = ExclusiveClaims.from_url(redis_url, cluster, 300)  # the other broker's
    await broker.start()
    try:
        await broker.create_topic(TOPIC, 1)
        sub = await broker.create_subscription(TOPIC, "s", SubscriptionType.EXCLUSIVE, "earliest")
        assert sub is not None
        sub.claims = ExclusiveClaims.from_url(redis_url, cluster, 300)
        x = asyncio.create_task(sub.fetch("x", 10, 3_000))
        async def polling() -> bool:
            return (info := sub.consumers.get("x")) is not None and info.fetching > 0

        await eventually(polling, timeout_s=5, what="x's poll")
        await asyncio.sleep(1.0)  # past the 300 ms idle expiry, within x's 3 s poll
        with pytest.raises(ConflictError, match="has consumer x"):
            await other.claim(TOPIC, "s", "y")
        x.cancel()
        await asyncio.gather(x, return_exceptions=True)
        await sub.claims.aclose()
    finally:
        await other.aclose()
        await broker.close()

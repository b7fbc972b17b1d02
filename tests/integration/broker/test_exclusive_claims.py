"""The topic-wide Exclusive claim of broker replicas against a real redis-server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from streamtx.broker.replicas.exclusive import ExclusiveClaims
from streamtx.errors import ConflictError, UnavailableError
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

"""Failover subscriptions: the assignment rule (pure) and dispatch on the broker's objects."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.broker import failover
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.broker.topic import Outgoing
from streamtx.ledger import open_ledger_factory
from streamtx.records.partition import Message

T = "persistent://t/n/f"
PARTS = 4


@dataclass
class Seen:
    last_seen: float
    fetching: int = 0


# --- the rule ------------------------------------------------------------------------


names = st.lists(st.text("abcdefgh", min_size=1, max_size=4), unique=True, max_size=6)


@given(st.integers(0, 12), names)
def test_every_partition_has_one_active_consumer_spread_evenly(partitions: int, consumers: list[str]) -> None:
    got = failover.assign(partitions, consumers)
    if not consumers:
        assert got == {}
        return
    assert sorted(got) == list(range(partitions))
    counts = [sum(1 for n in got.values() if n == c) for c in consumers]
    assert max(counts) - min(counts) <= 1
    assert got == failover.assign(partitions, list(reversed(consumers)))  # order of arrival is irrelevant


def test_pulsar_order_sorted_names_index_mod_count() -> None:
    assert failover.assign(5, ["w1", "w0"]) == {0: "w0", 1: "w1", 2: "w0", 3: "w1", 4: "w0"}
    before = failover.assign(4, ["a", "b"])
    after = failover.assign(4, ["b"])
    assert failover.moved(before, after) == [0, 2]
    assert failover.moved(after, {}) == [0, 1, 2, 3]


def test_liveness_fetching_or_recent() -> None:
    seen = {"a": Seen(0.0), "b": Seen(0.0, fetching=1), "c": Seen(9.5)}
    assert failover.live(seen, 10.0, 1.0) == ["b", "c"]
    assert failover.next_expiry(seen, 10.0, 1.0) == 10.5


# --- dispatch --------------------------------------------------------------------------


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    settings = BrokerSettings(ledger_url="memory://", failover_idle_ms=300)  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    await b.create_topic(T, PARTS)
    yield b
    await b.close()


async def produce(b: Broker, n: int) -> None:
    for p in range(PARTS):
        await b.topic(T).produce([Outgoing(Message(f"p{p}-{i}".encode(), request_index=i), p)
                                  for i in range(n)], None, None)


def values(p: int) -> list[str]:
    """The three values of partition ``p``, base64 as fetch hands them out, in order."""
    return [base64.b64encode(f"p{p}-{i}".encode()).decode() for i in range(3)]


async def drain(sub: Subscription, consumer: str, want: int) -> list[dict[str, object]]:
    got: list[dict[str, object]] = []
    while len(got) < want:
        more = await sub.fetch(consumer, 100, 2000)
        assert more, f"{consumer} got {len(got)} of {want}"
        got += more
    return got


async def test_partitions_move_when_a_consumer_closes_or_goes_idle(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "fo", SubscriptionType.FAILOVER, "earliest")
    await produce(broker, 3)
    assert {m["partition"] for m in await drain(sub, "w0", 12)} == {0, 1, 2, 3}  # alone: all of them
    # w1 joins: it takes partitions 1 and 3, and w0's unacked messages there, in order.
    got = await drain(sub, "w1", 6)
    assert [m["value"] for m in got if m["partition"] == 1] == values(1)
    assert {m["partition"] for m in got} == {1, 3}
    assert sub.active == {0: "w0", 1: "w1", 2: "w0", 3: "w1"}
    assert sub.partitions_of("w0") == [0, 2] and sub.partitions_of("nobody") == []
    assert await sub.fetch("w0", 100, 0) == []  # its own unacked ones are still out with it
    # w0 closes: everything it had out goes to w1, in position order per partition.
    assert sub.close_consumer("w0")
    got = await drain(sub, "w1", 6)
    assert {m["partition"] for m in got} == {0, 2}
    for p in (0, 2):
        assert [m["value"] for m in got if m["partition"] == p] == values(p)
    # w0 comes back and takes 0 and 2 again; then stops fetching: after the idle time w1 has all.
    await sub.fetch("w0", 100, 0)
    assert sub.active[0] == "w0"
    await asyncio.sleep(0.35)
    assert len(await drain(sub, "w1", 6)) == 6
    assert set(sub.active.values()) == {"w1"}
    stats = await sub.stats()
    assert stats["activeConsumers"] == {str(i): "w1" for i in range(PARTS)}


async def test_a_waiting_fetch_takes_over_when_the_other_expires(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "fo2", SubscriptionType.FAILOVER, "earliest")
    await produce(broker, 1)
    await sub.fetch("a", 100, 0)
    await sub.fetch("b", 100, 0)  # b is active on 1 and 3 now
    assert sub.active[0] == "a"
    got = await sub.fetch("b", 100, 3000)  # a stays silent: b's long poll wakes when a expires
    assert {m["partition"] for m in got} == {0, 2}


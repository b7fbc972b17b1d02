"""Broker.resolve: what a request's topic name is served by on a broker replica (no servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker, Local, partition_item
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.settings import BrokerSettings
from streamtx.errors import NotFoundError, NotOwnerError
from streamtx.ledger import open_ledger_factory

T = "persistent://t/n/resolved"
OTHER = "http://b1"


@pytest.fixture
async def replica() -> AsyncIterator[Broker]:
    """A replica holding partitions 0 and 1 of T's four; OTHER owns 2 and 3."""
    settings = BrokerSettings(ledger_url="memory://")  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0), replicas=True)
    await b.start()
    await b.create_topic(T, 4)
    for i in (0, 1):
        await b.acquire(partition_item(T, i))
    b.owners.update({partition_item(T, i): OTHER for i in (2, 3)})
    yield b
    await b.close()


async def test_a_spread_topics_name_resolves_to_its_plan_and_a_partitions_name_to_that_partition(
        replica: Broker) -> None:
    plan = replica.resolve(T)
    assert isinstance(plan, SpreadPlan)
    assert (plan.count, plan.local, plan.remote) == (4, [0, 1], {OTHER: [2, 3]})
    assert plan.topic is replica.topics[T]
    assert [plan.owner_of(i) for i in range(4)] == [None, None, OTHER, OTHER]
    assert replica.resolve(f"{T}-partition-1") == Local(replica.topics[T], 1)
    # A forwarded request (streamtx-partitions-here) is served by the partitions open here only.
    assert replica.resolve(T, here=True) == Local(replica.topics[T], None)


async def test_what_resolve_cannot_serve_or_fan_out_is_refused(replica: Broker) -> None:
    with pytest.raises(NotOwnerError) as elsewhere:  # one partition of another owner: its 307
        replica.resolve(f"{T}-partition-2")
    assert elsewhere.value.owner == OTHER
    with pytest.raises(NotFoundError):
        replica.resolve(f"{T}-partition-4")
    with pytest.raises(NotFoundError):
        replica.resolve("persistent://t/n/nope")
    replica.owners[partition_item(T, 3)] = None  # moving: no plan, 503
    with pytest.raises(NotOwnerError) as moving:
        replica.resolve(T)
    assert moving.value.owner is None
    for i in (0, 1):  # the other replica owns every partition: a 307 to it
        await replica.release(partition_item(T, i), lost=False)
        replica.owners[partition_item(T, i)] = OTHER
    replica.owners[partition_item(T, 3)] = OTHER
    with pytest.raises(NotOwnerError) as redirected:
        replica.resolve(T)
    assert redirected.value.owner == OTHER

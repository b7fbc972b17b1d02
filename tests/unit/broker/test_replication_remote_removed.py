"""A remote a topic no longer replicates to: its cursors go on every broker replica (issue 21 item 7)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker, partition_item
from streamtx.broker.replication.state import cursor_name
from streamtx.broker.settings import BrokerSettings
from streamtx.cursor import cursor_ledger_name
from streamtx.ledger import LedgerFactory, open_ledger_factory

T = "persistent://t/n/remotes"


@pytest.fixture
async def ledgers() -> AsyncIterator[LedgerFactory]:
    s = open_ledger_factory("memory://")
    yield s
    await s.close()


async def _replica(ledgers: LedgerFactory) -> Broker:
    settings = BrokerSettings(ledger_url="memory://")  # type: ignore[call-arg]
    b = Broker(ledgers, settings, PendingAckClient(None, 1.0), replicas=True)
    await b.start()
    return b


async def test_a_removed_remotes_cursors_go_on_every_replica_and_stay_gone(ledgers: LedgerFactory) -> None:
    a, b = await _replica(ledgers), await _replica(ledgers)
    try:
        await a.create_topic(T, 2)
        await b.catch_up()
        await a.acquire(partition_item(T, 0))
        await b.acquire(partition_item(T, 1))
        for replica, index in ((a, 0), (b, 1)):  # the controller's first call on each partition
            topic = replica.topics[T]
            await replica.note_remote(T, "z")
            await replica.replication.link(T, index, topic.owned[index], "z")
        await a.catch_up()
        await b.catch_up()
        assert a.replication.first_unreplicated(T, 0) is not None
        assert b.replication.first_unreplicated(T, 1) is not None

        await a.forget_remote(T, "z")  # z left the topic's policy
        assert a.replication.first_unreplicated(T, 0) is None  # trims no longer held back here
        ledger = a.topics[T].owned[0].ledger.name
        assert not await ledgers.exists(cursor_ledger_name(ledger, cursor_name("z")))
        await b.catch_up()  # the other replica's next tick
        assert b.replication.first_unreplicated(T, 1) is None
        assert "z" not in b.catalog.topics[T].remotes
        # Partition 1 moves to a: it opens without z's cursor.
        await b.release(partition_item(T, 1), lost=False)
        await a.acquire(partition_item(T, 1))
        assert a.replication.first_unreplicated(T, 1) is None
    finally:
        await a.close()
        await b.close()

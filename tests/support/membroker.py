"""A broker over the memory ledger for tests of its domain objects (no HTTP, no pending-ack store)."""

from __future__ import annotations

from typing import Any

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.ledger import open_ledger_factory


async def memory_broker(topic: str, **settings: Any) -> Broker:
    """A started broker with ``topic`` (one partition); ``settings`` override BrokerSettings."""
    broker = Broker(open_ledger_factory("memory://"), BrokerSettings(ledger_url="memory://", **settings),
                    PendingAckClient(None, 1.0))
    await broker.start()
    await broker.create_topic(topic, 1)
    return broker

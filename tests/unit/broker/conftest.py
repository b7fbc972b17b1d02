"""The broker's domain objects over the memory ledger, with one topic of one partition."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.ledger import open_ledger_factory
from tests.unit.broker.memtopic import ACK_TIMEOUT_MS, T


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    """A broker (no pending-ack store) with topic :data:`T`; ack timeout :data:`ACK_TIMEOUT_MS`."""
    settings = BrokerSettings(ledger_url="memory://", ack_timeout_ms=ACK_TIMEOUT_MS)  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    await b.create_topic(T, 1)
    yield b
    await b.close()

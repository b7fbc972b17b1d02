"""A restarted broker opens its topics side by side, not one after another (issue 25)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from streamtx.broker import registry
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.ledger import open_ledger_factory

TOPICS = [f"persistent://t/n/topic-{i}" for i in range(6)]
OPEN_S = 0.2  # each partition's open, made slow


async def test_a_restart_opens_topics_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"file://{tmp_path}"
    settings = BrokerSettings(ledger_url=url)  # type: ignore[call-arg]
    first = Broker(open_ledger_factory(url), settings, PendingAckClient(None, 1.0))
    await first.start()
    for name in TOPICS:
        await first.create_topic(name, 1)
    await first.close()

    real_open = registry.Partition.open

    async def slow_open(*args: Any, **kw: Any) -> Any:
        await asyncio.sleep(OPEN_S)  # a ledger open and replay on a busy disk
        return await real_open(*args, **kw)

    monkeypatch.setattr(registry.Partition, "open", slow_open)
    again = Broker(open_ledger_factory(url), settings, PendingAckClient(None, 1.0))
    t0 = time.monotonic()
    await again.start()
    took = time.monotonic() - t0
    try:
        assert all(again.is_open(f"{name}-partition-0") for name in TOPICS)
        # One after another: 6 x 0.2 s = 1.2 s at least.
        assert took < len(TOPICS) * OPEN_S / 2, took
    finally:
        await again.close()

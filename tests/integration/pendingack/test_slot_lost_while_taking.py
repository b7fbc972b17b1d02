"""A pending-ack slot whose lease is lost while it is still being taken is not served after.

Issue 21 item 15: ``Slots._acquire`` opens the slot's index and replays its stores; a lease
found lost meanwhile ran ``_drop`` at once, which found nothing yet, and the taking then went on
and marked the slot ready: this replica answered for a slot another replica owns, for good.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from streamtx.ledger import open_ledger_factory
from streamtx.pendingack import leases
from streamtx.pendingack.leases import Slots
from streamtx.pendingack.registry import PendingAckStores
from streamtx.pendingack.settings import PendingAckSettings


async def test_a_slot_lost_while_it_opens_is_not_ready_after(redis_url: str, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    settings = PendingAckSettings(redis_url=redis_url, cluster=f"c{uuid.uuid4().hex[:6]}",  # type: ignore[call-arg]
                                  pendingack_slots=1, lease_ttl_ms=60_000, member="p0")
    ledgers = open_ledger_factory("memory://")
    stores = PendingAckStores(ledgers, settings, notifier=None, writer_factory=None)  # type: ignore[arg-type]
    slots = Slots(settings, ledgers, stores)
    opening, go = asyncio.Event(), asyncio.Event()
    open_index = leases.SlotIndex.open

    async def replaying(cls: Any, *a: Any, **k: Any) -> Any:
        opening.set()
        await go.wait()
        return await open_index(*a, **k)

    monkeypatch.setattr(leases.SlotIndex, "open", classmethod(replaying))
    try:
        taking = asyncio.create_task(slots.ownership.balance())
        await asyncio.wait_for(opening.wait(), 10)
        slots.ownership._mark_lost([slots.ownership.held["0"]])  # expired while we were paused
        go.set()
        await asyncio.wait_for(taking, 10)
        await asyncio.wait_for(slots.ownership.settled(), 10)
        assert 0 not in slots.ready and 0 not in slots.indexes
    finally:
        await slots.ownership.leases.aclose()
        await ledgers.close()

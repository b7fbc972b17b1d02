"""A coordinator id whose lease is lost while its log still replays: its mailbox is not drained after.

Issue 21 item 15 (with workers on one port, ids a sibling owns are served from Redis mailboxes):
the lease of an id was found lost while the id was still being taken (its log replaying); the
close ran at once and found nothing to stop, then the taking went on and started draining the
id's mailbox. The worker then served requests of an id it no longer held, for good (answering
them 503, as not its own), beside the id's real owner.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from streamtx.coordinator import leases as replicas
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.ownership.mailbox import Mailbox
from streamtx.service.inprocess import Answer, Call


class Replaying:
    """Coordinators whose taking of an id waits for ``go`` (a log replaying)."""

    def __init__(self) -> None:
        self.all_ids = [3]
        self.ids: list[int] = []
        self.owners: dict[int, str | None] = {}
        self.taking, self.go = asyncio.Event(), asyncio.Event()

    async def acquire(self, cid: int) -> None:
        self.taking.set()
        await self.go.wait()
        self.ids.append(cid)

    async def release(self, cid: int) -> None:
        if cid in self.ids:
            self.ids.remove(cid)


async def serve(call: Call) -> Answer:
    return Answer(200, [], b"")


async def test_an_id_lost_while_it_replays_has_its_mailbox_left_alone(redis_url: str) -> None:
    cluster = f"c{uuid.uuid4().hex[:6]}"
    settings = CoordinatorSettings(redis_url=redis_url, cluster=cluster, lease_ttl_ms=60_000,  # type: ignore[call-arg]
                                   advertised_url="http://w0", member="w0")
    coordinators = Replaying()
    mailbox = Mailbox.from_url(redis_url, cluster=cluster, service=replicas.service_name, consumer="w0",
                               timeout_s=5.0, max_batch=8)
    manager = replicas.ownership(settings, coordinators, mailbox=mailbox, serve=serve)  # type: ignore[arg-type]
    try:
        taking = asyncio.create_task(manager.balance())
        await asyncio.wait_for(coordinators.taking.wait(), 10)
        lease: Any = manager.held["3"]
        manager._mark_lost([lease])  # its renewal found it gone (expired while we were paused)
        coordinators.go.set()
        await asyncio.wait_for(taking, 10)
        await asyncio.wait_for(manager.settled(), 10)
        assert mailbox.draining == [] and coordinators.ids == []
    finally:
        await mailbox.aclose()
        await manager.leases.aclose()

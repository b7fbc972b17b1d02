"""Broker replicas: topics leased over the live broker processes (``STREAMTX_REDIS_URL``).

Each replica runs :class:`~streamtx.ownership.Ownership` over the topics the
catalog names (refreshed at every tick, so topics created on any replica are
shared out). The lease item is the topic: all its partitions move together,
because a produce request spreads its messages over the partitions and a
subscription dispatches from all of them (``-partition-N`` lookups answer the
topic's owner). Taking a topic opens every partition ledger as writer, which
fences the previous owner (a paused one can never append again), and recovers
its transaction buffer and producers from snapshot and ledger, then opens its
subscriptions; handing it over snapshots, flushes and closes them, then
releases the lease so the next owner takes it at once. Requests for a topic
another replica owns are redirected there (307), or answered 503 while it moves.
"""

from __future__ import annotations

import asyncio
import logging

from streamtx.broker.broker import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.ownership import Lease, Ownership
from streamtx.ownership.replica import replica_ownership
from streamtx.service import ServiceState

log = logging.getLogger(__name__)

service_name = "broker"
_created_poll_s = 0.05


def ownership(settings: BrokerSettings, broker: Broker) -> Ownership:
    """The ownership loop of this replica (not started); wires the broker's hooks to it."""

    async def acquire(item: str, lease: Lease) -> None:
        log.info("broker: taking %s over (lease token %d)", item, lease.token)
        await broker.acquire(item)

    async def release(item: str, lost: bool) -> None:
        if lost:
            log.error("broker: lease of %s lost; no longer serving it", item)
        await broker.release(item, lost=lost)

    async def topics() -> list[str]:
        await broker.catch_up()
        return list(broker.catalog.topics)

    async def refresh_owners() -> None:
        for name in manager.items:
            if name in manager.held:  # ours, maybe still opening: 503 meanwhile, never a 307 to us
                broker.owners.pop(name, None)
            elif name not in broker.topics:
                owner = await manager.owner_url(name)
                # Our own URL here: a lease of ours that we lost or released this very tick.
                broker.owners[name] = owner if owner != manager.url else None

    async def created(name: str) -> None:
        """Return once the new topic has an owner (this replica or another), so the caller's
        next request finds it served; the owner's next tick opens it."""
        manager.nudge()
        deadline = asyncio.get_running_loop().time() + 2 * settings.lease_ttl_ms / 1000
        while name not in broker.topics and asyncio.get_running_loop().time() < deadline:
            # Taken here and still opening: wait for it to open (never a 307 to ourselves).
            if name not in manager.held:
                owner = await manager.owner_url(name)
                if owner is not None and owner != manager.url:
                    broker.owners[name] = owner
                    return
            await asyncio.sleep(_created_poll_s)

    def fenced(topic: str) -> None:
        lease = manager.held.pop(topic, None)
        log.error("broker: %s was fenced by another replica (lease %s)", topic, lease)
        task = asyncio.get_running_loop().create_task(broker.release(topic, lost=True))
        _background.add(task)
        task.add_done_callback(_background.discard)

    manager = replica_ownership(settings, service_name, topics, on_acquire=acquire, on_release=release,
                                after_balance=refresh_owners)
    broker.on_created = created
    broker.on_fenced = fenced
    return manager


async def join(manager: Ownership, state: ServiceState) -> None:
    """Start the loop; the replica is ready once it has taken its first share."""
    manager.start()
    await manager.balanced.wait()
    state.ready, state.reason = True, "ready"
    log.info("broker replica %s ready, owns %s", manager.member, sorted(manager.held))


_background: set[asyncio.Task[None]] = set()

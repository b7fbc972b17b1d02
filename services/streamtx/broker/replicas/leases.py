"""Broker replicas: partitions leased over the live broker processes (``STREAMTX_REDIS_URL``).

Each replica runs :class:`~streamtx.ownership.Ownership` over the partitions of
the topics the catalog names (``x-partition-N``, refreshed at every tick, so
topics created on any replica are shared out). As in Pulsar, the lease item is
the PARTITION: the partitions of one hot topic spread over the replicas. What a
partition carries moves with it: its ledger (taking it opens the ledger as
writer, which fences the previous owner: a paused one can never append again),
its transaction buffer and producers (dedup, epochs: recovered from snapshot and
ledger), and the cursor and dispatch state of every subscription on it. Handing
it over snapshots, flushes and closes them, then releases the lease so the next
owner takes it at once. What is the topic's (its partition count, its
subscriptions) is in the catalog every replica reads. Requests for a partition
another replica owns are redirected there (307), or answered 503 while it moves.
"""

from __future__ import annotations

import asyncio
import logging

from streamtx.broker.registry import Broker
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

    async def partitions() -> list[str]:
        await broker.catch_up()
        return broker.all_items()

    async def refresh_owners() -> None:
        for item in manager.held:  # ours, maybe still opening: 503 meanwhile, never a 307 to us
            broker.owners.pop(item, None)
        others = [item for item in manager.items if item not in manager.held and not broker.is_open(item)]
        for item, owner in (await manager.owner_urls(others)).items():  # one round trip for all
            # Our own URL here: a lease of ours that we lost or released this very tick.
            broker.owners[item] = owner if owner != manager.url else None

    async def created(name: str) -> None:
        """Return once every partition of the new topic has an owner (this replica or another),
        so the caller's next request finds it served; the owners' next tick opens them."""
        manager.nudge()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * settings.lease_ttl_ms / 1000
        waiting = broker.items_of(name)
        while waiting and loop.time() < deadline:
            for item in list(waiting):
                if broker.is_open(item):
                    waiting.remove(item)
                # Taken here and still opening: wait for it to open (never a 307 to ourselves).
                elif item not in manager.held:
                    owner = await manager.owner_url(item)
                    if owner is not None and owner != manager.url:
                        broker.owners[item] = owner
                        waiting.remove(item)
            if waiting:
                await asyncio.sleep(_created_poll_s)

    def fenced(item: str) -> None:
        lease = manager.lose(item)  # closed by the loop (after its opening, if any)
        log.error("broker: %s was fenced by another replica (lease %s)", item, lease)

    manager = replica_ownership(settings, service_name, partitions, on_acquire=acquire, on_release=release,
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


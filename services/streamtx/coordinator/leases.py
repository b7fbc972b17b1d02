"""Coordinator replicas: the ids leased out over the live processes (``STREAMTX_REDIS_URL``).

Each replica runs :class:`~streamtx.ownership.Ownership` over the configured
coordinator ids. Taking an id opens its transaction log as writer (the fence that
makes the previous owner's appends fail) and replays it, so the transactions of
a dead replica finish on the new owner: COMMITTING and ABORTING ones are driven
to their end by recovery, OPEN ones time out there. Giving an id up flushes and
closes its log. Requests for an id another replica owns are redirected there
(``NotOwnerError``: 307 with its URL), from the owner map refreshed every tick.
"""

from __future__ import annotations

import asyncio
import logging

from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.ownership import Lease, Ownership
from streamtx.ownership.mailbox import Mailbox, Serve
from streamtx.ownership.replica import replica_ownership
from streamtx.service import ServiceState

log = logging.getLogger(__name__)

service_name = "coordinator"


def advertised_url(settings: CoordinatorSettings) -> str:
    return settings.own_url()


def member_name(settings: CoordinatorSettings) -> str:
    return settings.member_name()


def ownership(settings: CoordinatorSettings, coordinators: Coordinators, *,
              mailbox: Mailbox | None = None, serve: Serve | None = None) -> Ownership:
    """The ownership loop of this replica (not started). With ``mailbox`` (workers on one
    port), an id taken is also drained from its mailbox with ``serve``, after its log
    recovered; an id given up stops being drained first."""
    async def acquire(item: str, lease: Lease) -> None:
        log.info("coordinator %s: taking over (lease token %d)", item, lease.token)
        await coordinators.acquire(int(item))
        if mailbox is not None and serve is not None:
            mailbox.own(item, serve)

    async def release(item: str, lost: bool) -> None:
        if lost:
            log.error("coordinator %s: lease lost; no longer serving it", item)
        if mailbox is not None:
            await mailbox.disown(item)
        await coordinators.release(int(item))

    async def refresh_owners() -> None:
        for cid in coordinators.all_ids:
            if cid not in coordinators.ids:
                coordinators.owners[cid] = await manager.owner_url(str(cid))

    manager = replica_ownership(settings, service_name, [str(i) for i in coordinators.all_ids],
                                on_acquire=acquire, on_release=release, after_balance=refresh_owners)
    return manager


async def join(manager: Ownership, state: ServiceState, coordinators: Coordinators | None = None) -> None:
    """Start the loop; the replica is ready once it has taken its first share.

    ``coordinators`` (workers on one port): ready only once it also knows the owner of every
    other id, so that none of the connections the kernel hands it gets a 503 "moving" for
    an id a sibling is still taking.
    """
    manager.start()
    await manager.balanced.wait()
    while coordinators is not None:
        missing = [cid for cid in coordinators.all_ids
                   if cid not in coordinators.ids and coordinators.owners.get(cid) is None]
        if not missing:
            break
        for cid in missing:
            coordinators.owners[cid] = await manager.owner_url(str(cid))
        await asyncio.sleep(0.05)
    state.ready = True
    log.info("coordinator replica %s ready, owns %s", manager.member, sorted(manager.held))


def lost(manager: Ownership | None, cid: int) -> None:
    """A log of ours was fenced: another replica owns the id now. Stop serving it; the
    next keepalive finds the lease gone (or gives it up) and the owner map points there."""
    if manager is None:
        return
    lease = manager.lose(str(cid))  # closed by the loop (after its opening, if any)
    log.error("coordinator %d: fenced by another replica (lease %s)", cid, lease)

"""Pending-ack replicas: subscription slots leased over the live processes (``STREAMTX_REDIS_URL``).

Each replica runs :class:`~streamtx.ownership.Ownership` over the slots
(:mod:`.slots`). Taking a slot opens its index as writer, then opens (fences and
replays) every subscription log it lists; giving a slot up (a handover, or a
lease found lost) flushes and closes its stores. A request for a subscription
of a slot another replica owns is answered :class:`~streamtx.errors.NotOwnerError`
(307 to its URL, or 503 while it moves), from the owner map refreshed every
lease third; one for a slot this replica is still taking waits for it.
"""

from __future__ import annotations

import asyncio
import logging

from streamtx.errors import FencedError, NotOwnerError, UnavailableError
from streamtx.ledger import LedgerFactory
from streamtx.ownership import Lease, Ownership
from streamtx.ownership.replica import replica_ownership
from streamtx.pendingack.registry import Key, PendingAckStores
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.slots import SlotIndex, subscription_slot
from streamtx.service import ServiceState

__all__ = ["Slots", "service_name"]

log = logging.getLogger(__name__)

service_name = "pendingack"
_taking_wait_s = 10.0  # a request for a slot being taken waits this long for its replay, then 503


class Slots:
    """The slots this replica owns, and the owners of the others."""

    def __init__(self, settings: PendingAckSettings, ledgers: LedgerFactory,
                 stores: PendingAckStores) -> None:
        self.count = settings.pendingack_slots
        self.own_url = settings.own_url()
        self._ledgers = ledgers
        self._stores = stores
        self.indexes: dict[int, SlotIndex] = {}  # taken or being taken
        self.ready: set[int] = set()  # taken: every listed log fenced and replayed
        self._taking: dict[int, asyncio.Event] = {}
        self.owners: dict[int, str | None] = {}  # the others' slots -> their owner's URL
        stores.gate = self.gate
        stores.before_open = self.before_open
        stores.on_fenced = self.fenced
        self.ownership: Ownership = replica_ownership(
            settings, service_name, [str(s) for s in range(self.count)],
            on_acquire=self._acquire, on_release=self._release, after_balance=self._refresh_owners)

    def slot(self, key: tuple[str, str]) -> int:
        return subscription_slot(*key, self.count)

    async def gate(self, key: Key) -> None:
        slot = self.slot(key)
        taking = self._taking.get(slot)
        if taking is not None:
            try:
                await asyncio.wait_for(asyncio.shield(taking.wait()), _taking_wait_s)
            except TimeoutError:
                raise UnavailableError(f"pending-ack slot {slot} is still being taken over; retry") from None
        if slot in self.ready:
            return
        owner = self.owners.get(slot)
        if owner == self.own_url:  # our map is a tick behind our own handover
            owner = None
        raise NotOwnerError(f"subscription {key[0]} {key[1]} (slot {slot}) is owned by "
                            f"{owner or 'nobody yet (moving)'}", owner=owner)

    async def before_open(self, key: Key) -> None:
        index = self.indexes.get(self.slot(key))
        if index is None:
            raise NotOwnerError(f"pending-ack slot {self.slot(key)} is moving", owner=None)
        try:
            await index.add(key)
        except FencedError:
            raise NotOwnerError(f"pending-ack slot {index.slot} was taken by another replica",
                                owner=None) from None

    def fenced(self, key: Key) -> None:
        """A log of ours was fenced: another replica took its slot (we were paused or cut off
        past the lease). Stop serving the slot now rather than at the next lease renewal."""
        slot = self.slot(key)
        lease = self.ownership.lose(str(slot))  # closed by the loop (after its opening, if any)
        if lease is None:
            return  # already given up
        log.error("pending-ack slot %d: fenced by another replica (lease token %d)", slot, lease.token)
        self.ready.discard(slot)

    async def _acquire(self, item: str, lease: Lease) -> None:
        slot = int(item)
        log.info("pending-ack slot %d: taking over (lease token %d)", slot, lease.token)
        self.owners.pop(slot, None)
        taking = self._taking[slot] = asyncio.Event()
        try:
            index = self.indexes[slot] = await SlotIndex.open(self._ledgers, slot)
            await self._stores.preload(index.keys)
            self.ready.add(slot)
            log.info("pending-ack slot %d: %d subscriptions fenced and replayed", slot, len(index.keys))
        except BaseException:
            await self._drop(slot)
            raise
        finally:
            taking.set()
            del self._taking[slot]

    async def _release(self, item: str, lost: bool) -> None:
        slot = int(item)
        if lost:
            log.error("pending-ack slot %d: lease lost; no longer serving it", slot)
        await self._drop(slot)

    async def _drop(self, slot: int) -> None:
        self.ready.discard(slot)
        self.owners[slot] = None  # moving, until the next refresh
        await self._stores.close_where(lambda key: self.slot(key) == slot)
        index = self.indexes.pop(slot, None)
        if index is not None:
            try:
                await index.close()
            except Exception as exc:
                log.warning("pending-ack slot %d: closing its index failed: %r", slot, exc)

    async def _refresh_owners(self) -> None:
        for slot in range(self.count):
            if slot not in self.indexes:
                self.owners[slot] = await self.ownership.owner_url(str(slot))

    async def join(self, state: ServiceState) -> None:
        """Start the loop; ready once the first share is taken and every owner known."""
        self.ownership.start()
        await self.ownership.balanced.wait()
        state.ready, state.reason = True, "ready"
        log.info("pending-ack replica %s ready, owns slots %s", self.ownership.member, sorted(self.ready))

    async def stop(self) -> None:
        """Hand every slot over at once (not after the lease runs out)."""
        await self.ownership.stop()
        await self.ownership.leases.aclose()

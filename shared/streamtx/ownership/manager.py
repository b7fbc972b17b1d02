"""The ownership loop of one replica: join, take, renew, hand over, give up.

Every ``ttl / 3`` the replica

1. heartbeats its membership (with its URL, for redirects and lookups);
2. renews the leases it holds, all in one Redis round trip, at a fixed rate, on a
   thread of its own (:mod:`.renewer`: a busy event loop must not cost it its
   leases; it stops renewing if the loop stalls for a TTL); a lease it could not
   renew is *lost* (it expired while the process was paused or cut off from
   Redis): the service is told to stop serving that item at once
   (``on_release(item, lost=True)``, in a task of its own, so that closing it
   delays nothing else; the item is taken again only once closed). A lease lost
   while its item is still opening is closed once the opening is over, never
   beside it: closed first, the opening would go on and serve an item it lost
   (a pending-ack slot left ready, a coordinator id's mailbox drained);

and, on its event loop (a loop of its own beside the renewals, so that renewing
never waits behind a long recovery),

3. computes its share (:func:`~streamtx.ownership.assign.share_of`) over the live
   members and hands over what is no longer its share: the service stops, flushes
   and closes the item (``on_release(item, lost=False)``), then the lease is
   released so the new owner can take it without waiting for the TTL;
4. takes the leases of its share that nobody holds, and opens each item
   (``on_acquire(item, lease)``: for a log, open its ledger as writer, which fences
   any older writer, then recover). If opening fails, the lease is released.

A replica that joins therefore receives items only as their current owners let
them go, and a replica that dies loses them after the TTL: at no moment do two
replicas both believe they own an item for longer than it takes the old one to
notice at its next tick (and even then the ledger fence refuses its appends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from streamtx.ownership.assign import share_of
from streamtx.ownership.lease import Lease, LeaseStore
from streamtx.ownership.renewer import Renewer, renew_round

__all__ = ["Ownership"]

log = logging.getLogger(__name__)

OnAcquire = Callable[[str, Lease], Coroutine[Any, Any, None]]
OnRelease = Callable[[str, bool], Coroutine[Any, Any, None]]
# The items to share out: a fixed list (coordinator ids), or asked for at every balance
# (partitions and subscriptions come and go while the replicas run).
Items = Sequence[str] | Callable[[], Awaitable[Sequence[str]]]


class Ownership:
    """Keeps this replica's share of ``items`` leased and opened."""

    def __init__(self, leases: LeaseStore, *, member: str, url: str, items: Items, ttl_ms: int,
                 on_acquire: OnAcquire, on_release: OnRelease,
                 after_balance: Callable[[], Awaitable[None]] | None = None) -> None:
        self.leases = leases
        self.member = member
        self.url = url
        self._items = items if callable(items) else list(items)
        self.items: list[str] = [] if callable(items) else list(items)  # as of the last balance
        self.ttl_ms = ttl_ms
        self.on_acquire = on_acquire
        self.on_release = on_release
        self._after_balance = after_balance
        self.held: dict[str, Lease] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._releasing: dict[str, asyncio.Task[None]] = {}  # lost items being closed
        self._opening: dict[str, asyncio.Event] = {}  # items whose on_acquire runs now
        self._renewer: Renewer | None = None
        self.ticks = 0
        self.balanced = asyncio.Event()  # set once the first share was taken
        self._wake = asyncio.Event()
        self._epoch: str | None = None  # the lease store's, as last read (LeaseStore.epoch)
        self._take_from = 0.0  # loop time before which nothing is taken (see balance)
        self._taking = True  # False once the service is stopping (stop_taking)

    @property
    def interval_s(self) -> float:
        return self.ttl_ms / 3000

    def start(self) -> None:
        self._renewer = Renewer(self.leases, member=self.member, url=self.url, ttl_ms=self.ttl_ms,
                                held=lambda: list(self.held.values()), lost=self._mark_lost)
        self._renewer.start()
        self._tasks = [asyncio.create_task(self._balancing(), name=f"ownership-{self.member}")]

    async def _balancing(self) -> None:
        while True:
            try:
                await self.balance()
            except Exception as exc:  # Redis down: keep what we hold until the leases run out
                log.warning("ownership %s: balance failed: %r", self.member, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()

    def nudge(self) -> None:
        """Balance now rather than at the next tick (an item was created here)."""
        self._wake.set()

    async def tick(self) -> None:
        """One round of both loops (tests drive it by hand)."""
        await self.keepalive()
        await self.settled()
        await self.balance()

    async def keepalive(self) -> None:
        """One renewal round on this loop (tests; a started replica renews on its own thread)."""
        self._mark_lost(await renew_round(self.leases, self.member, self.url, list(self.held.values()),
                                          self.ttl_ms))

    def _mark_lost(self, lost: list[Lease]) -> None:
        for lease in lost:
            if self.held.get(lease.item) is not lease:
                continue  # handed over (or found lost) meanwhile
            log.error("ownership %s: lease of %s lost (token %d)", self.member, lease.item, lease.token)
            self.lose(lease.item)

    def lose(self, item: str) -> Lease | None:
        """Stop holding ``item`` now (its lease was found lost, or its log fenced by another
        replica): closed (``on_release(item, lost=True)``) in a task of its own, after its
        opening if it is still opening. The lease it held, None if it held none."""
        lease = self.held.pop(item, None)
        if lease is not None and item not in self._releasing:
            # Closing the item flushes its logs, which may take a while: in a task of its own.
            self._releasing[item] = asyncio.get_running_loop().create_task(self._lost(item))
        return lease

    async def _lost(self, item: str) -> None:
        try:
            opening = self._opening.get(item)
            if opening is not None:  # closed beside its opening, the opening would serve it still
                await opening.wait()
            await self.on_release(item, True)
        except Exception as exc:
            log.warning("ownership %s: closing lost %s failed: %r", self.member, item, exc)
        finally:
            self._releasing.pop(item, None)

    async def settled(self) -> None:
        """Until every item found lost is closed."""
        if self._releasing:
            await asyncio.gather(*self._releasing.values(), return_exceptions=True)

    async def balance(self) -> None:
        if callable(self._items):
            self.items = sorted(await self._items())
        members = await self.leases.members()
        if self.member not in members:
            # The keepalive loop, started beside this one, may not have written our heartbeat
            # yet: without it our share is empty and the first balance would declare the
            # replica balanced (ready) owning nothing.
            await self.leases.heartbeat(self.member, self.url, self.ttl_ms)
            members = await self.leases.members()
        share = set(share_of(self.member, self.items, members))
        epoch = await self.leases.epoch()
        loop = asyncio.get_running_loop()
        if epoch != self._epoch:
            if self._epoch is not None:
                # Redis lost its keys (restarted empty). A lease it granted before is still
                # believed by its holder until that holder's next renewal is refused (a third
                # of a TTL): taking its item now would have two replicas answer for it (the
                # log's fence stops the old holder's appends, not its answers from memory,
                # e.g. a 404 for a transaction the new owner created). Nothing is taken for a TTL.
                log.warning("ownership %s: Redis lost its leases: taking nothing for %d ms",
                            self.member, self.ttl_ms)
                self._take_from = loop.time() + self.ttl_ms / 1000
            self._epoch = epoch
        for item in [i for i in self.held if i not in share]:
            lease = self.held.pop(item, None)
            if lease is None:  # keepalive found it lost meanwhile, and released it
                continue
            log.info("ownership %s: handing %s over", self.member, item)
            await self.on_release(item, False)
            await self.leases.release(lease)
        # An item found lost is taken again only once it is closed.
        free = share - self.held.keys() - self._releasing.keys()
        if self._taking and loop.time() >= self._take_from:
            await asyncio.gather(*(self._take(item) for item in sorted(free)))
        if self._after_balance is not None:
            await self._after_balance()
        self.ticks += 1
        self.balanced.set()

    async def _take(self, item: str) -> None:
        lease = await self.leases.acquire(item, self.member, self.ttl_ms)
        if lease is None:
            return  # its owner has not let it go yet
        self.held[item] = lease  # renewed by keepalive while it opens
        opening = self._opening[item] = asyncio.Event()
        try:
            await self.on_acquire(item, lease)
        except Exception as exc:
            log.warning("ownership %s: opening %s failed: %r", self.member, item, exc)
            if self.held.get(item) is lease:
                del self.held[item]
                await self.leases.release(lease)
            return
        finally:
            opening.set()
            self._opening.pop(item, None)
        log.info("ownership %s: owns %s (token %d)", self.member, item, lease.token)

    async def owner_url(self, item: str) -> str | None:
        """The URL of whoever holds ``item`` now (None if nobody does)."""
        lease = await self.leases.holder(item)
        return await self.leases.url_of(lease.member) if lease is not None else None

    async def owner_urls(self, items: list[str]) -> dict[str, str | None]:
        """:meth:`owner_url` of many items in two Redis calls (a broker has an item per partition)."""
        holders = await self.leases.holders(items)
        urls = await self.leases.urls() if any(holders.values()) else {}
        return {item: urls.get(member) if member is not None else None for item, member in holders.items()}

    def stop_taking(self) -> None:
        """The service is stopping: take no more items (what siblings hand over as they stop
        would be opened, replayed and closed again, and its mailbox's callers kept waiting)."""
        self._taking = False

    async def stop(self) -> None:
        """Graceful: close every item, release every lease (all at once: each may wait for its
        requests in flight), leave the membership."""
        if self._renewer is not None:
            await self._renewer.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.settled()
        held, self.held = self.held, {}
        await asyncio.gather(*(self._let_go(item, lease) for item, lease in held.items()))
        with contextlib.suppress(Exception):
            await self.leases.leave(self.member)

    async def _let_go(self, item: str, lease: Lease) -> None:
        try:
            await self.on_release(item, False)
            await self.leases.release(lease)
        except Exception as exc:
            log.warning("ownership %s: releasing %s failed: %r", self.member, item, exc)

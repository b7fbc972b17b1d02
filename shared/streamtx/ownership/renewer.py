"""Lease renewal on a thread of its own, so a busy event loop does not cost a replica its leases.

A renewal round is a heartbeat and one pipelined renewal of every lease, a few
Redis round trips. On the service's event loop each of them waits for the loop
to come round: with five request handlers of 10 ms each always ready, a round
took over a second, and every lease of a 1.5 s TTL was lost (and taken again,
replayed, lost again: ownership flapped), measured with the old loop and with
this one alike. Here the rounds run on their own thread and event loop, over
their own Redis connection, at a fixed rate of ``ttl / 3``.

Renewing for a process that cannot serve would keep its items from moving, so
the thread renews only while the service's loop is alive: the loop stamps a
pulse every third of the interval, and the thread stops renewing once the
pulse is a TTL old (the leases then run out and the items move, as for a dead
replica). Losses are handed to the service's loop, which alone changes what it
holds. A paused process (SIGSTOP) pauses this thread too: it finds its leases
gone when it wakes, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from streamtx.ownership.lease import Lease, LeaseStore

__all__ = ["Renewer", "renew_round"]

log = logging.getLogger(__name__)


async def renew_round(leases: LeaseStore, member: str, url: str, held: list[Lease], ttl_ms: int
                      ) -> list[Lease]:
    """Heartbeat ``member`` and renew ``held``; the leases that could not be renewed (lost)."""
    await leases.heartbeat(member, url, ttl_ms)
    renewed = await leases.renew_all(held, ttl_ms)
    return [lease for lease, ok in zip(held, renewed, strict=True) if not ok]


class Renewer:
    """The renewal thread of one :class:`~streamtx.ownership.manager.Ownership`."""

    def __init__(self, leases: LeaseStore, *, member: str, url: str, ttl_ms: int,
                 held: Callable[[], list[Lease]], lost: Callable[[list[Lease]], None]) -> None:
        """``held``: a snapshot of the leases held (called from the thread; a copy of a dict's
        values is atomic under the GIL). ``lost``: called on the service's loop."""
        self._leases = leases
        self.member = member
        self.url = url
        self.ttl_ms = ttl_ms
        self._held = held
        self._lost = lost
        self._pulse = time.monotonic()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._main: asyncio.AbstractEventLoop | None = None
        self._pulsing: asyncio.Task[None] | None = None
        self._wakeup: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self.rounds = 0

    @property
    def interval_s(self) -> float:
        return self.ttl_ms / 3000

    def start(self) -> None:
        self._main = asyncio.get_running_loop()
        self._pulse = time.monotonic()
        self._pulsing = self._main.create_task(self._beat(), name=f"lease-pulse-{self.member}")
        self._thread = threading.Thread(target=self._run, name=f"leases-{self.member}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._wakeup is not None:
            loop, wakeup = self._wakeup
            with contextlib.suppress(RuntimeError):  # its loop ended already
                loop.call_soon_threadsafe(wakeup.set)
        if self._pulsing is not None:
            self._pulsing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pulsing
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    async def _beat(self) -> None:
        while True:
            self._pulse = time.monotonic()
            await asyncio.sleep(self.interval_s / 3)

    def _run(self) -> None:
        asyncio.run(self._rounds())

    async def _rounds(self) -> None:
        leases = self._leases.twin()  # a client of this thread's loop
        wakeup = asyncio.Event()
        self._wakeup = asyncio.get_running_loop(), wakeup
        try:
            due = time.monotonic()
            while not self._stopping.is_set():
                await self._round(leases)
                due += self.interval_s
                now = time.monotonic()
                if now > due:
                    log.warning("ownership %s: lease renewal %.0f ms late (process paused, or Redis "
                                "slow; the leases last %d ms)", self.member, (now - due) * 1000, self.ttl_ms)
                    due = now
                with contextlib.suppress(TimeoutError):  # stop() sets it
                    await asyncio.wait_for(wakeup.wait(), max(0.0, due - now))
        finally:
            await leases.aclose()

    async def _round(self, leases: LeaseStore) -> None:
        stalled = time.monotonic() - self._pulse
        if stalled * 1000 > self.ttl_ms:
            log.error("ownership %s: event loop stalled for %.0f ms: not renewing (the items move)",
                      self.member, stalled * 1000)
            return
        try:
            lost = await renew_round(leases, self.member, self.url, self._held(), self.ttl_ms)
        except Exception as exc:  # Redis down: keep what we hold until the leases run out
            log.warning("ownership %s: renewing failed: %r", self.member, exc)
            return
        self.rounds += 1
        if lost and self._main is not None and not self._main.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._main.call_soon_threadsafe(self._lost, lost)

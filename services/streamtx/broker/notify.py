"""A wake-up for long polls: waiters sleep until something changed, time passes, or the poll ends."""

from __future__ import annotations

import asyncio

from streamtx.service.longpoll import LongPoll


class Notifier:
    """``changed()`` wakes every current ``wait()``; later waits sleep until the next one."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[bool]] = set()

    def changed(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(True)

    async def wait(self, timeout: float, poll: LongPoll | None = None) -> bool:
        """True when woken by a change; False on timeout or when ``poll`` ended (client gone, stopping)."""
        if timeout <= 0 or (poll is not None and poll.ended):
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._waiters.add(fut)
        timer = loop.call_later(timeout, _settle, fut)
        if poll is not None:
            poll.watch(fut)
        try:
            return await fut
        finally:
            timer.cancel()
            self._waiters.discard(fut)
            if poll is not None:
                poll.unwatch(fut)


def _settle(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)

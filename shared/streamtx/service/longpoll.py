"""Long polls that end when their client goes away or the service stops.

A long poll (the broker's fetch, up to ``max_wait_ms`` = 30 s) used to sleep
its whole wait even after its client had disconnected, and a stopping service
waited for it: Ctrl-C on ``make run`` sat out uvicorn's graceful-shutdown
timeout and then printed the traceback of the cancelled request.

Each long-poll request gets a :class:`LongPoll` from the app's
:class:`LongPolls` registry. Whoever serves the route (the fast lane or
FastAPI) ends it when the client disconnects; the registry ends every one when
the service starts to stop (:func:`streamtx.service.serve.serve` hooks the signal,
the lifespan ends them too), and a poll opened after that is ended from the
start. The handler's waits (the broker's ``Notifier.wait(timeout, poll)``) then
return at once, and it answers with what it has (an empty fetch): it stops only
between steps, so nothing it already took is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any


class LongPoll:
    """One long-poll request; the futures it :meth:`watch` es are settled (False) when it ends.

    ``gone``: it ended because its client went away, so nothing the handler answers reaches
    anyone (a fetch hands back what it took then, instead of leaving it out with nobody).
    """

    __slots__ = ("_waiters", "ended", "gone")

    def __init__(self) -> None:
        self.ended = False
        self.gone = False
        self._waiters: set[asyncio.Future[bool]] = set()

    def end(self) -> None:
        self.ended = True
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    def watch(self, fut: asyncio.Future[bool]) -> None:
        """Settle ``fut`` with False when the poll ends (a waiter's wake-up)."""
        if self.ended:
            if not fut.done():
                fut.set_result(False)
        else:
            self._waiters.add(fut)

    def unwatch(self, fut: asyncio.Future[bool]) -> None:
        self._waiters.discard(fut)


class LongPolls:
    """The open long polls of one app, so a stopping service can end them all."""

    def __init__(self) -> None:
        self._open: set[LongPoll] = set()
        self.stopping = False
        self._on_stop: list[Callable[[], None]] = []

    def when_stopping(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` too when the stop signal arrives (before the open requests'
        grace, which the lifespan's shutdown waits for)."""
        self._on_stop.append(callback)

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.asynccontextmanager
    async def open(self, disconnected: Callable[[], Awaitable[Any]]) -> AsyncIterator[LongPoll]:
        """A long poll for the block, ended when ``disconnected()`` returns (or the service stops).

        ``disconnected`` is awaited in a task of its own: it should return once the
        client has gone (an ASGI ``receive`` after the body was read does).
        """
        poll = LongPoll()
        if self.stopping:
            poll.end()
        self._open.add(poll)
        watcher = asyncio.ensure_future(disconnected())

        def client_left(done: asyncio.Future[Any]) -> None:
            if not done.cancelled():  # cancelled: the handler answered first
                done.exception()  # retrieved: a receive that failed is a client gone too
                poll.gone = True
            poll.end()

        watcher.add_done_callback(client_left)
        try:
            yield poll
        finally:
            self._open.discard(poll)
            watcher.cancel()

    def end_all(self) -> None:
        """The service is stopping: end every long poll, now and from now on."""
        self.stopping = True
        for poll in list(self._open):
            poll.end()
        for callback in self._on_stop:
            callback()

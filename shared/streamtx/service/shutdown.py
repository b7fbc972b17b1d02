"""A stopping service exits within a bounded time, whatever its backends do.

A service closes its logs on the way out: it flushes what its writers hold and
stops its Kafka producers. With the Kafka cluster gone, each flush retries until
its operation timeout, and a close waits for its flush: a SIGTERM'd coordinator
was still running two minutes later, and a supervisor killed meanwhile left its
workers behind. Two bounds, the second for when the first cannot act:

- :func:`bounded_exit`: the app's shutdown (the lifespan's exit) gets
  ``shutdown_timeout_s``; past it, it is cancelled and the process goes on
  exiting. Nothing acknowledged is lost by this: an acknowledged write is
  durable already; what was still waiting for its append fails, as on a crash.
- :class:`Watchdog`: armed by the first stop signal, a daemon thread ends the
  process with ``os._exit`` if it is still alive past a deadline (an event loop
  blocked, or a shutdown step that swallowed its cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

__all__ = ["EXIT_CODE", "Watchdog", "bounded_exit"]

log = logging.getLogger(__name__)

#: The exit status of a process the watchdog ended.
EXIT_CODE = 70


@contextlib.asynccontextmanager
async def bounded_exit(cm: AbstractAsyncContextManager[None], timeout_s: float, what: str
                       ) -> AsyncIterator[None]:
    """``async with cm`` whose exit is cancelled after ``timeout_s`` (logged, not raised)."""
    await cm.__aenter__()
    exc: BaseException | None = None
    try:
        yield
    except BaseException as e:
        exc = e
        raise
    finally:
        try:
            async with asyncio.timeout(timeout_s):
                await cm.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        except TimeoutError:
            log.error("%s: shutdown did not finish within %.1f s (a backend gone?); exiting without it",
                      what, timeout_s)


class Watchdog:
    """Ends the process ``after_s`` seconds after :meth:`arm` unless it exited by then."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        """Start counting (once; later calls keep the first deadline)."""
        if self._timer is not None:
            return
        self._timer = threading.Timer(self.after_s, self._expire)
        self._timer.daemon = True  # a process that exits in time is not held back by it
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        # Not through logging: its handlers take locks the stuck thread may hold.
        with contextlib.suppress(Exception):
            sys.stderr.write(f"streamtx: still stopping {self.after_s:.0f} s after the stop signal; "
                             "exiting now\n")
            sys.stderr.flush()
        os._exit(EXIT_CODE)

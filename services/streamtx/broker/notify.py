"""A wake-up for long polls: waiters sleep until something changed or time passes."""

from __future__ import annotations

import asyncio


class Notifier:
    """``changed()`` wakes every current ``wait()``; later waits sleep until the next one."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def changed(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """True when woken, False on timeout."""
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            return True
        except TimeoutError:
            return False

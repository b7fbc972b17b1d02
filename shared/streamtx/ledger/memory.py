"""The in-memory backend (``memory://``), for unit tests: nothing survives the process.

Ledgers opened by name from one store share their frames, so two handles on one
name behave like two processes on one durable ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from streamtx.errors import LedgerUnavailableError
from streamtx.ledger.base import Ledger, LedgerFactory, SegmentStats
from streamtx.ledger.fenced_ledger import FencedLedger
from streamtx.ledger.frames import FenceState
from streamtx.ledger.rawlog import RawLog


@dataclass
class _Frames:
    base: int = 0
    frames: list[bytes] = field(default_factory=list)
    start: int = 0
    state: FenceState = field(default_factory=FenceState)
    fail_appends: int = 0  # tests: how many next appends fail
    fail_landed: bool = False  # tests: those appends store their frames, then fail


class MemoryRawLog(RawLog):
    """A raw log held in a list."""

    def __init__(self, data: _Frames) -> None:
        self._d = data

    async def append_batch(self, frames: Sequence[bytes]) -> list[int]:
        await asyncio.sleep(0)  # an append is never synchronous with its caller
        d = self._d
        first = d.base + len(d.frames)
        if d.fail_appends:
            d.fail_appends -= 1
            if d.fail_landed:
                d.frames.extend(frames)
            raise LedgerUnavailableError("memory ledger: injected append failure")
        d.frames.extend(frames)
        return list(range(first, first + len(frames)))

    async def read_raw(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        d = self._d
        start = max(start, d.start, d.base)
        i = start - d.base
        return [(d.base + j, d.frames[j]) for j in range(i, min(i + max_frames, len(d.frames)))]

    def start_offset(self) -> int:
        return self._d.start

    async def end_offset(self) -> int:
        return self._d.base + len(self._d.frames)

    async def trim_raw(self, before: int, state: FenceState) -> None:
        d = self._d
        drop = min(before - d.base, len(d.frames))
        if drop > 0:
            del d.frames[:drop]
            d.base += drop
        d.start, d.state = max(d.start, before), state

    async def trim_state(self) -> tuple[int, FenceState]:
        return self._d.start, FenceState.decode(self._d.state.encode())

    def stats(self) -> Sequence[SegmentStats]:
        d = self._d
        return [SegmentStats(d.base, len(d.frames), sum(len(f) for f in d.frames))]

    async def close(self) -> None:
        return None


class MemoryLedgerFactory(LedgerFactory):
    """Ledgers in process memory."""

    def __init__(self) -> None:
        self._data: dict[str, _Frames] = {}
        self._open: list[FencedLedger] = []

    async def open(self, name: str, *, writer: bool = True) -> Ledger:
        ledger = await FencedLedger.open(
            name, MemoryRawLog(self._data.setdefault(name, _Frames())), writer=writer
        )
        self._open = [led for led in self._open if not led.closed]  # closed by their users
        self._open.append(ledger)
        return ledger

    async def exists(self, name: str) -> bool:
        return name in self._data

    def inject_append_failures(self, name: str, count: int, *, landed: bool = False) -> None:
        """Make the next ``count`` raw appends to ``name`` fail (for tests).

        ``landed``: the failing appends store their frames first, like a backend
        whose acknowledgement was lost (a timeout after the write).
        """
        data = self._data.setdefault(name, _Frames())
        data.fail_appends, data.fail_landed = count, landed

    async def delete(self, name: str) -> None:
        self._data.pop(name, None)

    async def close(self) -> None:
        for ledger in self._open:
            await ledger.close()
        self._open.clear()

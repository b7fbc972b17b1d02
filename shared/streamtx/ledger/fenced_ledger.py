"""The one Ledger implementation, over any :class:`~streamtx.ledger.rawlog.RawLog`.

It adds to a raw log:

* group commit: appends waiting at the same moment go to the backend as one
  batch (one fsync on the file backend, one produce request on Kafka);
* fencing: opening as a writer appends a fence, and an append that lands after
  another writer's fence fails with :class:`FencedError` (see :mod:`.frames`);
* duplicate dropping: a failed raw append is retried with the same sequence
  numbers, and readers drop whatever copies landed twice. A backend may report
  a failure for frames that did land (a Kafka request timeout after the broker
  appended, an fsync error after the write reached the disk): the retry's copy
  is then the dropped duplicate, and the append succeeds with the position of
  the first copy, which is this writer's own frame, not a sign of being fenced.

Every frame is judged once, in log order, by one :class:`FenceTracker`; the
offsets it rejects (fences, zombies, duplicates) are remembered so reads skip
them without decoding state again.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import secrets
from collections.abc import Sequence

from streamtx.errors import (
    FencedError,
    InvalidPositionError,
    LedgerClosedError,
    LedgerError,
    LedgerUnavailableError,
)
from streamtx.ledger import metrics
from streamtx.ledger.base import Entry, Ledger, Position, SegmentStats, ledger_id_for
from streamtx.ledger.frames import FenceState, FenceTracker, FrameKind, encode_data, encode_fence, seq_of
from streamtx.ledger.frames import decode as decode_frame
from streamtx.ledger.rawlog import RawLog

log = logging.getLogger(__name__)

_read_chunk = 1000  # frames per raw read while catching up
_append_attempts = 3
_retry_backoff_s = 0.05


class FencedLedger(Ledger):
    """A ledger over a raw log; create it with :meth:`open`."""

    def __init__(self, name: str, raw: RawLog, start: int, state: FenceState) -> None:
        self.name = name
        self.ledger_id = ledger_id_for(name)
        self._raw = raw
        self._tracker = FenceTracker(state)
        self._base_state = state.__class__.decode(state.encode())
        self._start = start  # logical first offset
        self._known_end = start  # every offset below this has been judged
        self._rejected: set[int] = set()  # judged offsets that are not live entries
        self._fences: list[tuple[int, int, int]] = []  # (offset, writer_id, epoch)
        self._last_live: int | None = None
        self._track_lock = asyncio.Lock()
        self._appended = asyncio.Event()
        self._queue: list[tuple[bytes, asyncio.Future[Position]]] = []
        self._queue_ready = asyncio.Event()
        self._writer_task: asyncio.Task[None] | None = None
        self._writer_id = 0
        self._epoch = 0
        self._next_seq = 0
        self._own_live: dict[int, int] = {}  # seq -> offset of this writer's live frames not yet settled
        self._fenced = False
        self._closed = False

    @classmethod
    async def open(cls, name: str, raw: RawLog, *, writer: bool) -> FencedLedger:
        start, state = await raw.trim_state()
        ledger = cls(name, raw, start, state)
        await ledger.refresh()
        if writer:
            await ledger._become_writer()
        return ledger

    # --- judging frames in log order --------------------------------------

    def _judge(self, offset: int, raw: bytes) -> bytes | None:
        """Judge the frame at ``offset == self._known_end``; its payload if live."""
        frame = decode_frame(raw)
        live = self._tracker.accept(frame)
        self._known_end = offset + 1
        if frame.kind is FrameKind.FENCE:
            self._fences.append((offset, frame.writer_id, frame.epoch))
        if not live:
            self._rejected.add(offset)
            return None
        if frame.writer_id == self._writer_id and self._writer_id:
            self._own_live[frame.seq] = offset  # _settle finds a retried append's first copy here
        self._last_live = offset
        self._appended.set()
        return frame.payload

    async def _catch_up(self, upto: int | None = None) -> None:
        """Judge every frame below ``upto`` (the real end of the log when None)."""
        async with self._track_lock:
            while upto is None or self._known_end < upto:
                want = _read_chunk if upto is None else min(_read_chunk, upto - self._known_end)
                frames = await self._raw.read_raw(self._known_end, want)
                if not frames:
                    return
                for offset, raw in frames:
                    if offset < self._known_end:
                        continue
                    if offset != self._known_end:
                        raise LedgerError(f"{self.name}: gap in the log at {self._known_end}")
                    self._judge(offset, raw)

    async def refresh(self) -> Position | None:
        await self._catch_up()
        return self.last_position()

    # --- writing ------------------------------------------------------------

    async def _become_writer(self) -> None:
        self._writer_id = secrets.randbits(63) + 1
        self._epoch = self._tracker.state.max_epoch + 1
        fence = encode_fence(self._writer_id, self._epoch)
        (offset,) = await self._raw.append_batch([fence])
        await self._catch_up(offset + 1)
        if self._tracker.state.writer_id != self._writer_id:
            raise FencedError(f"{self.name}: another writer opened the ledger while we did")
        self._writer_task = asyncio.create_task(self._write_loop(), name=f"ledger-{self.name}")

    async def append(self, data: bytes) -> Position:
        if self._closed:
            raise LedgerClosedError(f"ledger {self.name} is closed")
        if self._fenced:
            raise FencedError(f"ledger {self.name}: this writer was fenced")
        if self._writer_task is None:
            raise LedgerError(f"ledger {self.name} was opened read-only")
        frame = encode_data(self._writer_id, self._epoch, self._next_seq, data)
        self._next_seq += 1
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._queue.append((frame, fut))
        self._queue_ready.set()
        return await fut

    async def _write_loop(self) -> None:
        while True:
            await self._queue_ready.wait()
            self._queue_ready.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                offsets = await self._append_with_retry([f for f, _ in batch])
                await self._settle(batch, offsets)
            except asyncio.CancelledError:
                _fail(batch, LedgerClosedError(f"ledger {self.name} closed mid-append"))
                raise
            except LedgerError as exc:
                metrics.append_failed(exc, len(batch))
                _fail(batch, exc)
            except Exception as exc:  # a backend bug must not kill the writer silently
                log.exception("ledger %s: append failed", self.name)
                metrics.append_failed(exc, len(batch))
                _fail(batch, LedgerUnavailableError(f"{self.name}: {exc!r}"))

    async def _append_with_retry(self, frames: list[bytes]) -> list[int]:
        # Retrying with the same frames (same seqs) is safe: replay drops copies.
        for attempt in range(_append_attempts):
            try:
                return await self._raw.append_batch(frames)
            except LedgerUnavailableError:
                if attempt == _append_attempts - 1:
                    raise
                await asyncio.sleep(_retry_backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    async def _settle(
        self, batch: list[tuple[bytes, asyncio.Future[Position]]], offsets: list[int]
    ) -> None:
        for (frame, fut), offset in zip(batch, offsets, strict=True):
            if offset > self._known_end:
                await self._catch_up(offset)  # frames of other writers in between
            async with self._track_lock:
                if offset == self._known_end:
                    self._judge(offset, frame)
            if offset in self._rejected:
                # Dropped: a copy of this very frame landed first (an earlier try of
                # this batch), or another writer's fence came before it.
                first = self._own_live.get(seq_of(frame))
                if first is not None and first != offset:
                    if not fut.done():
                        fut.set_result(Position(self.ledger_id, first))
                    continue
                self._fenced = True
                fenced = FencedError(f"ledger {self.name}: writer fenced")
                metrics.append_failed(fenced, 1)
                _fail([(frame, fut)], fenced)
            elif not fut.done():
                fut.set_result(Position(self.ledger_id, offset))
        if self._own_live:
            # Forget the settled seqs (and those of batches that failed for good: lower).
            last_seq = seq_of(batch[-1][0])
            self._own_live = {s: o for s, o in self._own_live.items() if s > last_seq}
        if self._fenced:
            _fail(self._queue, FencedError(f"ledger {self.name}: writer fenced"))
            self._queue = []

    # --- reading ------------------------------------------------------------

    async def read(self, start: Position | None = None, max_entries: int = 1000) -> list[Entry]:
        if self._closed:
            raise LedgerClosedError(f"ledger {self.name} is closed")
        offset = self._start if start is None else self._offset_of(start)
        offset = max(offset, self._start)
        if offset > self._known_end:
            await self._catch_up(offset)
        out: list[Entry] = []
        while len(out) < max_entries:
            frames = await self._raw.read_raw(offset, max(max_entries - len(out), 16))
            if not frames:
                break
            for off, raw in frames:
                offset = off + 1
                if off >= self._known_end:
                    async with self._track_lock:
                        payload = self._judge(off, raw) if off == self._known_end else None
                        if payload is None and off not in self._rejected:
                            payload = decode_frame(raw).payload
                elif off in self._rejected:
                    continue
                else:
                    payload = decode_frame(raw).payload
                if payload is not None:
                    out.append(Entry(Position(self.ledger_id, off), payload))
                    if len(out) >= max_entries:
                        break
        return out

    def _offset_of(self, position: Position) -> int:
        if position.ledger_id != self.ledger_id:
            raise InvalidPositionError(f"{position} is not in ledger {self.name}")
        return position.entry_id

    def last_position(self) -> Position | None:
        return None if self._last_live is None else Position(self.ledger_id, self._last_live)

    def first_position(self) -> Position | None:
        if self._last_live is None:
            return None
        offset = self._start
        while offset in self._rejected and offset < self._known_end:
            offset += 1
        return Position(self.ledger_id, offset) if offset <= self._last_live else None

    def next_entry_id(self, entry_id: int) -> int:
        nxt = entry_id + 1
        while nxt in self._rejected:
            nxt += 1
        return nxt

    async def wait_for_append(self, after: Position | None, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            last = self._last_live
            if last is not None and (after is None or last > after.entry_id):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._appended.clear()
            wait = remaining if self._writer_task is not None else min(remaining, 0.05)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._appended.wait(), wait)
            if self._writer_task is None:
                await self.refresh()

    # --- trimming -----------------------------------------------------------

    async def trim(self, before: Position) -> None:
        offset = min(self._offset_of(before), self._known_end)
        if offset <= self._start:
            return
        state = await self._state_at(offset)
        await self._raw.trim_raw(offset, state)
        self._start, self._base_state = offset, state
        self._fences = [f for f in self._fences if f[0] >= offset]
        self._rejected = {o for o in self._rejected if o >= offset}

    async def _state_at(self, offset: int) -> FenceState:
        """The fence state just before ``offset``, persisted with a trim there."""
        state = FenceState.decode(self._base_state.encode())
        i = bisect.bisect_left(self._fences, (offset,))
        for _, writer, epoch in self._fences[:i]:
            state.writer_id, state.epoch = writer, epoch
            state.max_epoch = max(state.max_epoch, epoch)
        state.last_seq = {}
        prev = offset - 1
        while prev >= self._start and prev in self._rejected:
            prev -= 1
        if prev >= self._start:
            frames = await self._raw.read_raw(prev, 1)
            if frames and frames[0][0] == prev:
                frame = decode_frame(frames[0][1])
                if frame.writer_id == state.writer_id or state.writer_id is None:
                    state.last_seq = {frame.writer_id: frame.seq}
        return state

    # --- the rest -----------------------------------------------------------

    def stats(self) -> Sequence[SegmentStats]:
        return self._raw.stats()

    @property
    def fenced(self) -> bool:
        return self._fenced

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._writer_task is not None:
            # Let what is already handed to the backend finish; fail what waits.
            _fail(self._queue, LedgerClosedError(f"ledger {self.name} closed"))
            self._queue = []
            self._writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer_task
        await self._raw.close()


def _fail(batch: Sequence[tuple[bytes, asyncio.Future[Position]]], exc: Exception) -> None:
    for _, fut in batch:
        if not fut.done():
            fut.set_exception(exc)

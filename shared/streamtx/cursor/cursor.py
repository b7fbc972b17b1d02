"""The durable cursor: a :class:`CursorState` persisted in a ledger of its own.

Every change is persisted by appending a whole snapshot of the state (see
:mod:`streamtx.cursor.state` for its layout) to the ledger
``"<data ledger name>/cursor/<cursor name>"``; recovery reads the last one.
Snapshots are group-committed: while one append is in flight, further changes
only touch memory and the next snapshot carries them all, so N concurrent
deletes cost about two appends. Every few snapshots the cursor ledger is
trimmed up to the latest one.

The cursor opens its ledger as the writer, which fences any earlier cursor of
the same name (a zombie broker): that one's next persist fails with
:class:`~streamtx.errors.FencedError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from streamtx.cursor.state import CursorState, Successor
from streamtx.errors import (
    CorruptEntryError,
    FencedError,
    InvalidPositionError,
    LedgerClosedError,
    LedgerError,
    MalformedError,
)
from streamtx.ledger.base import Ledger, LedgerFactory, Position

log = logging.getLogger(__name__)

default_trim_every = 100  # snapshots between trims of the cursor's own ledger


def cursor_ledger_name(ledger_name: str, cursor_name: str) -> str:
    """The name of the ledger that holds a cursor's snapshots."""
    return f"{ledger_name}/cursor/{cursor_name}"


@dataclass(frozen=True, slots=True)
class CursorStats:
    """A cursor's state and persistence counters, for the admin API's internal stats."""

    name: str
    mark_delete: Position | None
    individually_deleted_ranges: int
    partially_deleted_batches: int
    snapshots_written: int  # since open
    last_snapshot: Position | None
    last_snapshot_bytes: int


class Cursor:
    """A named, durable read state over one ledger; create it with :meth:`open`.

    Reads (:meth:`is_deleted`, :meth:`first_undeleted`, ...) answer from memory.
    Changes apply to memory at once and return only when a snapshot holding
    them is durable; if that persist fails the caller gets the error and the
    change may or may not survive a restart (the next snapshot carries it).
    """

    def __init__(
        self,
        ledger: Ledger,
        own: Ledger,
        name: str,
        state: CursorState,
        last_snapshot: Position | None,
        last_snapshot_bytes: int,
        *,
        trim_every: int,
    ) -> None:
        self._ledger = ledger
        self._own = own
        self._name = name
        self._state = state
        self._trim_every = trim_every
        self._durable_version = state.version
        self._durable_mark = state.mark_delete_id
        self._last_snapshot = last_snapshot
        self._last_snapshot_bytes = last_snapshot_bytes
        self._snapshots = 0
        self._since_trim = 0
        self._flush_task: asyncio.Task[None] | None = None
        self._trim_task: asyncio.Task[None] | None = None
        self._fenced = False
        self._closed = False

    @classmethod
    async def open(
        cls,
        ledgers: LedgerFactory,
        ledger: Ledger,
        name: str,
        *,
        trim_every: int = default_trim_every,
    ) -> Cursor:
        """Open (or create) cursor ``name`` over ``ledger``, fencing any earlier holder."""
        if not name or "/" in name:
            raise MalformedError(f"bad cursor name {name!r}")
        if trim_every < 1:
            raise MalformedError(f"trim_every must be >= 1, not {trim_every}")
        own = await ledgers.open(cursor_ledger_name(ledger.name, name), writer=True)
        try:
            successor = _successor_of(ledger)
            last = own.last_position()
            if last is None:
                return cls(ledger, own, name, CursorState(successor), None, 0, trim_every=trim_every)
            entries = await own.read(last, 1)
            if not entries or entries[0].position != last:
                raise CorruptEntryError(f"cursor {name}: last snapshot {last} cannot be read")
            data = entries[0].data
            state = CursorState.decode(data, successor)
            return cls(ledger, own, name, state, last, len(data), trim_every=trim_every)
        except BaseException:
            await own.close()
            raise

    # --- reads ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def ledger(self) -> Ledger:
        """The data ledger this cursor reads."""
        return self._ledger

    @property
    def saved(self) -> bool:
        """Whether a snapshot of this cursor was ever written (a new one has none)."""
        return self._last_snapshot is not None

    @property
    def fenced(self) -> bool:
        """True once another cursor of the same name took over."""
        return self._fenced

    @property
    def mark_delete_position(self) -> Position | None:
        """Every entry at or before it is deleted; None while nothing is."""
        mark = self._state.mark_delete_id
        return None if mark < 0 else Position(self._ledger.ledger_id, mark)

    def is_deleted(self, position: Position, batch_index: int | None = None) -> bool:
        """Whether the entry (or, with ``batch_index``, that record in it) is deleted."""
        return self._state.is_deleted(self._entry_id(position), batch_index)

    def deleted_batch_indexes(self, position: Position) -> int | None:
        """Bitset of deleted indexes of a partially deleted batched entry, else None."""
        return self._state.deleted_batch_indexes(self._entry_id(position))

    def first_undeleted(self, start: Position | None = None) -> Position:
        """The first position at or after ``start`` not wholly deleted (maybe past the end)."""
        entry_id = self._state.first_undeleted(-1 if start is None else self._entry_id(start))
        return Position(self._ledger.ledger_id, entry_id)

    @property
    def version(self) -> int:
        """Counts the changes made through this object since it opened (not persisted)."""
        return self._state.version

    def deleted_ranges(self) -> list[tuple[Position, Position]]:
        """The individually deleted entries past the mark-delete position, as inclusive ranges."""
        lid = self._ledger.ledger_id
        return [(Position(lid, lo), Position(lid, hi)) for lo, hi in self._state.ranges()]

    def partial_batches(self) -> list[tuple[Position, int, int]]:
        """``(position, batch size, deleted bits)`` of the partly deleted batched entries."""
        lid = self._ledger.ledger_id
        return [(Position(lid, e), size, bits) for e, size, bits in self._state.partial_batches()]

    def stats(self) -> CursorStats:
        return CursorStats(
            name=self._name,
            mark_delete=self.mark_delete_position,
            individually_deleted_ranges=self._state.range_count,
            partially_deleted_batches=self._state.partial_batch_count,
            snapshots_written=self._snapshots,
            last_snapshot=self._last_snapshot,
            last_snapshot_bytes=self._last_snapshot_bytes,
        )

    # --- changes -------------------------------------------------------------

    async def delete(self, positions: Iterable[Position]) -> None:
        """Delete these entries (every record of a batched one); return once durable."""
        self._check_writable()
        entry_ids = [self._entry_id(p) for p in positions]  # all checked before any applies
        for entry_id in entry_ids:
            self._state.delete(entry_id)
        await self._sync()

    async def delete_batch_index(self, position: Position, batch_index: int, batch_size: int) -> bool:
        """Delete one record of a batched entry; True when the whole entry is now deleted."""
        self._check_writable()
        whole = self._state.delete_batch_index(self._entry_id(position), batch_index, batch_size)
        await self._sync()
        return whole

    async def apply(
        self,
        positions: Iterable[Position] = (),
        batch_indexes: Iterable[tuple[Position, int, int]] = (),
        mark_delete: Position | None = None,
        batch_prefixes: Iterable[tuple[Position, int, int]] = (),
    ) -> None:
        """Apply a mixed batch of deletes at once and await ONE durable snapshot.

        ``positions``: whole entries to delete; ``batch_indexes``: ``(position,
        index, batch size)`` records to delete; ``batch_prefixes``: ``(position,
        index, batch size)``, the records 0 to ``index`` to delete; ``mark_delete``:
        delete every entry at or before it. All are checked before any applies.
        """
        self._check_writable()
        entry_ids = [self._entry_id(p) for p in positions]
        records = [(self._entry_id(p), i, n) for p, i, n in batch_indexes]
        prefixes = [(self._entry_id(p), i, n) for p, i, n in batch_prefixes]
        mark = None if mark_delete is None else self._entry_id(mark_delete)
        self._state.apply(entry_ids, records, mark, prefixes)
        await self._sync()

    async def mark_delete(self, position: Position) -> None:
        """Delete every entry at or before ``position`` (never moves back); return once durable."""
        self._check_writable()
        self._state.mark_delete(self._entry_id(position))
        await self._sync()

    async def sync(self) -> None:
        """Return once every change made so far is durable (at once when it already is).

        A change whose persist failed stays applied in memory; a caller retrying
        it finds nothing left to change, and must call this before answering.
        """
        self._check_writable()
        await self._sync()

    async def trim_ledger(self) -> None:
        """Trim the data ledger up to the durable mark-delete position.

        Only for a ledger this cursor alone consumes: with several cursors,
        trim before the lowest of their mark-delete positions instead.
        """
        self._check_writable()
        if self._durable_mark >= 0:
            next_id = self._ledger.next_entry_id(self._durable_mark)
            await self._ledger.trim(Position(self._ledger.ledger_id, next_id))

    # --- persistence -----------------------------------------------------------

    async def _sync(self) -> None:
        """Return once a snapshot holding the current state is durable."""
        target = self._state.version
        while self._durable_version < target:
            self._check_writable()
            task = self._flush_task
            if task is None or task.done():
                # Everyone woken by the previous flush shares this one.
                task = self._flush_task = asyncio.create_task(self._flush(), name=f"cursor-{self._own.name}")
            # Shielded: a cancelled caller must not abort a snapshot others wait for.
            await asyncio.shield(task)

    async def _flush(self) -> None:
        # Encode only now, after the callers that queued behind us made their changes.
        version, mark = self._state.version, self._state.mark_delete_id
        data = self._state.encode()
        try:
            position = await self._own.append(data)
        except FencedError:
            self._fenced = True
            raise
        self._durable_version = max(self._durable_version, version)
        self._durable_mark = max(self._durable_mark, mark)
        self._last_snapshot, self._last_snapshot_bytes = position, len(data)
        self._snapshots += 1
        self._since_trim += 1
        if self._since_trim >= self._trim_every and (self._trim_task is None or self._trim_task.done()):
            self._since_trim = 0
            # Not awaited: callers wait for their snapshot, not for housekeeping.
            self._trim_task = asyncio.create_task(self._trim_own(position))

    async def _trim_own(self, latest: Position) -> None:
        try:
            await self._own.trim(latest)
        except LedgerError as exc:  # the next trim retries; nothing is lost meanwhile
            log.warning("cursor %s: trimming its ledger failed: %s", self._own.name, exc)

    # --- the rest --------------------------------------------------------------

    def _entry_id(self, position: Position) -> int:
        if position.ledger_id != self._ledger.ledger_id:
            raise InvalidPositionError(f"{position} is not in ledger {self._ledger.name}")
        return position.entry_id

    def _check_writable(self) -> None:
        if self._closed:
            raise LedgerClosedError(f"cursor {self._own.name} is closed")
        if self._fenced:
            raise FencedError(f"cursor {self._own.name}: another cursor of this name took over")

    async def close(self) -> None:
        """Let an in-flight snapshot land, then close the cursor's ledger (not the data one)."""
        if self._closed:
            return
        self._closed = True
        for task in (self._flush_task, self._trim_task):
            if task is not None:
                # Its failure was already reported to the callers that waited on it.
                with contextlib.suppress(Exception):
                    await task
        await self._own.close()

    def __repr__(self) -> str:
        return f"Cursor({self._own.name!r}, mark_delete={self.mark_delete_position})"


def _successor_of(ledger: Ledger) -> Successor:
    """The id after an entry: the ledger's next live id, never one it has trimmed."""

    def successor(entry_id: int) -> int:
        first = ledger.first_position()
        if first is not None and entry_id < first.entry_id:
            return first.entry_id
        return ledger.next_entry_id(entry_id)

    return successor

"""The replay rule every batched log shares: which records of which entries are live.

A log written through the :class:`~streamtx.batching.BufferedWriter` holds
batched entries (magic ``0x0e01``, see :mod:`.codec`) and unbatched ones (one
record each), mixed. Its owner deletes finished records through a cursor: a
whole entry (an unbatched record, or a batched entry all of whose records are
gone) or one index of a batched entry. Replay hands on every record that is
neither in a deleted entry nor at a deleted index, in log order, with its
place ``(position, batch_index, batch_size)``.

Fence records, zombie writers' entries and duplicates of retried appends never
get here: the ledger layer drops them (:class:`~streamtx.ledger.frames.FenceTracker`),
and trimmed entries are gone. The transaction coordinator, the pending-ack
store and the Spark jobs (``spark-jobs/``) all replay through this one function.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from streamtx.batching.codec import decode_entry
from streamtx.ledger.base import Entry, Position

__all__ = ["Deletions", "StateDeletions", "replay_entries", "replay_records"]

Apply = Callable[[Position, int, int, bytes], object]


class Deletions(Protocol):
    """What a cursor knows about deleted entries and records (a :class:`~streamtx.cursor.Cursor`)."""

    def is_deleted(self, position: Position, batch_index: int | None = None) -> bool: ...
    def deleted_batch_indexes(self, position: Position) -> int | None: ...


class _EntryIdDeletions(Protocol):
    def is_deleted(self, entry_id: int, batch_index: int | None = None) -> bool: ...
    def deleted_batch_indexes(self, entry_id: int) -> int | None: ...


class StateDeletions:
    """:class:`Deletions` over a bare :class:`~streamtx.cursor.state.CursorState` (offline readers)."""

    def __init__(self, state: _EntryIdDeletions) -> None:
        self._state = state

    def is_deleted(self, position: Position, batch_index: int | None = None) -> bool:
        return self._state.is_deleted(position.entry_id, batch_index)

    def deleted_batch_indexes(self, position: Position) -> int | None:
        return self._state.deleted_batch_indexes(position.entry_id)


def replay_entries(entries: Iterable[Entry], deletions: Deletions | None, apply: Apply) -> tuple[int, int]:
    """Call ``apply(position, batch_index, batch_size, record)`` for each live record.

    Returns ``(records applied, records or entries skipped as deleted)``.
    """
    applied = skipped = 0
    for entry in entries:
        position = entry.position
        if deletions is not None and deletions.is_deleted(position):
            skipped += 1
            continue
        raws = decode_entry(entry.data)
        size = len(raws)
        bits = deletions.deleted_batch_indexes(position) if deletions is not None and size > 1 else None
        if bits is None:
            for index, raw in enumerate(raws):
                apply(position, index, size, raw)
            applied += size
            continue
        for index, raw in enumerate(raws):
            if bits >> index & 1:
                skipped += 1
            else:
                apply(position, index, size, raw)
                applied += 1
    return applied, skipped


def replay_records(
    records: Iterable[tuple[int, int, int, bytes]], ledger_id: int, deletions: Deletions | None, apply: Apply
) -> tuple[int, int]:
    """:func:`replay_entries` for records already out of their entries: a compacted base's
    ``(entry_id, batch_index, batch_size, record)`` (see :mod:`.compacted`), judged by the same rule."""
    applied = skipped = 0
    for entry_id, index, size, raw in records:
        position = Position(ledger_id, entry_id)
        if deletions is not None and deletions.is_deleted(position, index if size > 1 else None):
            skipped += 1
        else:
            apply(position, index, size, raw)
            applied += 1
    return applied, skipped

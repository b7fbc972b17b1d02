"""What a cursor has deleted, and the snapshot codec that persists it.

A :class:`CursorState` holds, in entry ids of one ledger:

* the mark-delete id: every entry ``<=`` it is deleted (-1 before any);
* individually deleted entries above it, as merged inclusive ranges;
* batch-index deletes (PIP-54, used by PIP-160's batched logs): for an entry
  holding N records, the set of deleted indexes as an int bitset; when all N
  bits are set the entry itself becomes deleted.

Entry ids grow but may have gaps (fences, dropped duplicates), so the state
asks a ``successor`` (the ledger's ``next_entry_id``) which id follows an
entry; the mark-delete id moves over deleted entries as far as they are
contiguous in that sense, and whatever falls at or below it is forgotten.

Snapshot layout. Fixed fields are big-endian; ``v`` is an unsigned LEB128
varint (7 bits a byte, low group first, high bit set on all but the last)::

    offset  size        field
    0       2           magic         b"CS"
    2       1           version       1
    3       8           mark_delete   signed; -1 = nothing deleted yet
    11      v           range_count   R
    .       v           batch_count   B
    then R individually deleted ranges, ascending:
            v           start_delta   start - prev; prev is mark_delete for the first
                                      range (>= 1), else the previous range's end (>= 2:
                                      ranges never overlap nor touch)
            v           span          end - start
    then B partially deleted batched entries, ascending:
            v           entry_delta   entry - prev; prev is mark_delete for the first,
                                      else the previous batched entry (>= 1)
            v           batch_size    N >= 1
            ceil(N/8)   deleted       bitset, little-endian: bit i set = index i deleted;
                                      never empty nor full (such an entry is untouched
                                      or wholly deleted), and the entry is in no range

Deltas keep a snapshot of 100k ranges of recent entries to a few hundred KB.
Decoding is strict (one spelling per state), so re-encoding a snapshot read
back with the same successor gives the same bytes.

This module is pure: no asyncio, no I/O.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator

from streamtx.cursor.ranges import RangeSet
from streamtx.errors import CorruptEntryError, MalformedError

MAGIC = b"CS"
VERSION = 1
_HEADER = struct.Struct(">2sBq")

Successor = Callable[[int], int]


def _plus_one(entry_id: int) -> int:
    return entry_id + 1


class CursorState:
    """A cursor's deletes over one ledger's entry ids; see the module docstring.

    ``version`` counts the changes made through this object (it is not
    persisted): a durable cursor compares it with the version it last wrote.
    """

    __slots__ = ("_batch_ids", "_batches", "_mark", "_ranges", "_succ", "version")

    def __init__(self, successor: Successor = _plus_one, *, mark_delete: int = -1) -> None:
        if mark_delete < -1:
            raise MalformedError(f"mark-delete id {mark_delete} is below -1")
        self._succ = successor
        self._mark = mark_delete
        self._ranges = RangeSet()
        self._batches: dict[int, tuple[int, int]] = {}  # entry -> (batch size, deleted bits)
        self._batch_ids: list[int] = []  # the keys of _batches, sorted
        self.version = 0

    # --- queries -------------------------------------------------------------

    @property
    def mark_delete_id(self) -> int:
        """Every entry ``<=`` this id is deleted; -1 when none is."""
        return self._mark

    @property
    def range_count(self) -> int:
        """How many ranges of individually deleted entries lie above the mark-delete id."""
        return len(self._ranges)

    @property
    def partial_batch_count(self) -> int:
        """How many batched entries have some, but not all, of their indexes deleted."""
        return len(self._batches)

    def ranges(self) -> Iterator[tuple[int, int]]:
        """The individually deleted entries above the mark-delete id, as inclusive ranges."""
        return iter(self._ranges)

    def partial_batches(self) -> Iterator[tuple[int, int, int]]:
        """``(entry_id, batch_size, deleted_bits)`` of partially deleted batched entries."""
        for entry_id in self._batch_ids:
            size, bits = self._batches[entry_id]
            yield entry_id, size, bits

    def is_deleted(self, entry_id: int, batch_index: int | None = None) -> bool:
        """Whether the entry (or, with ``batch_index``, that record inside it) is deleted."""
        if entry_id <= self._mark or entry_id in self._ranges:
            return True
        if batch_index is None:
            return False
        partial = self._batches.get(entry_id)
        return partial is not None and bool(partial[1] >> batch_index & 1)

    def deleted_batch_indexes(self, entry_id: int) -> int | None:
        """The bitset of deleted indexes of a partially deleted entry, else None.

        None both for an entry with no batch-index delete and for a wholly
        deleted one; ask :meth:`is_deleted` to tell them apart.
        """
        partial = self._batches.get(entry_id)
        return None if partial is None else partial[1]

    def first_undeleted(self, start: int = -1) -> int:
        """The first entry id ``>= start`` that is not wholly deleted (it may be past the end)."""
        entry_id = self._succ(max(start, self._mark + 1) - 1)
        while (covering := self._ranges.find(entry_id)) is not None:
            entry_id = self._succ(covering[1])
        return entry_id

    # --- changes -------------------------------------------------------------

    def delete(self, entry_id: int) -> bool:
        """Delete one entry; True if that changed anything."""
        return self.delete_range(entry_id, entry_id)

    def delete_range(self, first: int, last: int) -> bool:
        """Delete entries ``first..last`` (inclusive); True if that changed anything."""
        first = max(first, self._mark + 1)
        if first > last:
            return False
        self._drop_batches(first, last)
        if not self._ranges.add(first, last):
            return False
        self._changed()
        return True

    def delete_batch_index(self, entry_id: int, index: int, size: int) -> bool:
        """Delete record ``index`` of an entry of ``size`` records; True once all are deleted."""
        if size < 1 or not 0 <= index < size:
            raise MalformedError(f"batch index {index} is not within a batch of {size}")
        if self.is_deleted(entry_id):
            return True
        old_size, bits = self._batches.get(entry_id, (size, 0))
        if old_size != size:
            raise MalformedError(f"entry {entry_id} has {old_size} records, not {size}")
        new_bits = bits | 1 << index
        if new_bits == bits:
            return False
        if new_bits == (1 << size) - 1:
            self.delete(entry_id)  # drops the partial bitset too
            return True
        if entry_id not in self._batches:
            self._batch_ids.insert(bisect_left(self._batch_ids, entry_id), entry_id)
        self._batches[entry_id] = (size, new_bits)
        self.version += 1
        return False

    def apply(
        self,
        entries: Iterable[int] = (),
        batch_indexes: Iterable[tuple[int, int, int]] = (),
        mark_delete: int | None = None,
        batch_prefixes: Iterable[tuple[int, int, int]] = (),
    ) -> bool:
        """Apply a mixed batch of deletes in one step; True if that changed anything.

        ``entries`` are whole-entry deletes, ``batch_indexes`` are ``(entry_id,
        index, size)`` record deletes, ``batch_prefixes`` ``(entry_id, index, size)``
        deletes of the records 0 to ``index`` (a cumulative ack inside a batch: one
        step, not one per record), ``mark_delete`` (if given) moves the mark-delete
        id. Everything is checked before anything applies, so a malformed batch
        index leaves the state untouched.
        """
        entry_ids = sorted(set(entries))
        whole = set(entry_ids)
        mark = self._mark if mark_delete is None else max(self._mark, mark_delete)
        # Each as the bits it deletes.
        records = [(entry_id, 1 << index, size, index) for entry_id, index, size in batch_indexes]
        records += [(entry_id, (2 << index) - 1, size, index) for entry_id, index, size in batch_prefixes]
        sizes: dict[int, int] = {}
        for entry_id, _, size, index in records:
            if size < 1 or not 0 <= index < size:
                raise MalformedError(f"batch index {index} is not within a batch of {size}")
            if entry_id <= mark or entry_id in whole or entry_id in self._ranges:
                continue  # deleted once this applies: the size is not checked, as delete_batch_index
            known = sizes.setdefault(entry_id, self._batches.get(entry_id, (size, 0))[0])
            if known != size:
                raise MalformedError(f"entry {entry_id} has {known} records, not {size}")
        before = self.version
        if mark_delete is not None and mark_delete > self._mark:
            self._mark = mark_delete
            self.version += 1
        # Whole entries as merged runs of consecutive ids: one range insert each.
        i = 0
        while i < len(entry_ids):
            j = i
            while j + 1 < len(entry_ids) and entry_ids[j + 1] == entry_ids[j] + 1:
                j += 1
            first, last = max(entry_ids[i], self._mark + 1), entry_ids[j]
            if first <= last:
                self._drop_batches(first, last)
                if self._ranges.add(first, last):
                    self.version += 1
            i = j + 1
        changed_ranges = self.version != before
        for entry_id, deleting, size, _ in records:
            if self.is_deleted(entry_id):
                continue
            _size, bits = self._batches.get(entry_id, (size, 0))
            new_bits = bits | deleting
            if new_bits == bits:
                continue
            if new_bits == (1 << size) - 1:
                self._drop_batches(entry_id, entry_id)
                self._ranges.add(entry_id, entry_id)
                changed_ranges = True
            else:
                if entry_id not in self._batches:
                    self._batch_ids.insert(bisect_left(self._batch_ids, entry_id), entry_id)
                self._batches[entry_id] = (size, new_bits)
            self.version += 1
        if changed_ranges:
            self._changed()
        return self.version != before

    def mark_delete(self, entry_id: int) -> bool:
        """Delete every entry ``<= entry_id`` (it never moves back); True if it moved."""
        if entry_id <= self._mark:
            return False
        self._mark = entry_id
        self._changed()
        return True

    def _changed(self) -> None:
        """Advance the mark over contiguous deleted entries and forget what it passed."""
        self.version += 1
        while True:
            self._ranges.drop_through(self._mark)
            first = self._ranges.first()
            # `<=`, not `==`: ids between the mark and its successor are gaps, and
            # a caller may have deleted one of those too.
            if first is None or first[0] > self._succ(self._mark):
                break
            self._mark = first[1]
        self._drop_batches(-1, self._mark)

    def _drop_batches(self, first: int, last: int) -> None:
        lo = bisect_left(self._batch_ids, first)
        hi = bisect_right(self._batch_ids, last)
        if lo < hi:
            for entry_id in self._batch_ids[lo:hi]:
                del self._batches[entry_id]
            del self._batch_ids[lo:hi]

    # --- codec ---------------------------------------------------------------

    def encode(self) -> bytes:
        """The snapshot bytes (layout in the module docstring)."""
        out = bytearray(_HEADER.pack(MAGIC, VERSION, self._mark))
        _put(out, len(self._ranges))
        _put(out, len(self._batches))
        prev = self._mark
        for start, end in self._ranges:
            _put(out, start - prev)
            _put(out, end - start)
            prev = end
        prev = self._mark
        for entry_id in self._batch_ids:
            size, bits = self._batches[entry_id]
            _put(out, entry_id - prev)
            _put(out, size)
            out += bits.to_bytes((size + 7) // 8, "little")
            prev = entry_id
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes, successor: Successor = _plus_one) -> CursorState:
        """Rebuild a state from :meth:`encode`'s bytes; CorruptEntryError if malformed."""
        if len(data) < _HEADER.size:
            raise CorruptEntryError(f"cursor snapshot of {len(data)} bytes is too short")
        magic, version, mark = _HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION:
            raise CorruptEntryError(f"not a cursor snapshot (magic {magic!r}, version {version})")
        if mark < -1:
            raise CorruptEntryError(f"cursor snapshot with mark-delete {mark}")
        reader = _Reader(data, _HEADER.size)
        range_count, batch_count = reader.varint(), reader.varint()
        ranges: list[tuple[int, int]] = []
        prev = mark
        for i in range(range_count):
            start = prev + reader.varint(minimum=1 if i == 0 else 2)
            prev = start + reader.varint()
            ranges.append((start, prev))
        state = cls(successor, mark_delete=mark)
        state._ranges = RangeSet.from_sorted(ranges)
        prev = mark
        for _ in range(batch_count):
            entry_id = prev + reader.varint(minimum=1)
            size = reader.varint(minimum=1)
            bits = int.from_bytes(reader.take((size + 7) // 8), "little")
            if not 0 < bits < (1 << size) - 1 or entry_id in state._ranges:
                raise CorruptEntryError(f"cursor snapshot: bad batch bitset of entry {entry_id}")
            state._batches[entry_id] = (size, bits)
            state._batch_ids.append(entry_id)
            prev = entry_id
        if reader.pos != len(data):
            raise CorruptEntryError(f"cursor snapshot: {len(data) - reader.pos} trailing bytes")
        # The successor may know more gaps than the writer's did: move on if it can.
        state._changed()
        state.version = 0
        return state

    # --- the rest --------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CursorState):
            return NotImplemented
        return (
            self._mark == other._mark
            and self._batches == other._batches
            and list(self._ranges) == list(other._ranges)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"CursorState(mark_delete={self._mark}, ranges={len(self._ranges)}, "
            f"partial_batches={len(self._batches)})"
        )


def _put(out: bytearray, value: int) -> None:
    """Append ``value >= 0`` as an unsigned LEB128 varint."""
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


class _Reader:
    """A cursor over snapshot bytes that raises CorruptEntryError on anything short."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def varint(self, minimum: int = 0) -> int:
        data, pos = self.data, self.pos
        value = shift = 0
        while True:
            if pos >= len(data):
                raise CorruptEntryError("cursor snapshot is truncated")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        # A zero high group would make a second, longer spelling of the same value.
        if shift and byte == 0:
            raise CorruptEntryError("cursor snapshot: overlong varint")
        if value < minimum:
            raise CorruptEntryError(f"cursor snapshot: field {value} is below {minimum}")
        self.pos = pos
        return value

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise CorruptEntryError("cursor snapshot is truncated")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

"""What of one partition is out with consumers, unacked: who has each message, until when.

A unit is one message: ``(entry position, batch index or None for a one-message entry)``.
The read pass hands most entries out whole, and they are kept as Pulsar keeps its pending
acks: one record per entry, with a bitset of the batch indexes no longer out (acked, held by
a transaction, given back), not one record per message. What is handed out message by
message (a redelivery, an entry a fetch's limit cut) is kept per unit. An entry's bit set in
its record may be out again as a unit of its own (a redelivery).

Both maps are in hand-out order, which is deadline order (every hand-out is given ``now +
ack timeout``, or infinity), so an expiry scan stops at the first delivery still in time.
Whole entries are handed out past everything dispatched before: their positions ascend, and
what a cumulative ack covers of them is found by bisection.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from math import inf

from streamtx.ledger import Position
from streamtx.records.partition import EntryHeader

Unit = tuple[Position, int | None]


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored batch entry, as read: shared by the deliveries of its messages."""

    partition: int
    pos: Position
    data: bytes
    header: EntryHeader


@dataclass(frozen=True, slots=True)
class Delivery:
    """Who has the messages of one entry handed out in one go, until when: shared by those
    messages (one object per entry, not per message), so it is never changed in place;
    a redelivery makes its own."""

    consumer: str
    deadline: float  # loop time; inf when no ack timeout applies
    entry: Stored
    batch_size: int
    redeliveries: int = 0


def unit_order(unit: Unit) -> tuple[Position, int]:
    """A unit's place in its partition (a one-message entry's unit has no batch index)."""
    return unit[0], -1 if unit[1] is None else unit[1]


def entry_units(pos: Position, size: int, gone: int = 0, through: int | None = None) -> list[Unit]:
    """The units of an entry of ``size`` messages whose bits in ``gone`` are clear, up to
    batch index ``through`` (all when None)."""
    if size == 1:
        return [] if gone & 1 else [(pos, None)]
    n = size if through is None else min(through + 1, size)
    if not gone:  # by zip: no bytecode runs per message
        return list(zip(repeat(pos, n), range(n), strict=True))
    return [(pos, i) for i in range(n) if not gone >> i & 1]


def bits_units(pos: Position, size: int, bits: int) -> list[Unit]:
    """The units of an entry of ``size`` messages whose bits in ``bits`` are set."""
    if size == 1:
        return [(pos, None)] if bits & 1 else []
    full = (1 << size) - 1
    return entry_units(pos, size, full & ~bits)


class _Whole:
    """An entry handed out whole: its delivery, and which of its messages are no longer out."""

    __slots__ = ("delivery", "gone", "left")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.gone = 0  # bit i: batch index i is no longer out under this record
        self.left = delivery.batch_size

    def units(self, pos: Position, through: int | None = None) -> list[Unit]:
        return entry_units(pos, self.delivery.batch_size, self.gone, through)


class Taken:
    """Units taken back at once (by a cumulative ack): entries as ``(position, batch size, bits
    of the batch indexes taken)``, one record per entry as :class:`Outstanding` keeps them, and
    the rest unit by unit. Iterating yields every unit; the records are for whoever can keep
    them as they are (:class:`~streamtx.broker.held.Held`)."""

    __slots__ = ("entries", "units")

    def __init__(self, entries: list[tuple[Position, int, int]] | None = None,
                 units: list[Unit] | None = None) -> None:
        self.entries = entries if entries is not None else []
        self.units = units if units is not None else []

    def __iter__(self) -> Iterator[Unit]:
        for pos, size, bits in self.entries:
            yield from bits_units(pos, size, bits)
        yield from self.units


class Outstanding:
    """The units of one partition out with consumers (see the module's docstring).

    A mapping of unit to :class:`Delivery` in its reads (``in``, ``get``, ``[]``, ``len``;
    iteration in position order), changed by :meth:`add_entry`, :meth:`add`, :meth:`pop`,
    :meth:`forget`, :meth:`take_through`, :meth:`expire` and :meth:`clear`.
    """

    __slots__ = ("_count", "_entries", "_units", "_units_ascend")

    def __init__(self) -> None:
        self._entries: dict[Position, _Whole] = {}
        self._units: dict[Unit, Delivery] = {}
        self._count = 0
        # Whether ``_units`` ascend in insertion order (a fetch resuming in the entry it stopped
        # in keeps them so; a redelivery mostly does not): then a cumulative ack's share of them
        # is a prefix, found by bisection.
        self._units_ascend = True

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, unit: object) -> bool:
        return self.get(unit) is not None  # type: ignore[arg-type]

    def get(self, unit: Unit) -> Delivery | None:
        w = self._entries.get(unit[0])
        if w is not None and not w.gone >> (unit[1] or 0) & 1:
            return w.delivery
        return self._units.get(unit)

    def __getitem__(self, unit: Unit) -> Delivery:
        d = self.get(unit)
        if d is None:
            raise KeyError(unit)
        return d

    def __iter__(self) -> Iterator[Unit]:
        return iter(self.units())

    def units(self) -> list[Unit]:
        """Every unit out, in position order."""
        out = [u for pos, w in self._entries.items() for u in w.units(pos)]
        if self._units:
            out += self._units
            out.sort(key=unit_order)
        return out

    def add_entry(self, pos: Position, delivery: Delivery) -> None:
        """All of the entry at ``pos`` is handed out with ``delivery`` (past all handed out
        before: positions of whole entries ascend)."""
        self._entries[pos] = _Whole(delivery)
        self._count += delivery.batch_size

    def add(self, unit: Unit, delivery: Delivery) -> None:
        """One unit is handed out (a redelivery, or part of an entry)."""
        units = self._units
        if unit in units:
            del units[unit]  # re-inserted at the end: deadline order
        else:
            self._count += 1
        if self._units_ascend and units and unit_order(unit) <= unit_order(next(reversed(units))):
            self._units_ascend = False
        units[unit] = delivery

    def add_range(self, pos: Position, start: int, n: int, delivery: Delivery) -> None:
        """Batch indexes ``start`` to ``start + n - 1`` of the entry at ``pos``, none of them
        out, are handed out (a fetch's limit cut the entry): by zip, no bytecode per message."""
        units = self._units
        if self._units_ascend and units and unit_order(next(reversed(units))) >= (pos, start):
            self._units_ascend = False
        units.update(zip(zip(repeat(pos, n), range(start, start + n), strict=True),
                         repeat(delivery, n), strict=True))
        self._count += n

    def pop(self, unit: Unit) -> Delivery | None:
        """Take ``unit`` back (acked, held, given back); its delivery, or None if not out."""
        w = self._entries.get(unit[0])
        if w is not None:
            bit = 1 << (unit[1] or 0)
            if not w.gone & bit:
                w.gone |= bit
                w.left -= 1
                if not w.left:
                    del self._entries[unit[0]]
                self._count -= 1
                return w.delivery
        d = self._units.pop(unit, None)
        if d is not None:
            self._count -= 1
            if not self._units:
                self._units_ascend = True
        return d

    def forget(self, units: list[Unit]) -> None:
        if self._count:
            pop = self.pop
            for u in units:
                pop(u)

    def clear(self) -> None:
        self._entries.clear()
        self._units.clear()
        self._count = 0
        self._units_ascend = True

    def take_through(self, pos: Position, batch_index: int | None) -> Taken:
        """Take back every unit at or before ``(pos, batch_index)`` (a cumulative ack's reach);
        return them, an entry handed out whole as one record (no per-message work)."""
        taken_entries: list[tuple[Position, int, int]] = []
        count = 0
        entries = self._entries
        if entries:
            keys = list(entries)
            for p in keys[:bisect_right(keys, pos)]:
                w = entries[p]
                size = w.delivery.batch_size
                if p == pos and batch_index is not None and batch_index < size - 1:
                    bits = ((1 << batch_index + 1) - 1) & ~w.gone
                    w.gone |= bits
                    n = bits.bit_count()
                    w.left -= n
                    if not w.left:
                        del entries[p]
                else:
                    bits = ((1 << size) - 1) & ~w.gone
                    n = w.left
                    del entries[p]
                if bits:
                    taken_entries.append((p, size, bits))
                    count += n
        covered: list[Unit] = []
        units = self._units
        if units:
            bound = (pos, inf if batch_index is None else batch_index)
            if self._units_ascend:
                keys_u = list(units)
                covered = keys_u[:bisect_right(keys_u, bound, key=unit_order)]
            else:
                covered = [u for u in units if unit_order(u) <= bound]
            for u in covered:
                del units[u]
            if not units:
                self._units_ascend = True
        self._count -= count + len(covered)
        return Taken(taken_entries, covered)

    def expire(self, now: float) -> list[tuple[Unit, Delivery]]:
        """Take back what is past its ack deadline; return it with its deliveries."""
        late: list[tuple[Unit, Delivery]] = []
        entries = self._entries
        late_entries = []
        for p, w in entries.items():
            if w.delivery.deadline > now:
                break
            late_entries.append(p)
            late += zip(w.units(p), repeat(w.delivery))
        for p in late_entries:
            del entries[p]
        units = self._units
        late_units = []
        for u, d in units.items():
            if d.deadline > now:
                break
            late_units.append((u, d))
        for u, _ in late_units:
            del units[u]
        if not units:
            self._units_ascend = True
        if late and late_units:
            late += late_units
            late.sort(key=lambda ud: unit_order(ud[0]))  # redelivered in position order
        else:
            late += late_units
        self._count -= len(late)
        return late

    def next_deadline(self) -> float | None:
        """The earliest ack deadline of what is out."""
        first = [next(iter(self._entries.values())).delivery.deadline] if self._entries else []
        if self._units:
            first.append(next(iter(self._units.values())).deadline)
        return min(first, default=None)

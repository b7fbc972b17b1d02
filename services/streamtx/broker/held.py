"""What open transactions' acks hold on one partition of one subscription, and for whom.

A held unit is neither dispatched nor acked outside its transaction until the
transaction ends (docs/api.md "Transactions"). A worker's transaction acks each fetch
cumulatively: what such an ack takes back from consumers comes as whole entries
(:class:`~streamtx.broker.outstanding.Taken`) and is held as it comes, one record per
entry with a bitset of the batch indexes held (as Pulsar keeps batch-index acks), not one
record per message; the transaction's end lets go of its records without looking at
their messages. Units acked one by one, the units of an entry a fetch cut, and holds
restored from the pending-ack store are kept unit by unit.

A unit is in one place at most: an entry's record or the map of units. A cumulative ack
also holds its *reach*: every message at or before its id, whether it was out with a
consumer, queued, or not read again since a rewind (dispatch skips the reach until the
transaction ends), which is also what a restart restores of it (the pending-ack store
names the cumulative id, not each message it covers).

Units arrive here canonical (:meth:`Subscription.units
<streamtx.broker.subscription.Subscription.units>`): ``(entry, None)`` for a one-message
entry, ``(entry, i)`` for a batch entry's message, never a whole-entry id of a batch.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

from streamtx.broker.outstanding import Taken, Unit, bits_units, unit_order
from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position


class Unnamed(enum.Enum):
    """The holder of a unit restored from a pending-ack store that did not say which
    transaction holds it (an older store): its own state, not a transaction id (``0:0``, the
    sentinel before, is the first transaction a fresh coordinator opens). Any transaction's
    ack may take such a unit over, and any transaction's end that lists it lets go of it."""

    HOLDER = "unnamed"


UNNAMED = Unnamed.HOLDER
Holder = TxnId | Unnamed


class _Run:
    """The batch indexes of one entry that one transaction holds (bit i: index i; a
    one-message entry's unit, which has no index, is bit 0)."""

    __slots__ = ("bits", "size", "txn")

    def __init__(self, txn: TxnId, size: int, bits: int) -> None:
        self.txn = txn
        self.size = size
        self.bits = bits


class Held:
    """The units of one partition held by open transactions, each with its holder.

    Read like a mapping of unit to transaction (``in``, :meth:`get`, ``len``, iteration);
    changed by :meth:`hold`, :meth:`hold_taken`, :meth:`restore`, :meth:`pop`,
    :meth:`let_go` and :meth:`clear`.
    """

    __slots__ = ("_entries", "_reach", "_units")

    def __init__(self) -> None:
        self._entries: dict[Position, _Run] = {}
        self._units: dict[Unit, Holder] = {}
        self._reach: dict[TxnId, Unit] = {}  # a transaction's cumulative ack: all up to this unit

    def __bool__(self) -> bool:
        return bool(self._entries or self._units or self._reach)

    def __len__(self) -> int:
        """The units held one by one or as entry records (a reach's messages are not counted:
        which of them are still undeleted is the cursor's to say)."""
        return sum(r.bits.bit_count() for r in self._entries.values()) + len(self._units)

    def __iter__(self) -> Iterator[Unit]:
        for pos, r in self._entries.items():
            yield from bits_units(pos, r.size, r.bits)
        yield from self._units

    def __contains__(self, unit: object) -> bool:
        return self.get(unit) is not None  # type: ignore[arg-type]

    def _run_of(self, unit: Unit) -> _Run | None:
        r = self._entries.get(unit[0])
        bi = unit[1]
        if r is None or (bi is None) != (r.size == 1):
            return None
        return r if r.bits >> (bi or 0) & 1 else None

    def get(self, unit: Unit) -> Holder | None:
        """Who holds ``unit`` (deleted or not: the cursor says that), or None."""
        if self._entries:
            r = self._run_of(unit)
            if r is not None:
                return r.txn
        got = self._units.get(unit)
        if got is None and self._reach:
            at = unit_order(unit)
            for txn, end in self._reach.items():
                if at <= unit_order(end):
                    return txn
        return got

    def bits_at(self, pos: Position, size: int) -> int:
        """The batch indexes held of the entry at ``pos`` (of ``size`` messages), as bits."""
        r = self._entries.get(pos)
        bits = r.bits if r is not None and (r.size == 1) == (size == 1) else 0
        units = self._units
        if units:
            if size == 1:
                bits |= (pos, None) in units
            else:
                for i in range(size):
                    if (pos, i) in units:
                        bits |= 1 << i
        for end_pos, end_bi in self._reach.values():
            if pos < end_pos:
                return (1 << size) - 1
            if pos == end_pos:
                bits |= (1 << (size if end_bi is None else end_bi + 1)) - 1
        return bits

    def reach(self, txn: TxnId) -> Unit | None:
        """How far ``txn``'s cumulative acks reach here, if it acked cumulatively."""
        return self._reach.get(txn)

    def set_reach(self, txn: TxnId, unit: Unit | None) -> None:
        """``txn``'s cumulative acks reach ``unit`` (None: no reach)."""
        if unit is None:
            self._reach.pop(txn, None)
        else:
            self._reach[txn] = unit

    def extend_reach(self, txn: TxnId, unit: Unit) -> Unit | None:
        """``txn`` acked cumulatively through ``unit``: its reach is at least that; return the
        reach before (for :meth:`set_reach` to undo it)."""
        before = self._reach.get(txn)
        if before is None or unit_order(unit) > unit_order(before):
            self._reach[txn] = unit
        return before

    def hold(self, units: Iterable[Unit], txn: TxnId) -> list[Unit]:
        """Hold ``units`` for ``txn`` (one another transaction holds is taken over: the caller
        ruled on conflicts); return those ``txn`` did not hold already."""
        listed = list(dict.fromkeys(units))
        own = self._units
        if self._entries:
            fresh = []
            for u in listed:
                r = self._run_of(u)
                if r is not None and r.txn == txn:
                    continue
                if r is not None:
                    self._drop_bit(u, r)
                if own.get(u) != txn:
                    fresh.append(u)
                own[u] = txn
            return fresh
        fresh = [u for u in listed if own.get(u) != txn] if own else listed
        own.update(dict.fromkeys(listed, txn))
        return fresh

    def hold_taken(self, taken: Taken, txn: TxnId) -> None:
        """Hold for ``txn`` what a cumulative ack took back from consumers (so held by nobody:
        what is held is never out): an entry's record as it is, without looking at its messages."""
        entries = self._entries
        for pos, size, bits in taken.entries:
            r = entries.get(pos)
            if r is None:
                entries[pos] = _Run(txn, size, bits)
            elif r.txn == txn and r.size == size:
                r.bits |= bits
            else:  # another transaction holds other messages of the entry
                self._units.update(dict.fromkeys(bits_units(pos, size, bits), txn))
        if taken.units:
            self._units.update(dict.fromkeys(taken.units, txn))

    def restore(self, unit: Unit, txn: TxnId | None) -> None:
        """Hold ``unit`` as the pending-ack store reported (holder None: it did not say),
        unless it is held already."""
        if unit not in self:
            self._units[unit] = UNNAMED if txn is None else txn

    def pop(self, unit: Unit) -> Holder | None:
        """Let go of ``unit``; the transaction that held it, or None."""
        if self._entries:
            r = self._run_of(unit)
            if r is not None:
                self._drop_bit(unit, r)
                return r.txn
        return self._units.pop(unit, None)

    def _drop_bit(self, unit: Unit, r: _Run) -> None:
        r.bits &= ~(1 << (unit[1] or 0))
        if not r.bits:
            del self._entries[unit[0]]

    def holders(self) -> set[Holder]:
        return {r.txn for r in self._entries.values()} | set(self._units.values()) | set(self._reach)

    def units_of(self, txn: TxnId) -> list[Unit]:
        """Every unit ``txn`` holds, in no particular order."""
        out = [u for pos, r in self._entries.items() if r.txn == txn for u in bits_units(pos, r.size, r.bits)]
        out += [u for u, h in self._units.items() if h == txn]
        return out

    def let_go(self, txn: TxnId | None, listed: list[Unit], *, units: bool) -> list[Unit]:
        """``txn`` ended: let go of everything it holds (its reach too), and of the ``listed``
        units (those its end names) that it or an unnamed holder holds (every listed one when
        ``txn`` is None, an end from before holders were recorded). Return the units let go when
        ``units`` is true (an abort gives them back; what only its reach held is the caller's
        to find again), else nothing: a commit's records go unopened."""
        if txn is None:
            gone = list(dict.fromkeys(listed))
            for u in gone:
                self.pop(u)
            return gone if units else []
        self._reach.pop(txn, None)
        gone = [u for u in dict.fromkeys(listed) if self.get(u) in (txn, UNNAMED)]
        for u in gone:
            self.pop(u)
        if units:
            gone += self.units_of(txn)
        if self._entries:
            self._entries = {p: r for p, r in self._entries.items() if r.txn != txn}
        if self._units:
            holders = list(self._units.values())
            if holders.count(txn) == len(holders):  # mostly one transaction holds all: a count in C
                self._units.clear()
            else:
                self._units = {u: h for u, h in self._units.items() if h != txn}
        return gone if units else []

    def first_through(self, pos: Position, batch_index: int | None, floor: Position) -> Unit | None:
        """A held unit at or before ``(pos, batch_index)`` (a cumulative ack's reach), if any;
        ``floor``: the first entry not wholly deleted (a transaction's reach holds from there)."""
        if self._reach and floor <= pos:
            if any(floor <= end[0] for end in self._reach.values()):
                return floor, None
        for p, r in self._entries.items():
            if p < pos or (p == pos and (batch_index is None or r.size == 1)):
                return bits_units(p, r.size, r.bits)[0]
            if p == pos and batch_index is not None:
                lowest = (r.bits & -r.bits).bit_length() - 1
                if lowest <= batch_index:
                    return p, lowest
        for u in self._units:
            if u[0] < pos or (u[0] == pos and (batch_index is None or (u[1] or 0) <= batch_index)):
                return u
        return None

    def clear(self) -> None:
        self._entries.clear()
        self._units.clear()
        self._reach.clear()

"""What open transactions' acks hold on one partition of one subscription, and for whom.

A held unit is neither dispatched nor acked outside its transaction until the
transaction ends (docs/api.md "Transactions"). A worker's transaction acks each fetch
cumulatively: what such an ack takes back from consumers comes as whole entries
(:class:`~streamtx.broker.outstanding.Taken`) and is held as it comes, one record per
entry with a bitset of the batch indexes held (as Pulsar keeps batch-index acks), not one
record per message; the transaction's end lets go of its records without looking at
their messages. Units acked one by one, the units of an entry a fetch cut, and holds
restored from the pending-ack store are kept unit by unit.

A unit is in one place at most: an entry's record or the map of units.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from streamtx.broker.outstanding import Taken, Unit, bits_units
from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position

UNKNOWN = TxnId(0, 0)  # held since before a restart: the pending-ack store did not say by whom


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

    __slots__ = ("_entries", "_units")

    def __init__(self) -> None:
        self._entries: dict[Position, _Run] = {}
        self._units: dict[Unit, TxnId] = {}

    def __bool__(self) -> bool:
        return bool(self._entries or self._units)

    def __len__(self) -> int:
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

    def get(self, unit: Unit) -> TxnId | None:
        """The transaction holding ``unit``, or None."""
        if self._entries:
            r = self._run_of(unit)
            if r is not None:
                return r.txn
        return self._units.get(unit)

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
        return bits

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
            self._units[unit] = UNKNOWN if txn is None else txn

    def pop(self, unit: Unit) -> TxnId | None:
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

    def holders(self) -> set[TxnId]:
        return {r.txn for r in self._entries.values()} | set(self._units.values())

    def units_of(self, txn: TxnId) -> list[Unit]:
        """Every unit ``txn`` holds, in no particular order."""
        out = [u for pos, r in self._entries.items() if r.txn == txn for u in bits_units(pos, r.size, r.bits)]
        out += [u for u, h in self._units.items() if h == txn]
        return out

    def let_go(self, txn: TxnId | None, listed: list[Unit], *, units: bool) -> list[Unit]:
        """``txn`` ended: let go of everything it holds, and of the ``listed`` units (those its
        end names) that it or an unknown holder holds (every listed one when ``txn`` is None,
        an end from before holders were recorded). Return the units let go when ``units`` is
        true (an abort gives them back), else nothing: a commit's records go unopened."""
        if txn is None:
            gone = list(dict.fromkeys(listed))
            for u in gone:
                self.pop(u)
            return gone if units else []
        gone = [u for u in dict.fromkeys(listed) if self.get(u) in (txn, UNKNOWN)]
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

    def first_through(self, pos: Position, batch_index: int | None) -> Unit | None:
        """A held unit at or before ``(pos, batch_index)`` (a cumulative ack's reach), if any."""
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

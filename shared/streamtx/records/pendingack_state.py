"""The pending-ack state of one subscription, and its conflict rules.

Pure: no I/O, no asyncio. The store (:mod:`.store`) calls it, and replay
rebuilds it by :meth:`SubscriptionState.apply`-ing the log's records in order.

Two kinds of check guard a subscription, following Pulsar and YDB (docs/background.md):

* **At ack time** (pessimistic, Pulsar's rules): a message held by another open
  transaction, or already acked by a committed one, cannot be acked (409). A
  whole-entry id ``l:e`` and a batch-index id ``l:e:i`` overlap; two batch
  indexes of one entry do not. Cumulative acks are per partition (a partition
  is one ledger: an id's ledger names it): one cumulative ack request names at
  most one id per partition, only one open transaction may hold a cumulative
  ack on a partition, and a cumulative ack at or below that partition's
  committed cumulative position is already acked. As in Pulsar's pending-ack
  handle, an individual ack within another open transaction's cumulative range
  is valid at ack time (so is a cumulative ack over another's individual ids).
* **At prepare** (optimistic, YDB's offset-range check): a transaction's
  consumed positions - its individual ids, and for a cumulative ack at ``c``
  every position of its partition after the committed cumulative position up
  to ``c`` - must not
  overlap what another transaction already committed, or prepared (so two
  overlapping prepares cannot both pass: the first one reserves). Ack-time
  checks do not compare an individual ack with another transaction's open
  cumulative range; this check catches that case when the second one commits.

Committed positions are kept in memory only, bounded by ``max_committed_ids``
(oldest commits forgotten first), and individual ids at or below the committed
cumulative position are dropped (it covers them). Forgetting is safe because
the store tells the broker to delete committed positions from its cursor
*before* it logs the commit, and the broker refuses to take an ack for a
deleted position: the memory only has to cover the window in which the broker
has not applied the commit yet, and a restart loses nothing the broker needs.
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError
from streamtx.ledger import Position
from streamtx.records.pendingack import MessageId, PendingAck, Record, RecordKind

Entry = tuple[int, int]  # (ledger_id, entry_id) of a message's entry
_whole = -1  # batch_index of an id naming a whole entry


class TxnPhase(enum.Enum):
    """Where a transaction is on this subscription."""

    OPEN = "OPEN"
    PREPARED = "PREPARED"
    ENDING = "ENDING"  # end received: no more acks, the store is telling the broker


@dataclass(frozen=True, slots=True)
class LogSlot:
    """Where one of a transaction's records lives, for batch-index deletion."""

    position: Position
    batch_index: int
    batch_size: int


@dataclass(slots=True)
class TxnAcks:
    """The acks one transaction holds on this subscription."""

    txn: TxnId
    ids: set[MessageId] = field(default_factory=set)
    cumulative: dict[int, MessageId] = field(default_factory=dict)  # ledger (partition) → id
    phase: TxnPhase = TxnPhase.OPEN
    slots: list[LogSlot] = field(default_factory=list)
    # When this process first saw the transaction hold something here (its
    # clock; a replayed transaction counts from the replay): the stuck-txn
    # checker's age.
    since: float = 0.0

    def message_ids(self) -> list[MessageId]:
        """Every id this transaction acked, the cumulative one last."""
        out = sorted(self.ids)
        out += [c for _, c in sorted(self.cumulative.items()) if c not in self.ids]
        return out


def _covers(cumulative: MessageId, mid: MessageId) -> bool:
    """Whether a cumulative ack at ``cumulative`` acks ``mid`` too (same partition only)."""
    if mid.ledger_id != cumulative.ledger_id:
        return False
    if mid.entry != cumulative.entry:
        return mid.entry < cumulative.entry
    return _whole in (mid.batch_index, cumulative.batch_index) or mid.batch_index <= cumulative.batch_index


def _fully_covers(cumulative: MessageId, mid: MessageId) -> bool:
    """Whether a cumulative ack at ``cumulative`` acks ALL of ``mid``: a whole-entry id is
    only partly acked by a cumulative ack that ends inside that entry."""
    if mid.batch_index == _whole and cumulative.entry == mid.entry and cumulative.batch_index != _whole:
        return False
    return _covers(cumulative, mid)


class _Index:
    """Who owns which message: entry -> {batch_index (-1 whole) -> txn}."""

    def __init__(self) -> None:
        self._by_entry: dict[Entry, dict[int, TxnId]] = {}
        self._len = 0  # kept, not summed: the committed bound checks it on every commit

    def __len__(self) -> int:
        return self._len

    def owner_conflicting(self, mid: MessageId, txn: TxnId | None) -> TxnId | None:
        """An owner other than ``txn`` of ``mid`` or of an id overlapping it."""
        owners = self._by_entry.get(mid.entry)
        if not owners:
            return None
        if mid.batch_index == _whole:
            return next((t for t in owners.values() if t != txn), None)
        for key in (_whole, mid.batch_index):
            owner = owners.get(key)
            if owner is not None and owner != txn:
                return owner
        return None

    def add(self, mid: MessageId, txn: TxnId) -> None:
        owners = self._by_entry.setdefault(mid.entry, {})
        self._len += mid.batch_index not in owners
        owners[mid.batch_index] = txn

    def remove(self, mid: MessageId, txn: TxnId) -> None:
        owners = self._by_entry.get(mid.entry)
        if owners is not None and owners.get(mid.batch_index) == txn:
            del owners[mid.batch_index]
            self._len -= 1
            if not owners:
                del self._by_entry[mid.entry]

    def items(self) -> Iterator[tuple[MessageId, TxnId]]:
        for (ledger, entry), owners in self._by_entry.items():
            for index, txn in owners.items():
                yield MessageId(ledger, entry, index), txn

    def drop_covered(self, cumulative: MessageId) -> None:
        """Forget every id a committed cumulative ack covers."""
        for entry in [e for e in self._by_entry if e <= cumulative.entry]:
            owners = self._by_entry[entry]
            for index in [i for i in owners if _fully_covers(cumulative, MessageId(*entry, i))]:
                del owners[index]
                self._len -= 1
            if not owners:
                del self._by_entry[entry]


class SubscriptionState:
    """Open transactions' acks and recently committed positions of one subscription."""

    def __init__(
        self, *, max_committed_ids: int = 100_000, max_ended_txns: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_committed_ids = max_committed_ids
        self._clock = clock
        self.max_ended_txns = max_ended_txns
        self.txns: dict[TxnId, TxnAcks] = {}
        self._held = _Index()  # individual ids of open transactions
        self._committed = _Index()  # individual ids of committed transactions (bounded)
        self._committed_order: OrderedDict[TxnId, tuple[MessageId, ...]] = OrderedDict()
        self.committed_cumulative: dict[int, MessageId] = {}  # ledger (partition) → mark-delete
        # Recently ended transactions: an ack racing the end (a broker retry,
        # a TC timeout) must not reopen a transaction nobody will end again.
        # Ends of transactions that held nothing here are remembered too (the
        # coordinator's abort may arrive before the client's first ack).
        # Memory only: after a restart the stuck-txn checker covers it.
        self._ended: OrderedDict[TxnId, RecordKind] = OrderedDict()

    # --- reads -----------------------------------------------------------------

    def held_ids(self) -> list[MessageId]:
        """Every id held by an open (or prepared, or ending) transaction."""
        out = {mid for mid, _ in self._held.items()}
        out.update(c for t in self.txns.values() for c in t.cumulative.values())
        return sorted(out)

    def held_by_txn(self) -> dict[TxnId, list[MessageId]]:
        """:meth:`held_ids` by the transaction holding them (each id once, under its holder)."""
        out: dict[TxnId, set[MessageId]] = {}
        for mid, txn in self._held.items():
            out.setdefault(txn, set()).add(mid)
        for t in self.txns.values():
            out.setdefault(t.txn, set()).update(t.cumulative.values())
        return {txn: sorted(ids) for txn, ids in out.items()}

    @property
    def committed_id_count(self) -> int:
        return len(self._committed)

    def ended(self, txn: TxnId) -> RecordKind | None:
        """COMMITTED or ABORTED if ``txn`` ended here recently, else None."""
        return self._ended.get(txn)

    def stuck_txns(self, older_than_s: float) -> list[TxnId]:
        """Transactions holding acks here for longer than ``older_than_s``.

        Ending ones too: an end that failed (broker down) leaves its transaction
        ENDING until someone repeats the end.
        """
        now = self._clock()
        return [t.txn for t in self.txns.values() if now - t.since > older_than_s]

    # --- ack time --------------------------------------------------------------

    def check_ack(self, txn: TxnId, ids: Iterable[MessageId], cumulative: bool) -> None:
        """Raise ConflictError if ``txn`` may not ack ``ids`` now (Pulsar's rules)."""
        if (kind := self._ended.get(txn)) is not None:
            raise ConflictError(f"transaction {txn} is not open: it is {kind.name}")
        current = self.txns.get(txn)
        if current is not None and current.phase is not TxnPhase.OPEN:
            raise ConflictError(f"transaction {txn} is not open: it is {current.phase.value}")
        ids = list(ids)
        others = [t for t in self.txns.values() if t.txn != txn]
        if cumulative:
            if len({m.ledger_id for m in ids}) != len(ids):
                raise ConflictError("a cumulative ack names at most one message id per partition")
            for mid in ids:
                other = next((t for t in others if mid.ledger_id in t.cumulative), None)
                if other is not None:
                    raise ConflictError(f"transaction {other.txn} holds a cumulative ack on the "
                                        f"partition of {mid}")
        for mid in ids:
            owner = self._held.owner_conflicting(mid, txn)
            if owner is not None:
                raise ConflictError(f"message {mid} is held by transaction {owner}")
            if self._committed.owner_conflicting(mid, None) is not None or self._below_floor(mid):
                raise ConflictError(f"message {mid} is already acked")

    def _below_floor(self, mid: MessageId) -> bool:
        floor = self.committed_cumulative.get(mid.ledger_id)
        return floor is not None and _covers(floor, mid)


    def add_ack(self, txn: TxnId, ids: Iterable[MessageId], cumulative: bool) -> TxnAcks:
        """Hold ``ids`` for ``txn`` (no checks: call :meth:`check_ack` first, or replay)."""
        acks = self.txns.get(txn)
        if acks is None:
            acks = self.txns[txn] = TxnAcks(txn, since=self._clock())
        for mid in ids:
            if cumulative:
                current = acks.cumulative.get(mid.ledger_id)
                if current is None or current < mid:
                    acks.cumulative[mid.ledger_id] = mid
            else:
                acks.ids.add(mid)
                self._held.add(mid, txn)
        return acks

    def remove_ack(self, txn: TxnId, ids: Iterable[MessageId], cumulative: bool, previous: TxnAcks) -> None:
        """Undo an :meth:`add_ack` whose write failed (``previous``: ids held before it)."""
        acks = self.txns.get(txn)
        if acks is None:
            return
        for mid in ids:
            if not cumulative and mid not in previous.ids:
                acks.ids.discard(mid)
                self._held.remove(mid, txn)
        acks.cumulative = dict(previous.cumulative)
        if not acks.ids and not acks.cumulative and not acks.slots:
            del self.txns[txn]

    # --- prepare: the optimistic check -----------------------------------------

    def check_prepare(self, txn: TxnId) -> None:
        """Raise ConflictError if ``txn`` consumed what another transaction committed or prepared."""
        acks = self.txns.get(txn)
        if acks is None or acks.phase is TxnPhase.PREPARED:
            return
        if acks.phase is TxnPhase.ENDING:
            raise ConflictError(f"transaction {txn} is ending")
        for mid in acks.ids:
            if self._committed.owner_conflicting(mid, txn) is not None or self._below_floor(mid):
                raise ConflictError(f"message {mid} was already committed by another transaction")
        prepared = [t for t in self.txns.values() if t.phase is TxnPhase.PREPARED and t.txn != txn]
        for other in prepared:
            for mid in acks.ids:
                if any(_overlap(o, mid) for o in other.ids):
                    raise ConflictError(f"message {mid} is in prepared transaction {other.txn}")
                if any(_covers(c, mid) for c in other.cumulative.values()):
                    raise ConflictError(f"message {mid} is in prepared transaction {other.txn}")
        for cumulative in acks.cumulative.values():
            self._check_cumulative_range(txn, cumulative, prepared)

    def _check_cumulative_range(self, txn: TxnId, cumulative: MessageId, prepared: list[TxnAcks]) -> None:
        """A cumulative ack consumes (its partition's committed cumulative, cumulative]: nobody
        else may own any of it."""
        floor = self.committed_cumulative.get(cumulative.ledger_id)
        if floor is not None and _covers(floor, cumulative):
            raise ConflictError(f"message {cumulative} was already committed by another transaction")

        def in_range(mid: MessageId) -> bool:
            # a whole-entry id that the floor ends inside of is only partly below it: the
            # rest of it is still in this range
            return _covers(cumulative, mid) and not (floor is not None and _fully_covers(floor, mid))

        for mid, owner in self._committed.items():
            if owner != txn and in_range(mid):
                raise ConflictError(f"message {mid} was already committed by transaction {owner}")
        for other in prepared:
            if any(in_range(mid) for mid in other.ids) or any(
                in_range(c) for c in other.cumulative.values()
            ):
                raise ConflictError(f"transaction {other.txn} prepared messages this one consumed")

    def prepare(self, txn: TxnId) -> bool:
        """Reserve ``txn``'s positions; False when it holds nothing here (nothing to log)."""
        acks = self.txns.get(txn)
        if acks is None:
            return False
        acks.phase = TxnPhase.PREPARED
        return True

    def unprepare(self, txn: TxnId) -> None:
        """Undo :meth:`prepare` when the PREPARED record could not be written."""
        acks = self.txns.get(txn)
        if acks is not None and acks.phase is TxnPhase.PREPARED:
            acks.phase = TxnPhase.OPEN

    # --- end -------------------------------------------------------------------

    def begin_end(self, txn: TxnId) -> TxnAcks | None:
        """Stop taking acks for ``txn``; its acks, or None when it holds none here."""
        acks = self.txns.get(txn)
        if acks is not None:
            acks.phase = TxnPhase.ENDING
        return acks

    def finish_end(self, txn: TxnId, kind: RecordKind) -> TxnAcks | None:
        """Release ``txn``'s holds; on COMMITTED remember its positions (bounded).

        The end is remembered (bounded) even when ``txn`` holds nothing here, so
        a late ack of it is refused.
        """
        acks = self.txns.pop(txn, None)
        self._ended[txn] = kind
        self._ended.move_to_end(txn)
        while len(self._ended) > self.max_ended_txns:
            self._ended.popitem(last=False)
        if acks is None:
            return None
        for mid in acks.ids:
            self._held.remove(mid, txn)
        if kind is RecordKind.COMMITTED:
            self._remember_commit(acks)
        return acks

    def _remember_commit(self, acks: TxnAcks) -> None:
        for ledger, cumulative in acks.cumulative.items():
            floor = self.committed_cumulative.get(ledger)
            if floor is None or floor < cumulative:
                self.committed_cumulative[ledger] = cumulative
                self._committed.drop_covered(cumulative)
        if self.max_committed_ids <= 0:
            return  # none remembered (a compaction's replay): adding ids only to evict them costs a third
        # An id stays known as committed unless the floor acks all of it (a whole-entry id
        # is only partly below a floor inside its entry: its other messages must still
        # conflict with another transaction's acks).
        floors = self.committed_cumulative
        kept = tuple(m for m in acks.ids
                     if not (m.ledger_id in floors and _fully_covers(floors[m.ledger_id], m)))
        for mid in kept:
            self._committed.add(mid, acks.txn)
        self._committed_order[acks.txn] = kept
        while len(self._committed) > self.max_committed_ids and self._committed_order:
            old_txn, old_ids = self._committed_order.popitem(last=False)
            for mid in old_ids:
                self._committed.remove(mid, old_txn)

    # --- replay ----------------------------------------------------------------

    def apply(self, record: Record, slot: LogSlot) -> list[LogSlot]:
        """Replay one logged record (no checks: the log is the truth).

        Returns the log slots that are now garbage: those of a transaction the
        record ends (its own included), whose batch-index deletes were lost.
        """
        if isinstance(record, PendingAck):
            if record.txn in self._ended:
                return [slot]  # a leftover of an ended transaction
            self.add_ack(record.txn, record.message_ids, record.cumulative).slots.append(slot)
            return []
        acks = self.txns.get(record.txn)
        if record.kind is RecordKind.PREPARED:
            if acks is None:
                return [slot]
            acks.phase = TxnPhase.PREPARED
            acks.slots.append(slot)
            return []
        ended = self.finish_end(record.txn, record.kind)
        return [*(ended.slots if ended else []), slot]


def _overlap(a: MessageId, b: MessageId) -> bool:
    """Whether two ids of the same entry name a common message."""
    return a.entry == b.entry and (_whole in (a.batch_index, b.batch_index) or a.batch_index == b.batch_index)

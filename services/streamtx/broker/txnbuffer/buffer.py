"""The transaction buffer's state for one partition. Pure: no I/O, no asyncio.

It follows the partition ledger entry by entry (``on_message``, ``on_marker``)
and answers what dispatch may hand out:

* ``ongoing``: open transactions with the position of their first message, in
  the order of that position (entries are applied in log order);
* ``max_read_position``: the last position a reader may see, just before the
  first message of the oldest ongoing transaction, or the last applied entry;
* ``aborted``: aborted transaction ids ordered by their abort marker's position
  (PIP-178), kept in sealed segments of ``segment_size`` ids plus one unsealed
  tail (PIP-196), so a snapshot writes each sealed segment once;
* a bounded memory of recently ended transactions, so a repeated end answers
  the same and writes nothing.

Aborted ids are dropped only once the partition is trimmed past their marker
(every message of a transaction precedes its marker).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from streamtx.contracts.states import Action
from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position

Marker = tuple[int, int]  # an abort marker's (ledger_id, entry_id): a Position or a plain pair

recent_ended_max = 100_000  # ended txns remembered for idempotent repeats
snapshot_ended_max = 1000  # of which the latest commits / marker-less ends go in a snapshot


@dataclass(slots=True)
class Segment:
    """A sealed run of aborted ids (marker order); ``ref`` is where a snapshot stored it."""

    segment_id: int
    ids: list[tuple[TxnId, Marker]]
    ref: Position | None = None

    @property
    def last_marker(self) -> Position:
        return Position(*self.ids[-1][1])

    @property
    def first_marker(self) -> Position:
        return Position(*self.ids[0][1])


@dataclass(slots=True)
class Ended:
    action: Action
    marker: Position | None


@dataclass
class TxnBufferState:
    segment_size: int = 1000
    ongoing: OrderedDict[TxnId, Position] = field(default_factory=OrderedDict)
    # A plain dict: lookups only (a million ids load twice as fast as into an OrderedDict);
    # the marker order lives in the segments.
    aborted: dict[TxnId, Marker] = field(default_factory=dict)
    sealed: deque[Segment] = field(default_factory=deque)
    unsealed: list[tuple[TxnId, Marker]] = field(default_factory=list)
    ended: OrderedDict[TxnId, Ended] = field(default_factory=OrderedDict)
    last_position: Position | None = None
    max_read_floor: Position | None = None  # from a snapshot: never move back
    next_segment_id: int = 0
    ops_since_snapshot: int = 0

    # --- following the log --------------------------------------------------

    def on_entry(self, position: Position) -> None:
        """Any entry applied (a non-transactional batch, a producer entry)."""
        if self.last_position is None or position > self.last_position:
            self.last_position = position

    def on_message(self, position: Position, txn: TxnId | None) -> None:
        self.on_entry(position)
        if txn is not None and txn not in self.ongoing and txn not in self.ended and txn not in self.aborted:
            self.ongoing[txn] = position
            self.ops_since_snapshot += 1

    def on_marker(self, position: Position, txn: TxnId, action: Action) -> None:
        self.on_entry(position)
        self.ongoing.pop(txn, None)
        self._remember(txn, Ended(action, position))
        self.ops_since_snapshot += 1
        if action is Action.ABORT and txn not in self.aborted:
            self.add_aborted(txn, position)

    def add_aborted(self, txn: TxnId, marker: Marker) -> None:
        self.aborted[txn] = marker
        self.unsealed.append((txn, marker))
        if len(self.unsealed) >= self.segment_size:
            self.sealed.append(Segment(self.next_segment_id, self.unsealed))
            self.next_segment_id += 1
            self.unsealed = []

    def end_without_marker(self, txn: TxnId, action: Action) -> None:
        """The TC ended a txn that never produced here: remember the answer only."""
        self._remember(txn, Ended(action, None))

    def _remember(self, txn: TxnId, ended: Ended) -> None:
        self.ended[txn] = ended
        self.ended.move_to_end(txn)
        while len(self.ended) > recent_ended_max:
            self.ended.popitem(last=False)

    # --- questions dispatch asks --------------------------------------------

    def max_read_position(self) -> Position | None:
        if self.ongoing:
            first = next(iter(self.ongoing.values()))
            limit: Position | None = Position(first.ledger_id, first.entry_id - 1)
        else:
            limit = self.last_position
        floor = self.max_read_floor
        if floor is not None and (limit is None or floor > limit):
            return floor
        return limit

    def is_aborted(self, txn: TxnId) -> bool:
        return txn in self.aborted

    def ended_as(self, txn: TxnId) -> Ended | None:
        ended = self.ended.get(txn)
        if ended is None and (marker := self.aborted.get(txn)) is not None:
            return Ended(Action.ABORT, Position(*marker))
        return ended

    # --- trimming -----------------------------------------------------------

    def trim(self, first_live: Position) -> int:
        """Drop aborted ids whose marker is before ``first_live``; return how many.

        Walks the segments, which hold the ids in marker order; a segment only
        partly trimmed stays whole (a later load drops its early ids again).
        """
        dropped = 0
        pop = self.aborted.pop
        while self.sealed and self.sealed[0].last_marker < first_live:
            for txn, _ in self.sealed.popleft().ids:
                dropped += pop(txn, None) is not None
        if self.sealed:
            for txn, marker in self.sealed[0].ids:
                if marker >= first_live:
                    break
                dropped += pop(txn, None) is not None
        if self.unsealed and self.unsealed[0][1] < first_live:
            for txn, marker in self.unsealed:
                if marker < first_live:
                    dropped += pop(txn, None) is not None
            self.unsealed = [(t, m) for t, m in self.unsealed if m >= first_live]
        if dropped:
            self.ops_since_snapshot += 1
        return dropped

    # --- snapshot support ---------------------------------------------------

    def load_segments(self, segments: list[Segment], unsealed: list[tuple[TxnId, Marker]]) -> None:
        """Restore aborted ids from a snapshot (segments in marker order)."""
        # Aborted ids answer ``ended_as`` through ``aborted``: no per-id work but the dict.
        for seg in segments:
            self.sealed.append(seg)
            self.aborted.update(seg.ids)
            self.next_segment_id = max(self.next_segment_id, seg.segment_id + 1)
        for txn, marker in unsealed:
            self.add_aborted(txn, marker)

    def recent_ends(self) -> list[list[Any]]:
        """The latest ends an abort marker does not already record, oldest first."""
        out: list[list[Any]] = []
        for scanned, (txn, e) in enumerate(reversed(self.ended.items())):
            if len(out) >= snapshot_ended_max or scanned >= 20 * snapshot_ended_max:
                break
            if e.action is Action.COMMIT or e.marker is None:
                m = e.marker
                out.append([txn[0], txn[1], e.action.value, m[0] if m else None, m[1] if m else None])
        out.reverse()
        return out

    def restore_ends(self, ends: list[list[Any]]) -> None:
        for most, least, action, lid, eid in ends:
            marker = Position(int(lid), int(eid)) if lid is not None else None
            self._remember(TxnId(int(most), int(least)), Ended(Action(action), marker))

    def stats(self) -> dict[str, object]:
        mrp = self.max_read_position()
        return {
            "maxReadPosition": str(mrp) if mrp is not None else None,
            "ongoingTxnSize": len(self.ongoing),
            "abortedTxnCount": len(self.aborted),
            "totalAbortedTransactions": len(self.aborted),  # PIP-196's name
            "snapshotType": "Segment",
            "segmentsSize": len(self.sealed),
            "unsealedAbortedTxnIdSize": len(self.unsealed),
            "segmentCapacity": self.segment_size,
        }

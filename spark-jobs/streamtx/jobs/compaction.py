"""What a compaction keeps of one log, decided by the owner's own replay. Pure.

The records of a log below the cut (a compacted base first, if one is in
force, then the log's live entries) are replayed exactly as the owning
service replays them: the cursor's deletions by the shared rule of
:mod:`streamtx.batching.replay`, the records into the service's own state
(:class:`~streamtx.records.txntable.TxnTable`,
:class:`~streamtx.records.pendingack_state.SubscriptionState`). What the state still
stands on is kept, with its original place in the log:

* transaction log: every record of a transaction not in a final state or
  finished within the coordinator's ``finished_retention_ms`` (it still
  answers for those: a retried commit, a participant's stuck checker), the
  live id reservation, and the records of the transaction with the highest id
  when no reservation covers it (older finished transactions, superseded
  reservations and leftovers are dropped: the coordinator deletes them itself
  too);
* pending-ack log: every record of a transaction that holds acks (open,
  prepared, ending), and the end marker of each recently ended transaction
  the state remembers (so a late ack found after the cut is still refused);
* transaction-buffer snapshot ledger (no cursor, no batches): the newest
  complete snapshot as the broker's recovery picks it
  (:func:`streamtx.records.tbsnapshot.pick`): its index and the segments it
  names, plus the segments written after it (an index past the cut may name
  them); everything when no snapshot below the cut is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from streamtx.batching.codec import decode_entry
from streamtx.batching.compacted import BaseRecord
from streamtx.batching.replay import Deletions, replay_entries, replay_records
from streamtx.contracts.txnid import TxnId
from streamtx.errors import CorruptEntryError
from streamtx.ledger.base import Entry, Position
from streamtx.records import pendingack as pa
from streamtx.records import tbsnapshot as sc
from streamtx.records import txnlog as tc
from streamtx.records.pendingack_state import LogSlot, SubscriptionState
from streamtx.records.txntable import TxnTable

Place = tuple[int, int, int]  # entry_id, batch_index, batch_size
_tuple_new = tuple.__new__


@dataclass
class Kept:
    """The outcome for one log: the records kept, and the counts around them."""

    records: list[BaseRecord]
    records_before: int
    bytes_before: int

    @property
    def bytes_after(self) -> int:
        return sum(len(r[3]) + 16 for r in self.records)


class _Replay:
    """Feeds base records and entries, in log order, to ``apply``; finds kept records' bytes after."""

    def __init__(self, ledger_id: int, deletions: Deletions | None) -> None:
        self.ledger_id = ledger_id
        self.deletions = deletions
        self.base: dict[Place, bytes] = {}
        self.payloads: dict[int, bytes] = {}  # entry id -> payload (no per-record copy kept)
        self.bytes = 0

    def run(self, base: Iterable[BaseRecord], entries: Iterable[tuple[int, bytes]],
            apply: Callable[[Position, int, int, bytes], object]) -> int:
        self.base = {(e, i, n): raw for e, i, n, raw in base}
        n = replay_records(((e, i, size, raw) for (e, i, size), raw in self.base.items()), self.ledger_id,
                           self.deletions, apply)[0]
        lid, payloads = self.ledger_id, self.payloads

        def live() -> Iterator[Entry]:
            for entry_id, payload in entries:
                payloads[entry_id] = payload
                self.bytes += len(payload)
                yield Entry(Position(lid, entry_id), payload)

        return n + replay_entries(live(), self.deletions, apply)[0]

    def kept(self, places: Iterable[Place], before: int) -> Kept:
        recs = []
        decoded: dict[int, list[bytes]] = {}
        for place in sorted(set(places)):
            raw = self.base.get(place)
            if raw is None:
                entry_id, index, _ = place
                if entry_id not in decoded:
                    decoded[entry_id] = decode_entry(self.payloads[entry_id])
                raw = decoded[entry_id][index]
            recs.append((*place, raw))
        return Kept(recs, before, self.bytes)


def compact_txn_log(coordinator_id: int, ledger_id: int, deletions: Deletions | None,
                    base: Iterable[BaseRecord], entries: Iterable[tuple[int, bytes]], *,
                    finished_since_ms: int = 0) -> Kept:
    """What a transaction log keeps (see the module docstring).

    ``finished_since_ms``: a transaction finished at or after this wall-clock
    time (now minus the coordinator's ``finished_retention_ms``) is kept whole.
    """
    table = TxnTable(coordinator_id)
    replay = _Replay(ledger_id, deletions)

    table_apply, decode = table.apply, tc.decode

    def apply(position: Position, index: int, size: int, raw: bytes) -> None:
        # tuple.__new__: the NamedTuple's own constructor costs twice as much (per record).
        table_apply(_tuple_new(tc.LogRef, (position, index, size)), decode(raw))

    before = replay.run(base, entries, apply)
    keep = [(r.position.entry_id, r.batch_index, r.batch_size) for m in table.txns.values()
            if not m.state.is_final or m.ended_at_ms >= finished_since_ms for r in m.refs]
    if table.reserve_ref is not None:
        r = table.reserve_ref
        keep.append((r.position.entry_id, r.batch_index, r.batch_size))
    if table.max_counter >= table.reserved:
        # No reservation covers the highest id handed out: keep that transaction's
        # records (it replays as finished), or a replay would hand its id out again.
        top = table.get(TxnId.of(coordinator_id, table.max_counter))
        keep += [(r.position.entry_id, r.batch_index, r.batch_size) for r in (top.refs if top else ())]
    return replay.kept(keep, before)


def compact_pending_ack_log(ledger_id: int, deletions: Deletions | None, base: Iterable[BaseRecord],
                            entries: Iterable[tuple[int, bytes]], *, max_ended_txns: int = 10_000) -> Kept:
    """What a pending-ack log keeps (see the module docstring)."""
    # Committed positions are memory the base does not keep: remember none.
    state = SubscriptionState(max_committed_ids=0, max_ended_txns=max_ended_txns)
    replay = _Replay(ledger_id, deletions)
    end_marker: dict[TxnId, Place] = {}

    def apply(position: Position, index: int, size: int, raw: bytes) -> None:
        record = pa.decode(raw)
        state.apply(record, LogSlot(position, index, size))
        if isinstance(record, pa.TxnMarker) and record.kind is not pa.RecordKind.PREPARED:
            end_marker[record.txn] = (position.entry_id, index, size)

    before = replay.run(base, entries, apply)
    keep = [(s.position.entry_id, s.batch_index, s.batch_size) for a in state.txns.values() for s in a.slots]
    keep += [place for txn, place in end_marker.items() if state.ended(txn) is not None]
    return replay.kept(keep, before)


def compact_snapshot_log(ledger_id: int, base: Iterable[BaseRecord],
                         entries: Iterable[tuple[int, bytes]]) -> Kept:
    """What a transaction-buffer snapshot ledger keeps (see the module docstring)."""
    records = {entry_id: raw for entry_id, _, _, raw in base}
    size = 0
    for entry_id, payload in entries:
        records[entry_id] = payload
        size += len(payload)
    picked = sc.pick(records, ledger_id)
    keep: set[int] = set(records)
    if picked is not None:
        at, index, _ = picked
        keep = {at, *(s.ref.entry_id for s in index.segments)}
        keep.update(e for e, raw in records.items() if e > at and _is_segment(raw))
    return Kept([(e, 0, 1, records[e]) for e in sorted(keep)], len(records), size)


def _is_segment(raw: bytes) -> bool:
    try:
        return sc.record_kind(raw) is sc.RecordKind.SEGMENT
    except CorruptEntryError:
        return False

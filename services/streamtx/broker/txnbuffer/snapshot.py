"""The transaction buffer's snapshot ledger ``tbsnapshot/<partition>`` (PIP-178/196).

``take`` writes each sealed segment not yet stored, then one index naming every
live segment, the unsealed tail, ``maxReadPosition``, the ongoing transactions
and the producers. Only the index makes a snapshot count: a crash between
segments and index leaves the previous index in force, and the previous index's
segments are still there because the ledger is trimmed only below the oldest
segment the newest durable index names. ``load`` returns the newest index whose
segments all read back; when none does, the caller replays the partition.
Live segments are rewritten once dead records outnumber them (see ``write``).

**Offline compaction** (the ``compact`` Spark job) uses the same mechanism as
for the transaction and pending-ack logs (:mod:`streamtx.batching.compacted`):
the job never writes this ledger (that would fence the broker); it writes a
sealed base ``tbsnapshot/<partition>/base/<g>`` holding, with their original
entry ids, the records below its cut that :func:`pick` needs: the newest
complete index, the segments it names, and the segments written after it (a
newer index above the cut may name them); then it commits the manifest. The
broker reads base records then the ledger (:func:`load`, the ledger wins where
both hold an entry), so a base that is not committed or not adopted changes
nothing; it adopts a base (trims the ledger below the cut) when it recovers and
after a snapshot, once the base holds every record its newest index stands on
(:func:`needed`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streamtx.batching import compacted
from streamtx.batching.compacted import BaseRecord, Ref
from streamtx.broker.producers import ProducerTable
from streamtx.broker.txnbuffer.buffer import Segment, TxnBufferState
from streamtx.errors import LedgerError, StreamtxError
from streamtx.ledger import Ledger, LedgerFactory, Position
from streamtx.records import tbsnapshot as sc

log = logging.getLogger(__name__)

_scan_chunk = 1000
_min_dead_records = 64  # rewrite live segments only once this many dead records pile up
_adopt_check_s = 5.0  # how often a running broker looks for a compacted base to adopt


@dataclass(slots=True)
class Loaded:
    index: sc.SnapshotIndex
    segments: list[Segment]
    position: Position


def capture(state: TxnBufferState, producers: ProducerTable, sequence: int) -> tuple[
    list[Segment], sc.SnapshotIndex
]:
    """Freeze what a snapshot writes, synchronously (state may change while it is written)."""
    segments = list(state.sealed)
    index = sc.SnapshotIndex(
        sequence=sequence,
        timestamp_ms=int(time.time() * 1000),
        max_read=state.max_read_position(),
        snapshot_position=state.last_position,
        unsealed=list(state.unsealed),
        ongoing=list(state.ongoing.items()),
        producers=producers.to_json(),
        ended=state.recent_ends(),
    )
    return segments, index


async def write(ledger: Ledger, segments: list[Segment], index: sc.SnapshotIndex) -> Position:
    """Write the missing segments, then the index; trim what no index needs any more.

    The ledger is trimmed only below the oldest live segment, so every index
    written since stays too. Once those dead records outnumber the live
    segments, the live segments are written again at the end (the old copies
    stay until the new index is durable), and the trim after this index drops
    all of it: the ledger holds O(live segments) records, amortised O(1) writes.
    """
    refs = [s.ref for s in segments if s.ref is not None]
    last = ledger.last_position()
    if refs and last is not None:
        dead = last.entry_id - min(refs).entry_id + 1 - len(refs)
        if dead > max(len(segments), _min_dead_records):
            for seg in segments:
                seg.ref = None
    for seg in segments:
        if seg.ref is None:
            seg.ref = await ledger.append(sc.encode_segment(seg.segment_id, seg.ids))
    index.segments = [
        sc.SegmentRef(s.segment_id, s.ref, len(s.ids), s.first_marker, s.last_marker)
        for s in segments if s.ref is not None
    ]
    position = await ledger.append(sc.encode_index(index))
    oldest = min([s.ref for s in index.segments], default=position)
    if ledger.first_position() is not None and oldest > ledger.first_position():  # type: ignore[operator]
        try:
            await ledger.trim(oldest)
        except LedgerError as exc:  # the next snapshot trims again; nothing is lost
            log.warning("tb snapshot %s: trim failed: %s", ledger.name, exc)
    return position


async def load(ledger: Ledger, base: Iterable[BaseRecord] = ()) -> Loaded | None:
    """The newest complete snapshot in a compacted ``base`` and the ledger, or None."""
    records = {entry_id: raw for entry_id, _, _, raw in base}
    start: Position | None = None
    while True:
        entries = await ledger.read(start, _scan_chunk)
        if not entries:
            break
        for e in entries:
            records[e.position.entry_id] = e.data
        last = entries[-1].position
        start = Position(last.ledger_id, ledger.next_entry_id(last.entry_id))
    picked = pick(records, ledger.ledger_id, ledger.name)
    if picked is None:
        return None
    entry_id, index, segments = picked
    return Loaded(index, segments, Position(ledger.ledger_id, entry_id))


def pick(records: Mapping[int, bytes], ledger_id: int, name: str = "") -> tuple[
    int, sc.SnapshotIndex, list[Segment]
] | None:
    """The newest complete snapshot (:func:`streamtx.records.tbsnapshot.pick`), its segments built."""
    picked = sc.pick(records, ledger_id, name)
    if picked is None:
        return None
    entry_id, index, segments = picked
    pairs = zip(index.segments, segments, strict=True)
    return entry_id, index, [Segment(ref.segment_id, ids, ref.ref) for ref, ids in pairs]


def needed(position: Position, index: sc.SnapshotIndex) -> list[Ref]:
    """The records a snapshot stands on (its index and segments), as a compacted base places them."""
    return [(position, 0, 1), *((s.ref, 0, 1) for s in index.segments)]


class Adoption:
    """The broker's side of an offline compaction of one snapshot ledger (module docstring)."""

    def __init__(self, factory: LedgerFactory | None, ledger: Ledger) -> None:
        self.factory = factory
        self.ledger = ledger
        self.generation = -1  # the compacted base generation adopted
        self.check_every_s = _adopt_check_s
        self._checked_at = float("-inf")

    async def base(self) -> list[BaseRecord]:
        """The records of the compacted base in force (none when there is none or it is unusable)."""
        if self.factory is None:
            return []
        try:
            loaded = await compacted.load_base(self.factory, self.ledger.name)
        except StreamtxError as exc:  # the ledger still holds what was not adopted
            log.warning("tb snapshot %s: compacted base unusable (%s); ignored", self.ledger.name, exc)
            return []
        return loaded[1] if loaded else []

    async def adopt(self, snapshot: tuple[Position, sc.SnapshotIndex] | None, *, now: bool = False) -> None:
        """Trim below a newer base's cut if it holds what ``snapshot`` (the newest durable one) stands on.

        Called under the partition's snapshot lock, so no index is written meanwhile.
        """
        if self.factory is None or (not now and time.monotonic() < self._checked_at + self.check_every_s):
            return
        self._checked_at = time.monotonic()
        try:
            self.generation = await compacted.adopt(self.factory, self.ledger,
                                                    needed(*snapshot) if snapshot else (), self.generation)
        except StreamtxError as exc:  # the next check tries again; nothing is lost
            log.warning("tb snapshot %s: adopting a compaction failed: %s", self.ledger.name, exc)

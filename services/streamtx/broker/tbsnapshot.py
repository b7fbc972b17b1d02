"""The transaction buffer's snapshot ledger ``tbsnapshot/<partition>`` (PIP-178/196).

``take`` writes each sealed segment not yet stored, then one index naming every
live segment, the unsealed tail, ``maxReadPosition``, the ongoing transactions
and the producers. Only the index makes a snapshot count: a crash between
segments and index leaves the previous index in force, and the previous index's
segments are still there because the ledger is trimmed only below the oldest
segment the newest durable index names. ``load`` returns the newest index whose
segments all read back; when none does, the caller replays the partition.
Live segments are rewritten once dead records outnumber them (see ``write``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from streamtx.broker import snapshot_codec as sc
from streamtx.broker.producers import ProducerTable
from streamtx.broker.txnbuffer import Segment, TxnBufferState
from streamtx.errors import CorruptEntryError, LedgerError
from streamtx.ledger import Ledger, Position

log = logging.getLogger(__name__)

_scan_chunk = 1000
_min_dead_records = 64  # rewrite live segments only once this many dead records pile up


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


async def load(ledger: Ledger) -> Loaded | None:
    """The newest complete snapshot, or None."""
    indexes: list[tuple[Position, bytes]] = []
    start: Position | None = None
    while True:
        entries = await ledger.read(start, _scan_chunk)
        if not entries:
            break
        for e in entries:
            try:
                if sc.record_kind(e.data) is sc.RecordKind.INDEX:
                    indexes.append((e.position, e.data))
            except CorruptEntryError:
                log.warning("tb snapshot %s: skipping bad record at %s", ledger.name, e.position)
        last = entries[-1].position
        start = Position(last.ledger_id, ledger.next_entry_id(last.entry_id))
    for position, data in reversed(indexes):
        try:
            index = sc.decode_index(data)
            segments = [await _read_segment(ledger, ref) for ref in index.segments]
        except (CorruptEntryError, LedgerError) as exc:
            log.warning("tb snapshot %s: index at %s unusable (%s); trying an older one",
                        ledger.name, position, exc)
            continue
        return Loaded(index, segments, position)
    return None


async def _read_segment(ledger: Ledger, ref: sc.SegmentRef) -> Segment:
    entries = await ledger.read(ref.ref, 1)
    if not entries or entries[0].position != ref.ref:
        raise CorruptEntryError(f"segment {ref.segment_id} at {ref.ref} is gone")
    segment_id, ids = sc.decode_segment(entries[0].data)
    if segment_id != ref.segment_id or len(ids) != ref.count:
        raise CorruptEntryError(f"segment at {ref.ref} is not segment {ref.segment_id}")
    return Segment(segment_id, ids, ref.ref)

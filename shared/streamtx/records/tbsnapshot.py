"""Transaction buffer snapshot records (PIP-178, segmented as in PIP-196). Pure.

A snapshot ledger ``tbsnapshot/<partition>`` holds two kinds of record. A
sealed segment is written once and then named by every later index; an index
is the commit point of a snapshot. Recovery uses the last index whose segments
it can read; segments written after it (a snapshot cut short) are ignored. A
compactor keeping the latest record per key (``seg-<id>``, ``index``) keeps
everything the latest index names. Integers are big-endian; a position is
``i64 ledger_id, i64 entry_id`` and "none" is ``-1, -1``::

    segment: u8 version(1), u8 kind(1), u64 segment_id, u32 n,
             n × (u64 txn_most, u64 txn_least, u64 ledger_id, u64 entry_id) of the marker
    index:   u8 version(1), u8 kind(2), u64 sequence, i64 timestamp_ms,
             position max_read, position snapshot_position,
             u32 n_segments × (u64 segment_id, position ref, u32 count,
                               position first_marker, position last_marker),
             u32 n_unsealed × (u64 × 4, as in a segment),
             u32 n_ongoing × (u64 txn_most, u64 txn_least, u64 ledger_id, u64 entry_id of its first),
             u32 len, JSON {"producers": [...], "ended": [[most, least, action, marker
             ledger_id or null, marker entry_id or null], ...]} (recent commits and
             marker-less ends, so a repeated end answers the same after a restart)
"""

from __future__ import annotations

import enum
import json
import logging
import struct
import sys
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import CorruptEntryError
from streamtx.ledger import Position

Marker = tuple[int, int]  # (ledger_id, entry_id): a Position or a plain pair
Item = tuple[TxnId, Marker]
version = 1
log = logging.getLogger(__name__)
_swap = sys.byteorder == "little"

_kind = struct.Struct(">BB")
_seg_head = struct.Struct(">QI")
_item = struct.Struct(">QQQQ")
_pos = struct.Struct(">qq")
_u32 = struct.Struct(">I")
_index_head = struct.Struct(">Qqqqqq")
_seg_ref = struct.Struct(">QqqIqqqq")


class RecordKind(enum.IntEnum):
    SEGMENT = 1
    INDEX = 2


@dataclass(frozen=True, slots=True)
class SegmentRef:
    segment_id: int
    ref: Position
    count: int
    first_marker: Position
    last_marker: Position


@dataclass(slots=True)
class SnapshotIndex:
    sequence: int
    timestamp_ms: int
    max_read: Position | None
    snapshot_position: Position | None
    segments: list[SegmentRef] = field(default_factory=list)
    unsealed: list[Item] = field(default_factory=list)
    ongoing: list[Item] = field(default_factory=list)
    producers: list[dict[str, Any]] = field(default_factory=list)
    ended: list[list[Any]] = field(default_factory=list)


def _p(pos: Position | None) -> tuple[int, int]:
    return (-1, -1) if pos is None else (pos.ledger_id, pos.entry_id)


def _unp(lid: int, eid: int) -> Position | None:
    return None if lid == -1 and eid == -1 else Position(lid, eid)


def record_kind(data: bytes) -> RecordKind:
    try:
        ver, kind = _kind.unpack_from(data, 0)
        if ver != version:
            raise CorruptEntryError(f"unknown snapshot record version {ver}")
        return RecordKind(kind)
    except (struct.error, ValueError) as exc:
        raise CorruptEntryError(f"bad snapshot record: {exc}") from exc


def _pack_items(items: list[Item]) -> bytes:
    flat = array("Q", [x for (t, p) in items for x in (t[0], t[1], p[0], p[1])])
    if _swap:
        flat.byteswap()
    return _u32.pack(len(items)) + flat.tobytes()


def _unpack_items(data: bytes, off: int) -> tuple[list[Item], int]:
    # Column slices of one array and zip: C speed, a million ids in well under a second.
    (n,) = _u32.unpack_from(data, off)
    off += 4
    end = off + n * _item.size
    if end > len(data):
        raise CorruptEntryError("truncated snapshot items")
    flat = array("Q")
    flat.frombytes(data[off:end])
    if _swap:
        flat.byteswap()
    txns = map(from_pair, zip(flat[0::4], flat[1::4], strict=True))
    items = list(zip(txns, zip(flat[2::4], flat[3::4], strict=True), strict=True))
    return items, end


def encode_segment(segment_id: int, ids: list[Item]) -> bytes:
    return _kind.pack(version, RecordKind.SEGMENT) + struct.pack(">Q", segment_id) + _pack_items(ids)


def decode_segment(data: bytes) -> tuple[int, list[Item]]:
    if record_kind(data) is not RecordKind.SEGMENT:
        raise CorruptEntryError("not a snapshot segment")
    try:
        (segment_id,) = struct.unpack_from(">Q", data, 2)
        items, _ = _unpack_items(data, 10)
    except struct.error as exc:
        raise CorruptEntryError(f"bad snapshot segment: {exc}") from exc
    return segment_id, items


def encode_index(ix: SnapshotIndex) -> bytes:
    parts = [
        _kind.pack(version, RecordKind.INDEX),
        _index_head.pack(ix.sequence, ix.timestamp_ms, *_p(ix.max_read), *_p(ix.snapshot_position)),
        _u32.pack(len(ix.segments)),
    ]
    for s in ix.segments:
        parts.append(_seg_ref.pack(s.segment_id, *_p(s.ref), s.count, *_p(s.first_marker),
                                   *_p(s.last_marker)))
    parts += [_pack_items(ix.unsealed), _pack_items(ix.ongoing)]
    blob = json.dumps({"producers": ix.producers, "ended": ix.ended}, separators=(",", ":")).encode()
    parts += [_u32.pack(len(blob)), blob]
    return b"".join(parts)


def decode_index(data: bytes) -> SnapshotIndex:
    if record_kind(data) is not RecordKind.INDEX:
        raise CorruptEntryError("not a snapshot index")
    try:
        seq, ts, ml, me, sl, se = _index_head.unpack_from(data, 2)
        off = 2 + _index_head.size
        (n,) = _u32.unpack_from(data, off)
        off += 4
        segments = []
        for _ in range(n):
            sid, rl, re_, count, fl, fe, ll, le = _seg_ref.unpack_from(data, off)
            off += _seg_ref.size
            segments.append(SegmentRef(sid, Position(rl, re_), count, Position(fl, fe), Position(ll, le)))
        unsealed, off = _unpack_items(data, off)
        ongoing, off = _unpack_items(data, off)
        (blen,) = _u32.unpack_from(data, off)
        extra = json.loads(data[off + 4 : off + 4 + blen])
    except (struct.error, ValueError) as exc:
        raise CorruptEntryError(f"bad snapshot index: {exc}") from exc
    return SnapshotIndex(seq, ts, _unp(ml, me), _unp(sl, se), segments, unsealed, ongoing,
                         extra["producers"], extra["ended"])


def pick(records: Mapping[int, bytes], ledger_id: int, name: str = "") -> tuple[
    int, SnapshotIndex, list[list[Item]]
] | None:
    """The newest index (entry id, index, its segments' ids) whose segments all are in ``records``.

    ``records`` maps entry ids of the snapshot ledger to their records; the
    broker's recovery and the compaction job both choose with this rule.
    """
    for entry_id in sorted(records, reverse=True):
        data = records[entry_id]
        try:
            if record_kind(data) is not RecordKind.INDEX:
                continue
            index = decode_index(data)
            segments = [_segment_ids(ref, records.get(ref.ref.entry_id) if ref.ref.ledger_id == ledger_id
                                     else None)
                        for ref in index.segments]
        except CorruptEntryError as exc:
            log.warning("tb snapshot %s: record at %d unusable (%s); trying older ones", name, entry_id, exc)
            continue
        return entry_id, index, segments
    return None


def _segment_ids(ref: SegmentRef, data: bytes | None) -> list[Item]:
    if data is None:
        raise CorruptEntryError(f"segment {ref.segment_id} at {ref.ref} is gone")
    segment_id, ids = decode_segment(data)
    if segment_id != ref.segment_id or len(ids) != ref.count:
        raise CorruptEntryError(f"segment at {ref.ref} is not segment {ref.segment_id}")
    return ids

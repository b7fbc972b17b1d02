"""TB snapshot records: segment and index round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.errors import CorruptEntryError
from streamtx.ledger import Position
from streamtx.records import tbsnapshot as sc

pos = st.builds(Position, st.integers(0, 1 << 32), st.integers(0, 1 << 40))
txn = st.tuples(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1))
items = st.lists(st.tuples(txn, pos), max_size=50)


@given(st.integers(0, 1 << 40), items)
def test_segment_round_trip(segment_id: int, ids: list[tuple[tuple[int, int], Position]]) -> None:
    data = sc.encode_segment(segment_id, ids)
    assert sc.record_kind(data) is sc.RecordKind.SEGMENT
    assert sc.decode_segment(data) == (segment_id, ids)


@given(st.none() | pos, st.none() | pos, items, items,
       st.lists(st.builds(sc.SegmentRef, st.integers(0, 1000), pos, st.integers(1, 10_000), pos, pos),
                max_size=5))
def test_index_round_trip(max_read: Position | None, snap: Position | None, unsealed: list,  # type: ignore[type-arg]
                          ongoing: list, segments: list[sc.SegmentRef]) -> None:  # type: ignore[type-arg]
    ix = sc.SnapshotIndex(7, 123, max_read, snap, segments, unsealed, ongoing,
                          [{"name": "p", "epoch": 1, "last_sequence": 2, "recent": []}],
                          [[1, 2, "commit", 3, 4], [5, 6, "abort", None, None]])
    data = sc.encode_index(ix)
    assert sc.record_kind(data) is sc.RecordKind.INDEX
    assert sc.decode_index(data) == ix


def test_truncated_records_raise() -> None:
    data = sc.encode_segment(1, [((1, 2), Position(3, 4))])
    with pytest.raises(CorruptEntryError):
        sc.decode_segment(data[:-3])
    with pytest.raises(CorruptEntryError):
        sc.decode_index(data)

"""Record codec, range partitioner, reorder buffer, latency stats."""

from __future__ import annotations

import math
import random

import pytest

from streamtx.demo.partitioner import RangePartitioner, source_partition_of
from streamtx.demo.records import SearchRecord, decode, encode, random_request, record_size
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import Fetched, last_per_partition
from streamtx.demo.stats import DemoResult, percentile, render_table, summary_line
from streamtx.errors import MalformedError


def test_record_round_trip_and_size() -> None:
    rng = random.Random(1)
    for i in range(200):
        rec = SearchRecord(rng.randrange(1 << 20), i % 8, i, 1_700_000_000_000 + i, random_request(rng))
        value = encode(rec)
        assert len(value) == record_size
        assert decode(value) == rec
    assert rec.key.startswith("u") and len(rec.key) == 9
    long = SearchRecord(1, 0, 0, 0, "x" * 500)
    assert decode(encode(long)) == long


def test_decode_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        decode(b"not json")
    with pytest.raises(ValueError):
        decode(b'{"u": 1}')


def test_range_partitioner() -> None:
    r = RangePartitioner(1000, 4)
    assert r.bounds == [0, 250, 500, 750, 1000]
    assert [r.partition_of(u) for u in (0, 249, 250, 499, 500, 999)] == [0, 0, 1, 1, 2, 3]
    with pytest.raises(ValueError):
        r.partition_of(1000)
    with pytest.raises(ValueError):
        RangePartitioner(3, 4)
    uneven = RangePartitioner(10, 3)
    assert [uneven.partition_of(u) for u in range(10)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    assert source_partition_of(13, 8) == 5


def test_reorder_emits_contiguous_runs_in_order() -> None:
    buf: ReorderBuffer[str] = ReorderBuffer()
    assert buf.offer(0, 1, "b") and buf.offer(0, 2, "c")
    assert buf.take_ready() == []  # seq 0 missing
    assert buf.held() == 2
    buf.offer(0, 0, "a")
    buf.offer(1, 0, "x")
    assert buf.take_ready() == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (1, 0, "x")]
    assert not buf.offer(0, 1, "b again")  # stale: already taken
    assert not buf.is_committed(0, 1)  # ... by the open transaction only
    buf.commit()
    assert buf.is_committed(0, 1) and not buf.is_committed(0, 3)
    assert buf.committed == {0: 3, 1: 1}
    assert not buf.offer(0, 2, "late copy")


def test_reorder_rollback_redoes_the_transaction() -> None:
    buf: ReorderBuffer[str] = ReorderBuffer(committed={0: 5})
    assert not buf.offer(0, 4, "old")
    buf.offer(0, 5, "e")
    buf.offer(0, 6, "f")
    assert [s for _, s, _ in buf.take_ready()] == [5, 6]
    buf.offer(0, 8, "h")
    buf.rollback()
    assert buf.tentative() == {0: 5}
    buf.offer(0, 7, "g")
    assert [x for _, _, x in buf.take_ready(limit=3)] == ["e", "f", "g"]
    assert [x for _, _, x in buf.take_ready()] == ["h"]
    buf.commit()
    assert buf.committed == {0: 9} and buf.held() == 0


def test_reorder_rollback_keeps_only_the_partitions_still_held() -> None:
    buf: ReorderBuffer[str] = ReorderBuffer()
    for p in (0, 1):
        buf.offer(p, 0, f"{p}a")
    buf.take_ready()
    buf.seal()  # txn A: both partitions (committing)
    buf.offer(1, 1, "1b")
    buf.take_ready()  # txn B: partition 1
    buf.drop(1)  # partition 1 moved away: what is in flight stays with A and B
    buf.rollback(keep={0})  # A aborted (B with it): partition 1's items are not ours any more
    assert buf.held() == 1 and buf.tentative() == {0: 0, 1: 0}
    assert [x for _, _, x in buf.take_ready()] == ["0a"]


def test_percentile_nearest_rank() -> None:
    xs = list(range(1, 1001))
    assert percentile(xs, 0.5) == 500
    assert percentile(xs, 0.99) == 990
    assert percentile(xs, 0.999) == 999
    assert percentile([7.0], 0.999) == 7.0
    assert math.isnan(percentile([], 0.5))


def test_table_and_summary_line() -> None:
    result = DemoResult(records=1000, bytes_written=2_000_000, seconds=1.0, commits=4, aborts=1, kills=2,
                        write_ms=[1.0, 2.0, 3.0], e2e_ms=[float(x) for x in range(100, 1100)])
    table = render_table(result)
    assert "p99.9 ms" in table and "end-to-end latency" in table and "2.00 MB/s" in table
    assert summary_line(result) == (
        "demo reshard: records=1000 mb_per_s=2.00 e2e_p99_ms=1089 kills=2 lost=0 duplicate=0 "
        "aborted_read=0 nonmonotonic=0"
    )


def test_reorder_pipelined_transactions() -> None:
    buf: ReorderBuffer[str] = ReorderBuffer()
    for seq in range(6):
        buf.offer(0, seq, f"r{seq}")
    assert [s for _, s, _ in buf.take_ready(limit=2)] == [0, 1]
    buf.seal()  # txn A: 0, 1 (committing)
    assert [s for _, s, _ in buf.take_ready(limit=2)] == [2, 3]  # txn B writes meanwhile
    assert buf.sealed() == 1
    buf.commit_oldest()  # A committed
    assert buf.committed == {0: 2}
    buf.rollback()  # B aborted: only its records come back
    assert buf.tentative() == {0: 2}
    assert [s for _, s, _ in buf.take_ready()] == [2, 3, 4, 5]
    buf.seal()  # txn C: 2..5
    buf.offer(0, 6, "r6")
    buf.take_ready()  # txn D: 6
    buf.rollback()  # C aborted, so D, built on it, goes too
    assert buf.committed == {0: 2} and buf.sealed() == 0
    assert [s for _, s, _ in buf.take_ready()] == [2, 3, 4, 5, 6]
    buf.commit()
    assert buf.committed == {0: 7}


def test_a_cumulative_ack_names_the_highest_id_of_each_partition() -> None:
    def got(mid: str, partition: int) -> Fetched:
        return Fetched(mid, partition, None, b"", {})

    msgs = [got("7:5:1", 0), got("9:2", 1), got("7:5:0", 0), got("7:4", 0), got("9:10:3", 1),
            got("9:10:2", 1), got("7:5:2", 0), got("7:12", 0), got("7:11:9", 0)]
    assert last_per_partition(msgs) == ["7:12", "9:10:3"]
    assert last_per_partition([]) == []
    with pytest.raises(MalformedError):
        last_per_partition([got("7: 1", 0)])

"""Producer state is bounded: compact ids, idle and excess names forgotten, small snapshots.

Before: every message id of a producer's last 32 requests went into each
snapshot (one producer's table was 8.8 MiB of JSON), and names were never
forgotten.
"""

from __future__ import annotations

import json

from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.producers import ProducerTable, Verdict, written
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.txnbuffer import snapshot as tbsnapshot
from streamtx.ledger import LedgerFactory, open_ledger_factory
from streamtx.records.partition import Message, ProducerInfo

NAME = "persistent://t/n/x-partition-0"


async def open_part(ledgers: LedgerFactory, **kw: object) -> Partition:
    s = BrokerSettings(**{"snapshot_every_ops": 10**9, **kw})  # type: ignore[arg-type]
    return await Partition.open(ledgers, NAME, "persistent://t/n/x", s, Notifier())


def producer_json_bytes(part: Partition) -> int:
    _, index = tbsnapshot.capture(part.tb, part.producers, 0)
    return len(json.dumps(index.producers, separators=(",", ":")))


async def test_snapshot_of_a_busy_producer_stays_small_and_dedup_survives_it() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    size = 500
    for seq in range(40):
        await part.produce([Message(b"v", request_index=i) for i in range(size)], None,
                           ProducerInfo("busy", 1, seq), None)
    # The last request was keyed over partitions: only some request indexes landed here.
    last = await part.produce([Message(b"k", request_index=i) for i in (1, 4, 5, 9)], None,
                              ProducerInfo("busy", 1, 40), None)
    before = await part.produce([Message(b"v")], None, ProducerInfo("busy", 1, 39), None)
    await part.take_snapshot()
    nbytes = producer_json_bytes(part)
    print(f"one producer, 32 recent requests of {size} messages: {nbytes} bytes of snapshot JSON")
    assert nbytes < 2048  # was every message id: about 32 x 500 x 20 bytes = 320 kB

    again = await open_part(ledgers)  # from the snapshot: no entry replayed
    assert await again.produce([Message(b"x")], None, ProducerInfo("busy", 1, 40), None) == last
    assert await again.produce([Message(b"x")], None, ProducerInfo("busy", 1, 39), None) == before
    assert len(before) == size
    assert again.producers.check("busy", 0, 41) == Verdict.FENCED


async def test_names_beyond_the_cap_are_forgotten_and_the_snapshot_with_them() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers, producer_max_names=100)
    for i in range(2000):
        await part.produce([Message(b"v")], None, ProducerInfo(f"p{i}", 1, 0), None)
    assert len(part.producers.producers) == 100
    assert part._producer_locks == {}  # a lock per name lives only while it is used
    assert part.producers.check("p1999", 1, 0) == Verdict.DUPLICATE  # the recent ones are kept
    assert part.producers.check("p0", 1, 0) == Verdict.NEW
    await part.take_snapshot()
    assert producer_json_bytes(part) < 100 * 80
    again = await open_part(ledgers, producer_max_names=100)
    assert list(again.producers.producers) == list(part.producers.producers)


def test_idle_names_are_forgotten_by_time() -> None:
    table = ProducerTable(idle_ms=60_000, max_names=10**9)
    for i in range(100_000):
        table.record(f"p{i}", 1, 0, written(1, i, 1, None), now_ms=i)  # one name per ms
    assert len(table.producers) == 60_001  # those seen in the last minute
    assert table.evict(now_ms=99_999 + 60_000) == 60_000
    assert list(table.producers) == ["p99999"]
    table.record("p99999", 1, 1, None, now_ms=200_000)  # still live: kept, and dedups
    assert table.check("p99999", 1, 1) == Verdict.DUPLICATE
    assert table.original_ids("p99999", 1) == []


def test_the_old_snapshot_form_is_still_read() -> None:
    old = [{"name": "p", "epoch": 3, "last_sequence": 9, "recent": [[9, [[0, "5:7"]]]]}]
    table = ProducerTable.from_json(old, seen_ms=1000)
    assert table.max_epoch("p") == 3
    assert table.check("p", 3, 9) == Verdict.DUPLICATE
    assert table.check("p", 2, 10) == Verdict.FENCED
    assert table.original_ids("p", 9) is None  # ids of requests before the upgrade are not kept

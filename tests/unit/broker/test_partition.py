"""A partition's durable transaction buffer on the memory ledger: snapshots and recovery."""

from __future__ import annotations

from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition, snapshot_ledger_name
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.txnbuffer import snapshot as tbsnapshot
from streamtx.contracts.msgid import MessageId
from streamtx.contracts.states import Action
from streamtx.ledger import LedgerFactory, Position, open_ledger_factory
from streamtx.records import tbsnapshot as sc
from streamtx.records.partition import Message, ProducerInfo

NAME = "persistent://t/n/x-partition-0"


def settings(**kw: object) -> BrokerSettings:
    base: dict[str, object] = {"snapshot_segment_size": 4, "snapshot_every_ops": 1_000_000}
    return BrokerSettings(**{**base, **kw})  # type: ignore[arg-type]


async def open_part(ledgers: LedgerFactory, **kw: object) -> Partition:
    return await Partition.open(ledgers, NAME, "persistent://t/n/x", settings(**kw), Notifier())


async def fill(part: Partition, n_aborted: int, start: int = 0) -> None:
    for i in range(start, start + n_aborted):
        await part.produce([Message(b"x")], (1, i), None, None)
        await part.end_txn((1, i), Action.ABORT)


def same_state(a: Partition, b: Partition) -> None:
    assert list(a.tb.aborted.items()) == list(b.tb.aborted.items())
    assert list(a.tb.ongoing.items()) == list(b.tb.ongoing.items())
    assert a.max_read_position() == b.max_read_position()


async def test_recovery_from_segmented_snapshot_then_replay() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    await fill(part, 10)
    await part.produce([Message(b"open")], (2, 1), None, None)
    await part.take_snapshot()
    assert part.tb.stats()["segmentsSize"] == 2 and part.tb.stats()["unsealedAbortedTxnIdSize"] == 2
    await fill(part, 3, start=100)  # after the snapshot: recovered by replay
    await part.produce([Message(b"c")], (2, 2), None, None)
    await part.end_txn((2, 2), Action.COMMIT)
    again = await open_part(ledgers)
    same_state(part, again)
    assert len(again.tb.aborted) == 13 and (2, 1) in again.tb.ongoing
    assert again.last_snapshot_ms == part.last_snapshot_ms


async def test_partial_snapshot_loses_nothing() -> None:
    """Segments written without their index: the previous index (and its segments) still rule."""
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    await fill(part, 5)
    await part.take_snapshot()
    await fill(part, 9, start=50)
    # A crash mid-snapshot: the new sealed segments land, the index never does.
    segments, _ = tbsnapshot.capture(part.tb, part.producers, 99)
    for seg in segments:
        if seg.ref is None:
            await part.snap.append(sc.encode_segment(seg.segment_id, seg.ids))
    again = await open_part(ledgers)
    same_state(part, again)
    assert len(again.tb.aborted) == 14


async def test_compacted_snapshot_ledger_keeps_latest_per_key() -> None:
    """A compactor keeping the latest record per key (seg-<id>, index) loses no aborted id."""
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    for k in range(4):
        await fill(part, 5, start=k * 10)
        await part.take_snapshot()
    entries = await part.snap.read(None, 10_000)
    latest: dict[str, bytes] = {}
    for e in entries:
        kind = sc.record_kind(e.data)
        key = f"seg-{sc.decode_segment(e.data)[0]}" if kind is sc.RecordKind.SEGMENT else "index"
        latest.pop(key, None)
        latest[key] = e.data
    # Rewrite the snapshot ledger with the survivors only, in log order.
    await ledgers.delete(snapshot_ledger_name(NAME))
    fresh = await ledgers.open(snapshot_ledger_name(NAME))
    for data in latest.values():
        await fresh.append(data)
    again = await open_part(ledgers)
    same_state(part, again)
    assert len(again.tb.aborted) == 20


async def test_max_read_position_never_moves_back_and_trim_drops_ids() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    await fill(part, 6)
    await part.produce([Message(b"open")], (3, 3), None, None)
    mrp = part.max_read_position()
    await part.take_snapshot()
    again = await open_part(ledgers)
    assert again.max_read_position() == mrp
    # Trim past the first four aborted txns' markers: their ids go.
    marker4 = Position(*again.tb.aborted[(1, 4)])
    dropped = await again.trim(marker4)
    assert dropped == 4 and (1, 3) not in again.tb.aborted and (1, 4) in again.tb.aborted
    await again.take_snapshot()
    third = await open_part(ledgers)
    assert list(third.tb.aborted) == [(1, 4), (1, 5)]


async def test_producer_state_survives_restart() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    ids = await part.produce([Message(b"a", request_index=0), Message(b"b", request_index=1)], None,
                             ProducerInfo("p", 1, 7), None)
    again = await open_part(ledgers)
    assert await again.produce([Message(b"a")], None, ProducerInfo("p", 1, 7), None) == ids
    assert again.producers.max_epoch("p") == 1
    lid, eid, bi = MessageId.parse(ids[1][1])
    assert (bi, Position(lid, eid)) == (1, again.tb.last_position)


async def test_end_is_idempotent_and_null_without_messages() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    assert await part.end_txn((5, 5), Action.COMMIT) is None
    await part.produce([Message(b"t")], (5, 6), None, None)
    m1 = await part.end_txn((5, 6), Action.ABORT)
    before = part.ledger.last_position()
    assert await part.end_txn((5, 6), Action.ABORT) == m1
    assert part.ledger.last_position() == before
    await part.produce([Message(b"c")], (5, 7), None, None)
    m2 = await part.end_txn((5, 7), Action.COMMIT)
    await part.take_snapshot()
    # After a restart from that snapshot, repeats still answer the same and write nothing.
    again = await open_part(ledgers)
    assert await again.end_txn((5, 7), Action.COMMIT) == m2
    assert await again.end_txn((5, 6), Action.ABORT) == m1
    assert await again.end_txn((5, 5), Action.COMMIT) is None
    assert again.ledger.last_position() == part.ledger.last_position()


async def test_a_produce_racing_the_end_is_never_visible_as_committed() -> None:
    """An abort that arrives while the txn's first message is still being appended must
    wait for it (and write a marker), and a produce after the end started is refused."""
    import asyncio

    import pytest

    from streamtx.errors import ConflictError

    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    produce = asyncio.create_task(part.produce([Message(b"racing")], (6, 1), None, None))
    await asyncio.sleep(0)  # the append is in flight, not yet applied
    marker = await part.end_txn((6, 1), Action.ABORT)
    await produce
    assert marker is not None and part.tb.is_aborted((6, 1))
    ending = asyncio.create_task(part.end_txn((6, 2), Action.ABORT))
    await asyncio.sleep(0)
    with pytest.raises(ConflictError):
        await part.produce([Message(b"late")], (6, 2), None, None)
    assert await ending is not None  # an abort is logged even where nothing was produced
    assert part.tb.is_aborted((6, 2))


async def test_a_commit_racing_the_first_append_waits_for_it_and_releases_it() -> None:
    """A commit that arrives while the txn's first message is still being appended must
    wait for it: the message is then released by a commit marker written after it, and
    visible; never a marker-less commit that leaves the message open forever."""
    import asyncio

    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    produce = asyncio.create_task(part.produce([Message(b"racing")], (7, 1), None, None))
    await asyncio.sleep(0)  # the append is in flight, not yet applied
    marker = await part.end_txn((7, 1), Action.COMMIT)
    [(_, message_id)] = await produce
    assert marker is not None, "the commit did not see the message in flight"
    assert Position.parse(message_id) < Position.parse(marker)
    assert (7, 1) not in part.tb.ongoing
    visible = await part.read_visible(None, 100)
    assert Position.parse(message_id) in [e.position for e in visible]
    again = await open_part(ledgers)  # and so after a restart
    assert (7, 1) not in again.tb.ongoing and again.max_read_position() == part.max_read_position()


async def test_tbrecovery_measure() -> None:
    from bench.txnbuffer_recovery import measure

    assert await measure("memory://", 5_000, segment_size=300) < 5


async def test_snapshot_ledger_stays_small() -> None:
    """Old indexes behind a long-lived segment do not pile up: live segments get rewritten."""
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    await fill(part, 8)  # two sealed segments that live forever (nothing is trimmed)
    for i in range(300):
        await part.produce([Message(b"c")], (9, i), None, None)
        await part.end_txn((9, i), Action.COMMIT)
        await part.take_snapshot()
    first, last = part.snap.first_position(), part.snap.last_position()
    assert first is not None and last is not None
    assert last.entry_id - first.entry_id < 2 * 64 + 10
    again = await open_part(ledgers)
    same_state(part, again)
    assert len(again.tb.aborted) == 8

"""The durable cursor over every ledger backend: persistence, recovery, fencing."""

from __future__ import annotations

import asyncio

import pytest

from streamtx.cursor import Cursor, cursor_ledger_name
from streamtx.errors import (
    FencedError,
    InvalidPositionError,
    LedgerClosedError,
    LedgerUnavailableError,
    MalformedError,
)
from streamtx.ledger import Ledger, LedgerFactory, Position, open_ledger_factory
from streamtx.ledger.memory import MemoryLedgerFactory

batch_size = 4


async def fill(ledger: Ledger, count: int, tag: str = "m") -> list[Position]:
    return list(await asyncio.gather(*(ledger.append(f"{tag}{i}".encode()) for i in range(count))))


def snapshot_of(cursor: Cursor, positions: list[Position]) -> list[object]:
    """Everything a reader can ask the cursor about these positions."""
    seen: list[object] = [cursor.mark_delete_position, cursor.stats().individually_deleted_ranges]
    for p in positions:
        seen.append(cursor.is_deleted(p))
        seen.append(cursor.deleted_batch_indexes(p))
        seen.extend(cursor.is_deleted(p, i) for i in range(batch_size))
    seen.append(cursor.first_undeleted())
    return seen


async def test_reopen_recovers_exactly(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/recover")
    positions = await fill(ledger, 30)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    assert cursor.mark_delete_position is None
    await cursor.mark_delete(positions[3])
    await cursor.delete([positions[5], positions[6], positions[9], positions[20]])
    await cursor.delete_batch_index(positions[12], 1, batch_size)
    await cursor.delete_batch_index(positions[12], 3, batch_size)
    await cursor.delete_batch_index(positions[4], 0, batch_size)
    before = snapshot_of(cursor, positions)
    assert cursor.mark_delete_position == positions[3]
    assert cursor.stats().individually_deleted_ranges == 3
    assert cursor.deleted_batch_indexes(positions[12]) == 0b1010
    await cursor.close()

    again = await Cursor.open(ledgers, ledger, "sub")
    assert snapshot_of(again, positions) == before
    assert again.first_undeleted() == positions[4]
    assert again.first_undeleted(positions[5]) == positions[7]
    await again.close()


async def test_cursor_survives_a_new_store(ledger_url: str) -> None:
    if ledger_url.startswith("memory"):
        pytest.skip("the memory backend keeps nothing across stores by design")
    ledgers = open_ledger_factory(ledger_url)
    ledger = await ledgers.open("cur/durable")
    positions = await fill(ledger, 10)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    await cursor.delete([positions[0], positions[1], positions[7]])
    await cursor.delete_batch_index(positions[3], 2, batch_size)
    before = snapshot_of(cursor, positions)
    await ledgers.close()  # no cursor.close(): as if the process died

    ledgers = open_ledger_factory(ledger_url)
    try:
        ledger = await ledgers.open("cur/durable", writer=False)
        cursor = await Cursor.open(ledgers, ledger, "sub")
        assert snapshot_of(cursor, positions) == before
        assert cursor.mark_delete_position == positions[1]
    finally:
        await ledgers.close()


async def test_last_batch_index_deletes_the_entry(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/batch")
    positions = await fill(ledger, 3)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    for index in (2, 0, 3):
        assert await cursor.delete_batch_index(positions[0], index, batch_size) is False
    assert not cursor.is_deleted(positions[0])
    assert cursor.is_deleted(positions[0], 2) and not cursor.is_deleted(positions[0], 1)
    assert cursor.mark_delete_position is None
    assert await cursor.delete_batch_index(positions[0], 1, batch_size) is True
    assert cursor.is_deleted(positions[0])
    assert cursor.deleted_batch_indexes(positions[0]) is None
    assert cursor.mark_delete_position == positions[0]
    assert cursor.stats().partially_deleted_batches == 0
    await cursor.close()
    again = await Cursor.open(ledgers, ledger, "sub")
    assert again.mark_delete_position == positions[0]
    assert again.first_undeleted() == positions[1]


async def test_mark_delete_hops_over_fence_ids(ledgers: LedgerFactory) -> None:
    first = await ledgers.open("cur/gaps")
    early = await fill(first, 3, "a")
    ledger = await ledgers.open("cur/gaps")  # a new writer: its fence takes an id
    late = await fill(ledger, 3, "b")
    assert late[0].entry_id > early[-1].entry_id + 1  # there is a gap to hop over
    positions = early + late
    cursor = await Cursor.open(ledgers, ledger, "sub")
    await cursor.delete(reversed(positions[1:]))
    assert cursor.mark_delete_position is None
    assert cursor.stats().individually_deleted_ranges == 2  # the fence id splits them
    await cursor.delete([positions[0]])
    assert cursor.mark_delete_position == positions[-1]
    assert cursor.stats().individually_deleted_ranges == 0
    await cursor.close()
    again = await Cursor.open(ledgers, ledger, "sub")
    assert again.mark_delete_position == positions[-1]


async def test_concurrent_deletes_cost_few_appends(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/coalesce")
    positions = await fill(ledger, 200)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    await asyncio.gather(*(cursor.delete([p]) for p in positions[1:]))
    assert cursor.stats().snapshots_written <= 2
    assert cursor.stats().individually_deleted_ranges == 1
    # Batch-index deletes of one entry, all at once, also share snapshots.
    results = await asyncio.gather(
        *(cursor.delete_batch_index(positions[0], i, batch_size) for i in range(batch_size))
    )
    assert results.count(True) == 1 and results[-1] is True
    assert cursor.stats().snapshots_written <= 4
    assert cursor.mark_delete_position == positions[-1]
    await cursor.close()
    again = await Cursor.open(ledgers, ledger, "sub")
    assert again.mark_delete_position == positions[-1]


async def test_change_returns_only_once_durable(ledgers: LedgerFactory) -> None:
    """A delete that changed nothing still waits for the snapshot holding that delete."""
    ledger = await ledgers.open("cur/wait")
    positions = await fill(ledger, 3)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    first = asyncio.create_task(cursor.delete([positions[1]]))
    await asyncio.sleep(0)  # the first snapshot is now in flight
    await cursor.delete([positions[1]])
    assert first.done()
    await first


async def test_second_cursor_fences_the_first(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/fence")
    positions = await fill(ledger, 5)
    zombie = await Cursor.open(ledgers, ledger, "sub")
    await zombie.delete([positions[0]])
    cursor = await Cursor.open(ledgers, ledger, "sub")
    assert cursor.is_deleted(positions[0])
    with pytest.raises(FencedError):
        await zombie.delete([positions[1]])
    assert zombie.fenced
    with pytest.raises(FencedError):
        await zombie.mark_delete(positions[4])
    await cursor.delete([positions[2]])
    await cursor.close()
    await zombie.close()
    again = await Cursor.open(ledgers, ledger, "sub")
    assert [again.is_deleted(p) for p in positions] == [True, False, True, False, False]


async def test_cursor_ledger_is_trimmed_to_the_latest_snapshot(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/trim-own")
    positions = await fill(ledger, 40)
    cursor = await Cursor.open(ledgers, ledger, "sub", trim_every=5)
    for p in positions[::2]:
        await cursor.delete([p])
    last = cursor.stats().last_snapshot
    assert cursor.stats().snapshots_written == 20
    await cursor.close()  # waits for the housekeeping trim too
    own = await ledgers.open(cursor_ledger_name(ledger.name, "sub"), writer=False)
    first = own.first_position()
    assert first is not None and last is not None
    assert len(await own.read(first)) <= 5
    assert [e.position for e in await own.read(first)][-1] == last
    await own.close()
    again = await Cursor.open(ledgers, ledger, "sub")
    assert all(again.is_deleted(p) for p in positions[::2])
    assert not any(again.is_deleted(p) for p in positions[1::2])


async def test_trim_ledger_drops_what_is_mark_deleted(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/trim-data")
    positions = await fill(ledger, 10)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    await cursor.trim_ledger()  # nothing deleted: nothing trimmed
    assert ledger.first_position() == positions[0]
    await cursor.mark_delete(positions[5])
    await cursor.delete([positions[8]])
    await cursor.trim_ledger()
    assert ledger.first_position() == positions[6]
    assert [e.position for e in await ledger.read()] == positions[6:]
    assert cursor.first_undeleted() == positions[6]


async def test_positions_of_another_ledger_are_refused(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/foreign")
    await fill(ledger, 2)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    alien = Position(ledger.ledger_id + 1, 0)
    with pytest.raises(InvalidPositionError):
        await cursor.delete([alien])
    with pytest.raises(InvalidPositionError):
        cursor.is_deleted(alien)
    await cursor.close()
    with pytest.raises(LedgerClosedError):
        await cursor.mark_delete(Position(ledger.ledger_id, 0))


async def test_a_failed_persist_is_carried_by_the_next(ledgers: LedgerFactory) -> None:
    if not isinstance(ledgers, MemoryLedgerFactory):
        pytest.skip("append failures are injected through the memory backend")
    ledger = await ledgers.open("cur/fail")
    positions = await fill(ledger, 4)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    ledgers.inject_append_failures(cursor_ledger_name(ledger.name, "sub"), 10)
    with pytest.raises(LedgerUnavailableError):
        await cursor.delete([positions[0]])
    ledgers.inject_append_failures(cursor_ledger_name(ledger.name, "sub"), 0)
    await cursor.delete([positions[2]])
    await cursor.close()
    again = await Cursor.open(ledgers, ledger, "sub")
    assert [again.is_deleted(p) for p in positions] == [True, False, True, False]


async def test_apply_mixed_batch_is_one_snapshot_and_same_as_one_by_one(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/apply")
    positions = await fill(ledger, 40)
    one = await Cursor.open(ledgers, ledger, "one")
    many = await Cursor.open(ledgers, ledger, "many")
    await one.mark_delete(positions[2])
    await one.delete([positions[5], positions[6], positions[7], positions[30]])
    for i in range(batch_size):  # the whole batch: the entry becomes deleted
        await one.delete_batch_index(positions[3], i, batch_size)
    await one.delete_batch_index(positions[10], 2, batch_size)
    before = many.stats().snapshots_written
    await many.apply(
        [positions[30], positions[5], positions[7], positions[6]],
        [(positions[3], i, batch_size) for i in range(batch_size)] + [(positions[10], 2, batch_size)],
        mark_delete=positions[2],
    )
    assert many.stats().snapshots_written == before + 1
    assert snapshot_of(many, positions) == snapshot_of(one, positions)
    assert many.mark_delete_position == positions[3]
    await many.close()
    again = await Cursor.open(ledgers, ledger, "many")
    assert snapshot_of(again, positions) == snapshot_of(one, positions)
    await again.close()
    await one.close()


async def test_apply_checks_everything_before_applying(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("cur/apply-bad")
    positions = await fill(ledger, 5)
    cursor = await Cursor.open(ledgers, ledger, "sub")
    await cursor.delete_batch_index(positions[1], 0, batch_size)
    before = snapshot_of(cursor, positions)
    with pytest.raises(MalformedError):
        await cursor.apply([positions[0]], [(positions[1], 1, batch_size + 1)])
    with pytest.raises(MalformedError):
        await cursor.apply([positions[0]], [(positions[2], batch_size, batch_size)])
    with pytest.raises(InvalidPositionError):
        await cursor.apply([positions[0], Position(positions[0].ledger_id + 99, 0)])
    assert snapshot_of(cursor, positions) == before
    await cursor.close()

"""One conformance suite for the Ledger interface, run against every backend."""

from __future__ import annotations

import asyncio

import pytest

from streamtx.errors import FencedError, InvalidPositionError, LedgerClosedError
from streamtx.ledger import LedgerFactory, Position, open_ledger_factory


async def test_append_returns_increasing_positions_and_reads_back(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/append")
    positions = [await ledger.append(b"entry-%d" % i) for i in range(20)]
    assert positions == sorted(positions)
    assert len(set(positions)) == 20
    assert all(p.ledger_id == ledger.ledger_id for p in positions)
    entries = await ledger.read()
    assert [e.data for e in entries] == [b"entry-%d" % i for i in range(20)]
    assert [e.position for e in entries] == positions
    assert ledger.last_position() == positions[-1]
    assert ledger.first_position() == positions[0]


async def test_concurrent_appends_are_all_durable_in_ack_order(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/concurrent")
    payloads = [b"c%04d" % i for i in range(300)]
    positions = await asyncio.gather(*(ledger.append(p) for p in payloads))
    by_position = dict(zip(positions, payloads, strict=True))
    entries = await ledger.read(max_entries=10_000)
    assert [(e.position, e.data) for e in entries] == sorted(by_position.items())


async def test_read_from_position_and_max_entries(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/read-from")
    positions = [await ledger.append(bytes([i])) for i in range(10)]
    tail = await ledger.read(positions[4], max_entries=3)
    assert [e.position for e in tail] == positions[4:7]
    past_end = await ledger.read(Position(ledger.ledger_id, positions[-1].entry_id + 1))
    assert past_end == []


async def test_empty_ledger(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/empty")
    assert ledger.last_position() is None
    assert ledger.first_position() is None
    assert await ledger.read() == []


async def test_reopen_sees_every_entry(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/reopen")
    positions = [await ledger.append(b"r%d" % i) for i in range(5)]
    await ledger.close()
    again = await ledgers.open("conf/reopen")
    entries = await again.read()
    assert [e.position for e in entries] == positions
    newer = await again.append(b"after-reopen")
    assert newer > positions[-1]


async def test_trim_drops_entries_before_position(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/trim")
    positions = [await ledger.append(b"t%d" % i) for i in range(10)]
    await ledger.trim(positions[6])
    entries = await ledger.read()
    assert [e.data for e in entries] == [b"t6", b"t7", b"t8", b"t9"]
    assert ledger.first_position() == positions[6]
    await ledger.close()
    reopened = await ledgers.open("conf/trim", writer=False)
    assert [e.data for e in await reopened.read()] == [b"t6", b"t7", b"t8", b"t9"]


async def test_second_writer_fences_the_first(ledgers: LedgerFactory) -> None:
    first = await ledgers.open("conf/fence")
    await first.append(b"from-first")
    second = await ledgers.open("conf/fence")
    await second.append(b"from-second")
    with pytest.raises(FencedError) as info:
        await first.append(b"zombie")
    assert info.value.retriable is False
    with pytest.raises(FencedError):
        await first.append(b"zombie-again")
    await second.append(b"second-again")
    reader = await ledgers.open("conf/fence", writer=False)
    assert [e.data for e in await reader.read()] == [b"from-first", b"from-second", b"second-again"]


async def test_reader_follows_a_writer(ledgers: LedgerFactory) -> None:
    writer = await ledgers.open("conf/follow")
    reader = await ledgers.open("conf/follow", writer=False)
    assert not await reader.wait_for_append(None, 0.05)
    await writer.append(b"x")
    assert await reader.wait_for_append(None, 5.0)
    assert [e.data for e in await reader.read()] == [b"x"]


async def test_position_of_another_ledger_is_rejected(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/foreign")
    await ledger.append(b"a")
    with pytest.raises(InvalidPositionError):
        await ledger.read(Position(ledger.ledger_id + 1, 0))


async def test_closed_ledger_refuses_appends(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("conf/closed")
    await ledger.close()
    with pytest.raises(LedgerClosedError):
        await ledger.append(b"late")


async def test_durable_across_stores(ledger_url: str) -> None:
    if ledger_url.startswith("memory"):
        pytest.skip("the memory backend keeps nothing across stores by design")
    ledgers = open_ledger_factory(ledger_url)
    ledger = await ledgers.open("conf/durable")
    positions = [await ledger.append(b"d%d" % i) for i in range(7)]
    await ledgers.close()
    ledgers = open_ledger_factory(ledger_url)
    try:
        again = await ledgers.open("conf/durable", writer=False)
        assert [e.position for e in await again.read()] == positions
    finally:
        await ledgers.close()


async def test_exists_opens_nothing(ledger_url: str) -> None:
    """``exists`` says whether a ledger was created, without creating it (a made-up name stays unknown)."""
    ledgers = open_ledger_factory(ledger_url)
    try:
        assert not await ledgers.exists("conf/never")
        assert not await ledgers.exists("conf/never")  # asking twice did not create it
        ledger = await ledgers.open("conf/made")
        await ledger.append(b"x")
        assert await ledgers.exists("conf/made")
        await ledgers.delete("conf/made")
        assert not await ledgers.exists("conf/made")
    finally:
        await ledgers.close()
    if not ledger_url.startswith("memory"):  # a new store (a restart) sees the same
        again = open_ledger_factory(ledger_url)
        try:
            assert not await again.exists("conf/never")
        finally:
            await again.close()

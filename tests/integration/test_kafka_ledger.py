"""The Kafka ledger backend against a real Kafka-protocol broker (tansu)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from streamtx.errors import FencedError, LedgerUnavailableError
from streamtx.ledger import Ledger, Position, open_ledger_factory
from streamtx.ledger.frames import decode as decode_frame
from streamtx.ledger.frames import encode_data
from streamtx.ledger.kafka import TOPIC_MAX, TRIM_SUFFIX, KafkaLedgerFactory, topic_for
from tests.conftest import kafka_url
from tests.support.procs import free_port, tansu_broker

pytestmark = pytest.mark.kafka


def kafka_ledgers(url: str) -> KafkaLedgerFactory:
    ledgers = open_ledger_factory(url)
    assert isinstance(ledgers, KafkaLedgerFactory)
    return ledgers


@contextlib.asynccontextmanager
async def opened(url: str):  # type: ignore[no-untyped-def]
    ledgers = kafka_ledgers(url)
    try:
        yield ledgers
    finally:
        await asyncio.wait_for(ledgers.close(), 30)


async def read_all(ledger: Ledger) -> list[tuple[Position, bytes]]:
    out: list[tuple[Position, bytes]] = []
    start: Position | None = None
    while True:
        entries = await ledger.read(start, 100)
        if not entries:
            return out
        out.extend((e.position, e.data) for e in entries)
        start = Position(ledger.ledger_id, ledger.next_entry_id(entries[-1].position.entry_id))


# --- naming (no broker) ---------------------------------------------------------


def test_topic_names_are_legal_distinct_and_leave_room_for_the_sidecar() -> None:
    assert topic_for("streamtx.", "orders-0") == "streamtx.orders-0"
    names = ["a.b", "a_b", "x", "x.trim", "persistent://public/default/t", "é", "", "y" * 400]
    topics = [topic_for("streamtx.", n) for n in names]
    assert len(set(topics)) == len(names)
    assert all(t.startswith("streamtx.") for t in topics)
    for t in topics:
        sidecar = t + TRIM_SUFFIX
        assert len(sidecar) <= TOPIC_MAX
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in sidecar)
        assert not t.removeprefix("streamtx.").count(".")  # never collides with a sidecar
    assert topic_for("streamtx.", "x.trim") != topic_for("streamtx.", "x") + TRIM_SUFFIX


# --- against tansu --------------------------------------------------------------


async def test_append_read_round_trip(kafka_bootstrap: str) -> None:
    async with opened(kafka_url(kafka_bootstrap)) as ledgers:
        ledger = await ledgers.open("round-trip")
        assert ledger.last_position() is None
        sequential = [await ledger.append(f"s{i}".encode()) for i in range(5)]
        concurrent = await asyncio.gather(*(ledger.append(f"c{i}".encode()) for i in range(50)))
        positions = sequential + list(concurrent)
        assert positions == sorted(positions)
        assert len(set(positions)) == 55
        assert ledger.last_position() == positions[-1]
        got = await read_all(ledger)
        assert [p for p, _ in got] == positions
        assert [d for _, d in got] == [f"s{i}".encode() for i in range(5)] + [
            f"c{i}".encode() for i in range(50)
        ]
        # reading from a position in the middle
        mid = await ledger.read(positions[10], 3)
        assert [e.position for e in mid] == positions[10:13]
        (seg,) = ledger.stats()
        assert seg.entries >= 55 and seg.size > 0


async def test_reopen_through_a_new_store_sees_every_entry(kafka_bootstrap: str) -> None:
    url = kafka_url(kafka_bootstrap)
    async with opened(url) as ledgers:
        ledger = await ledgers.open("reopen")
        positions = list(await asyncio.gather(*(ledger.append(b"e%d" % i) for i in range(40))))
    async with opened(url) as ledgers:
        reader = await ledgers.open("reopen", writer=False)
        assert reader.last_position() == positions[-1]
        assert [p for p, _ in await read_all(reader)] == positions
        writer = await ledgers.open("reopen")
        more = await writer.append(b"after")
        assert more > positions[-1]
        assert [d for _, d in await read_all(writer)][-1] == b"after"


async def test_a_fresh_reader_sees_the_last_record_batch(kafka_bootstrap: str) -> None:
    """tansu reports a partition's end as the start of its last record batch (or one
    past it); a reader that trusted it would miss the tail of the log."""
    url = kafka_url(kafka_bootstrap)
    async with opened(url) as ledgers:
        await ledgers.open("hw", writer=False)  # creates the topics, appends nothing
        raw = ledgers.raw_log("hw")
        frames = [encode_data(7, 1, seq, b"p%d" % seq) for seq in range(12)]
        offsets: list[int] = []
        for frame in frames[:5]:  # single-record batches
            offsets += await raw.append_batch([frame])
        offsets += await raw.append_batch(frames[5:11])  # one multi-record batch
        offsets += await raw.append_batch([frames[11]])  # and a single one last
        assert offsets == list(range(offsets[0], offsets[0] + 12))
        await raw.close()
    for last_batch_is_multi in (False, True):
        async with opened(url) as ledgers:
            fresh = ledgers.raw_log("hw")
            if last_batch_is_multi:  # a reader starting inside the last multi-record batch
                got = await fresh.read_raw(offsets[7], 100)
                assert [o for o, _ in got] == offsets[7:]
            else:
                seen: list[int] = []
                while batch := await fresh.read_raw(seen[-1] + 1 if seen else 0, 3):
                    seen += [o for o, _ in batch]
                assert seen == offsets
            assert await fresh.end_offset() == offsets[-1] + 1
            await fresh.close()
        async with opened(url) as ledgers:
            fresh_end = ledgers.raw_log("hw")
            assert await fresh_end.end_offset() == offsets[-1] + 1  # a cold end_offset too
            await fresh_end.close()
            reader = await ledgers.open("hw", writer=False)
            assert reader.last_position() == Position(reader.ledger_id, offsets[-1])
            assert [d for _, d in await read_all(reader)] == [b"p%d" % i for i in range(12)]


async def test_trim_persists_across_reopen(kafka_bootstrap: str) -> None:
    url = kafka_url(kafka_bootstrap)
    async with opened(url) as ledgers:
        ledger = await ledgers.open("trim")
        positions = [await ledger.append(b"t%d" % i) for i in range(10)]
        await ledger.trim(positions[6])
        assert ledger.first_position() == positions[6]
        assert [d for _, d in await read_all(ledger)] == [b"t6", b"t7", b"t8", b"t9"]
        # a second trim: the last sidecar record wins
        await ledger.trim(positions[7])
    async with opened(url) as ledgers:
        reader = await ledgers.open("trim", writer=False)
        assert reader.first_position() == positions[7]
        assert [d for _, d in await read_all(reader)] == [b"t7", b"t8", b"t9"]
        assert await reader.read(positions[0]) == await reader.read(positions[7])
        raw = ledgers.raw_log("trim")
        start, _state = await raw.trim_state()
        assert start == positions[7].entry_id
        assert min(o for o, _ in await raw.read_raw(0, 100)) == positions[7].entry_id
        await raw.close()
        writer = await ledgers.open("trim")  # fences the old writer's state correctly
        new = await writer.append(b"new")
        assert [d for _, d in await read_all(writer)] == [b"t7", b"t8", b"t9", b"new"]
        assert new > positions[-1]


async def test_second_writer_fences_the_first(kafka_bootstrap: str) -> None:
    url = kafka_url(kafka_bootstrap)
    async with opened(url) as store_a, opened(url) as store_b, opened(url) as store_c:
        first = await store_a.open("fence")
        for i in range(3):
            await first.append(b"a%d" % i)
        second = await store_b.open("fence")
        await second.append(b"b0")
        with pytest.raises(FencedError):
            await first.append(b"zombie")
        with pytest.raises(FencedError):
            await first.append(b"zombie-again")
        await second.append(b"b1")
        reader = await store_c.open("fence", writer=False)
        data = [d for _, d in await read_all(reader)]
        assert data == [b"a0", b"a1", b"a2", b"b0", b"b1"]
        # the zombie frame did land in the partition; the reader dropped it
        raw = store_c.raw_log("fence")
        payloads = [decode_frame(f).payload for _, f in await raw.read_raw(0, 100)]
        assert b"zombie" in payloads
        await raw.close()


async def test_a_reader_waits_for_a_writer(kafka_bootstrap: str) -> None:
    url = kafka_url(kafka_bootstrap)
    async with opened(url) as store_w, opened(url) as store_r:
        writer = await store_w.open("tail")
        reader = await store_r.open("tail", writer=False)
        assert not await reader.wait_for_append(None, 0.2)
        pos = await writer.append(b"hello")
        assert await reader.wait_for_append(None, 10)
        assert [(e.position, e.data) for e in await reader.read(None)] == [(pos, b"hello")]


async def test_delete_drops_the_ledger(kafka_bootstrap: str) -> None:
    url = kafka_url(kafka_bootstrap)
    async with opened(url) as ledgers:
        ledger = await ledgers.open("gone")
        await ledger.append(b"x")
        await ledger.close()
        await ledgers.delete("gone")
        await ledgers.delete("gone")  # deleting twice is fine
    async with opened(url) as ledgers:
        ledger = await ledgers.open("gone", writer=False)
        assert await read_all(ledger) == []


async def test_trim_with_delete_records_on_tansu_is_bounded(kafka_bootstrap: str) -> None:
    """tansu closes the connection on DeleteRecords: the trim must stand anyway."""
    prefix = f"dr{time.monotonic_ns() % 10**8}."
    ledgers = KafkaLedgerFactory(
        kafka_bootstrap, idempotence=False, delete_records=True, topic_prefix=prefix, timeout_s=3
    )
    try:
        ledger = await ledgers.open("dr")
        positions = [await ledger.append(b"d%d" % i) for i in range(5)]
        await asyncio.wait_for(ledger.trim(positions[3]), 20)
        assert [d for _, d in await read_all(ledger)] == [b"d3", b"d4"]
        await ledger.append(b"d5")
    finally:
        await asyncio.wait_for(ledgers.close(), 30)


async def test_broker_down_append_fails_retriably_in_bounded_time() -> None:
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(tansu_broker())
        ledgers = KafkaLedgerFactory(
            bootstrap, idempotence=False, delete_records=False, timeout_s=1.5
        )
        try:
            ledger = await ledgers.open("down")
            await ledger.append(b"up")
            stack.close()  # stops the broker: nothing listens on its port any more
            started = time.monotonic()
            with pytest.raises(LedgerUnavailableError) as caught:
                await asyncio.wait_for(ledger.append(b"down"), 30)
            assert caught.value.retriable
            assert time.monotonic() - started < 15
        finally:
            await asyncio.wait_for(ledgers.close(), 30)


async def test_no_broker_at_all_fails_retriably_and_fast() -> None:
    ledgers = KafkaLedgerFactory(
        f"127.0.0.1:{free_port()}", idempotence=False, delete_records=False, timeout_s=1
    )
    try:
        started = time.monotonic()
        with pytest.raises(LedgerUnavailableError) as caught:
            await ledgers.open("nowhere")
        assert caught.value.retriable
        raw = ledgers.raw_log("nowhere")
        with pytest.raises(LedgerUnavailableError):
            await raw.append_batch([encode_data(1, 1, 0, b"x")])
        with pytest.raises(LedgerUnavailableError):
            await raw.read_raw(0, 10)
        await raw.close()
        assert time.monotonic() - started < 10
    finally:
        await asyncio.wait_for(ledgers.close(), 10)

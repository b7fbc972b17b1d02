"""The PIP-160 buffered writer, on the memory backend (the cases of Pulsar's
TxnLogBufferedWriterTest, plus run-time switching and the auto policy)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from streamtx.batching import (
    BatchedLogMetrics,
    BatchingSettings,
    BufferedWriter,
    WriteResult,
    decode_entry,
    is_batched,
    pending_ack_metrics,
    tc_metrics,
)
from streamtx.batching.codec import MAGIC, batched_size
from streamtx.errors import LedgerClosedError, LedgerUnavailableError
from streamtx.ledger import Entry, Ledger, LedgerFactory, Position, SegmentStats, open_ledger_factory
from streamtx.ledger.memory import MemoryLedgerFactory

LOG = "txnlog/test/0"
TC_LABELS = {"cluster": "c1", "coordinator_id": "3"}


# --- fixtures and helpers -----------------------------------------------------------


@pytest.fixture
async def ledgers() -> AsyncIterator[LedgerFactory]:
    s = open_ledger_factory("memory://")
    yield s
    await s.close()


@pytest.fixture
async def ledger(ledgers: LedgerFactory) -> Ledger:
    return await ledgers.open(LOG)


class DoubleLedger(Ledger):
    """A ledger over a real one that fails chosen appends and may add latency."""

    def __init__(
        self, inner: Ledger, *, fail: Callable[[int], bool] = lambda call: False, delay_s: float = 0.0
    ) -> None:
        self.name, self.ledger_id = inner.name, inner.ledger_id
        self.inner = inner
        self.fail = fail
        self.delay_s = delay_s
        self.calls: list[tuple[bytes, bool]] = []  # (entry, failed) per append, in call order

    async def append(self, data: bytes) -> Position:
        failing = self.fail(len(self.calls))
        self.calls.append((data, failing))
        if failing:
            await asyncio.sleep(0)  # fail before earlier appends complete: results stay in order
            raise LedgerUnavailableError("injected failure")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return await self.inner.append(data)

    async def read(self, start: Position | None = None, max_entries: int = 1000) -> list[Entry]:
        return await self.inner.read(start, max_entries)

    def last_position(self) -> Position | None:
        return self.inner.last_position()

    async def refresh(self) -> Position | None:
        return await self.inner.refresh()

    def first_position(self) -> Position | None:
        return self.inner.first_position()

    def next_entry_id(self, entry_id: int) -> int:
        return self.inner.next_entry_id(entry_id)

    async def trim(self, before: Position) -> None:
        await self.inner.trim(before)

    async def wait_for_append(self, after: Position | None, timeout: float) -> bool:
        return await self.inner.wait_for_append(after, timeout)

    def stats(self) -> Sequence[SegmentStats]:
        return self.inner.stats()

    async def close(self) -> None:
        await self.inner.close()


async def entries_of(ledger: Ledger) -> list[Entry]:
    out: list[Entry] = []
    start: Position | None = None
    while entries := await ledger.read(start, 1000):
        out.extend(entries)
        last = entries[-1].position
        start = Position(last.ledger_id, last.entry_id + 1)
    return out


async def records_of(ledger: Ledger) -> list[str]:
    return [r.decode() for e in await entries_of(ledger) for r in decode_entry(e.data)]


async def check_results(ledger: Ledger, recs: Sequence[str], results: Sequence[WriteResult]) -> None:
    """Each result names where its record is, and the ledger holds exactly ``recs``, in order."""
    by_position = {e.position: decode_entry(e.data) for e in await entries_of(ledger)}
    for rec, res in zip(recs, results, strict=True):
        stored = by_position[res.position]
        assert res.batch_size == len(stored), (rec, res)
        assert stored[res.batch_index] == rec.encode(), (rec, res)
    spots = [(r.position, r.batch_index) for r in results]
    assert spots == sorted(spots) and len(set(spots)) == len(spots)
    assert await records_of(ledger) == list(recs)


async def write_in_order(writer: BufferedWriter[str], recs: Sequence[str]) -> list[WriteResult]:
    """Concurrent writes, submitted in list order (tasks start in creation order)."""
    tasks = [asyncio.create_task(writer.write(r)) for r in recs]
    return list(await asyncio.gather(*tasks))


def names(n: int, prefix: str = "r") -> list[str]:
    return [f"{prefix}{i:06d}" for i in range(n)]


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] = TC_LABELS) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def triggers(registry: CollectorRegistry) -> tuple[float, float, float]:
    base = "pulsar_txn_tc_batched_log_triggering_count_by_"
    return (
        sample(registry, base + "records_total"),
        sample(registry, base + "size_total"),
        sample(registry, base + "delay_time_total"),
    )


def tc(registry: CollectorRegistry) -> BatchedLogMetrics:
    return tc_metrics("c1", 3, registry=registry)


# --- the main process -----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["auto", "fixed"])
@pytest.mark.parametrize(("max_records", "max_bytes"), [(10, 1 << 20), (512, 4 << 20), (1000, 300)])
async def test_normal_writes(ledger: Ledger, policy: str, max_records: int, max_bytes: int) -> None:
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=max_records, max_bytes=max_bytes, policy=policy  # type: ignore[arg-type]
    )
    recs = names(1000)
    results = await write_in_order(writer, recs)
    await check_results(ledger, recs, results)
    assert all(r.batch_size <= max_records for r in results)
    assert all(len(e.data) <= max_bytes for e in await entries_of(ledger))
    assert writer.records_written == 1000
    assert writer.entries_written == len({r.position for r in results}) < 1000


async def test_few_writes_share_one_entry(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode)
    results = await write_in_order(writer, ["a", "b", "c"])
    assert [(r.batch_index, r.batch_size) for r in results] == [(0, 3), (1, 3), (2, 3)]
    assert len({r.position for r in results}) == 1
    (entry,) = await entries_of(ledger)
    assert is_batched(entry.data) and decode_entry(entry.data) == [b"a", b"b", b"c"]


async def test_20000_writes(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_records=100)
    recs = names(20_000)
    results = await write_in_order(writer, recs)
    await check_results(ledger, recs, results)
    assert writer.entries_written == 200  # all submitted in one tick: full batches


async def test_20000_writes_from_closed_loop_writers(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode)

    async def one(w: int) -> list[tuple[str, WriteResult]]:
        out = []
        for i in range(200):
            rec = f"w{w:03d}-{i:04d}"
            out.append((rec, await writer.write(rec)))
        return out

    per_writer = await asyncio.gather(*(one(w) for w in range(100)))
    stored = {e.position: decode_entry(e.data) for e in await entries_of(ledger)}
    for written in per_writer:
        spots = [(res.position, res.batch_index) for _, res in written]
        assert spots == sorted(spots)
        for rec, res in written:
            assert stored[res.position][res.batch_index] == rec.encode()
    assert sum(map(len, stored.values())) == 20_000


async def test_a_record_of_max_bytes_flushes_the_buffer_then_goes_alone(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_bytes=1000, max_delay_s=10, policy="fixed", metrics=tc(registry)
    )
    big = "B" * 1000
    recs = ["a", "b", "c", big, "d", "e"]
    tasks = [asyncio.create_task(writer.write(r)) for r in recs]
    await asyncio.sleep(0.05)
    assert all(t.done() for t in tasks[:4])  # flushed by the big record, not by the 10 s timer
    assert not any(t.done() for t in tasks[4:])
    writer.set_enabled(False)  # flushes d, e
    results = await asyncio.gather(*tasks)
    await check_results(ledger, recs, results)
    assert results[3].batch_index == 0 and results[3].batch_size == 1
    entries = await entries_of(ledger)
    assert [is_batched(e.data) for e in entries] == [True, False, True]
    assert entries[1].data == big.encode()  # alone, no header
    assert triggers(registry) == (0, 1, 1)  # "a b c" by size, "d e" by switching off
    # A record just small enough to share an entry is batched (alone, header included).
    fits = "F" * (1000 - 8)
    writer.set_enabled(True)
    res = await writer.write(fits)
    assert res.batch_size == 1
    assert is_batched((await entries_of(ledger))[-1].data)


async def test_batch_of_one(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_records=1)
    recs = names(20)
    results = await write_in_order(writer, recs)
    await check_results(ledger, recs, results)
    assert all((r.batch_index, r.batch_size) == (0, 1) for r in results)
    assert len({r.position for r in results}) == 20
    assert all(is_batched(e.data) for e in await entries_of(ledger))


async def test_batch_of_two(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_records=2)
    recs = names(11)
    results = await write_in_order(writer, recs)
    await check_results(ledger, recs, results)
    assert [(r.batch_index, r.batch_size) for r in results[:10]] == [(0, 2), (1, 2)] * 5
    assert len({r.position for r in results}) == 6


async def test_disabled_writes_one_record_per_entry_without_header(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, enabled=False, metrics=tc(registry)
    )
    assert not writer.enabled
    recs = names(50)
    results = await write_in_order(writer, recs)
    await check_results(ledger, recs, results)
    assert all((r.batch_index, r.batch_size) == (0, 1) for r in results)
    assert [e.data for e in await entries_of(ledger)] == [r.encode() for r in recs]
    assert triggers(registry) == (0, 0, 0)
    assert writer.entries_written == writer.records_written == 50


async def test_an_unbatched_record_starting_with_the_magic_is_wrapped(ledger: Ledger) -> None:
    writer: BufferedWriter[bytes] = BufferedWriter(ledger, bytes, enabled=False)
    res = await writer.write(MAGIC + b"tricky")
    assert (res.batch_index, res.batch_size) == (0, 1)
    (entry,) = await entries_of(ledger)
    assert decode_entry(entry.data) == [MAGIC + b"tricky"]


# --- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
async def test_storage_always_failing(ledgers: MemoryLedgerFactory, ledger: Ledger, enabled: bool) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_records=4, enabled=enabled)
    ledgers.inject_append_failures(LOG, 1_000_000)
    results = await asyncio.gather(
        *(writer.write(r) for r in names(20)), return_exceptions=True
    )
    assert all(isinstance(r, LedgerUnavailableError) for r in results)
    assert await records_of(ledger) == []
    assert writer.records_written == 0
    ledgers.inject_append_failures(LOG, 0)  # the storage is back: so is the writer
    res = await writer.write("after")
    assert await records_of(ledger) == ["after"] and res.batch_size == 1


@pytest.mark.parametrize("enabled", [True, False])
async def test_storage_sometimes_failing_fails_exactly_those_entries(
    ledger: Ledger, enabled: bool
) -> None:
    failing = {1, 4, 5, 9, 17}
    double = DoubleLedger(ledger, fail=lambda call: call in failing)
    writer: BufferedWriter[str] = BufferedWriter(double, str.encode, max_records=7, enabled=enabled)
    recs = names(300)
    tasks = []
    for i, rec in enumerate(recs):
        tasks.append(asyncio.create_task(writer.write(rec)))
        if i % 10 == 9:
            await asyncio.sleep(0)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    by_record = dict(zip(recs, outcomes, strict=True))
    failed_entries = 0
    for entry, failed in double.calls:
        members = [r.decode() for r in decode_entry(entry)]
        results = [by_record[m] for m in members]
        if failed:
            failed_entries += 1
            assert all(isinstance(r, LedgerUnavailableError) for r in results)
        else:
            assert all(isinstance(r, WriteResult) for r in results)
    assert failed_entries == len(failing)
    ok = [(rec, res) for rec, res in by_record.items() if isinstance(res, WriteResult)]
    await check_results(ledger, [rec for rec, _ in ok], [res for _, res in ok])


async def test_storage_failing_for_a_while_on_the_real_ledger(
    ledgers: MemoryLedgerFactory, ledger: Ledger
) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode)
    outcomes: dict[str, WriteResult | BaseException] = {}

    stop = asyncio.Event()

    async def one(w: int) -> None:
        i = 0
        while not stop.is_set():
            rec = f"w{w:02d}-{i:05d}"
            i += 1
            try:
                outcomes[rec] = await writer.write(rec)
            except LedgerUnavailableError as exc:
                outcomes[rec] = exc

    async def break_storage() -> None:
        for _ in range(3):
            await asyncio.sleep(0.02)
            ledgers.inject_append_failures(LOG, 3)  # the ledger retries twice: one append fails
            await asyncio.sleep(0.2)  # past the ledger's retry backoff (0.05 + 0.1 s)
        stop.set()

    await asyncio.gather(*(one(w) for w in range(16)), break_storage())
    failed = {r for r, o in outcomes.items() if isinstance(o, BaseException)}
    ok = [(r, o) for r, o in outcomes.items() if isinstance(o, WriteResult)]
    assert failed and ok
    stored = await records_of(ledger)
    assert not failed & set(stored)
    assert sorted(stored) == sorted(r for r, _ in ok)
    by_position = {e.position: decode_entry(e.data) for e in await entries_of(ledger)}
    for rec, res in ok:
        assert by_position[res.position][res.batch_index] == rec.encode()


async def test_closed_with_records_buffered(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=10, max_delay_s=10, policy="fixed"
    )
    recs = names(25)
    tasks = [asyncio.create_task(writer.write(r)) for r in recs]
    await asyncio.sleep(0)  # all 25 submitted: two full entries flushed, 5 buffered
    await writer.close()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(o, WriteResult) for o in outcomes[:20])
    assert all(isinstance(o, LedgerClosedError) for o in outcomes[20:])
    await check_results(ledger, recs[:20], outcomes[:20])  # type: ignore[arg-type]
    with pytest.raises(LedgerClosedError):
        await writer.write("later")
    await writer.close()  # twice is fine
    assert writer.closed
    await ledger.append(b"the ledger stays open")


async def test_closed_mid_stream(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=8, max_delay_s=0.002, policy="fixed"
    )
    outcomes: dict[str, WriteResult | BaseException] = {}

    async def one(w: int) -> None:
        i = 0
        while True:
            rec = f"w{w:02d}-{i:05d}"
            i += 1
            try:
                outcomes[rec] = await writer.write(rec)
            except LedgerClosedError as exc:
                outcomes[rec] = exc
                return

    workers = [asyncio.create_task(one(w)) for w in range(20)]
    await asyncio.sleep(0.1)
    await writer.close()
    await asyncio.wait_for(asyncio.gather(*workers), 5)
    ok = {r: o for r, o in outcomes.items() if isinstance(o, WriteResult)}
    assert len(ok) > 50
    assert sorted(await records_of(ledger)) == sorted(ok)  # nothing failed was written


async def test_cancelling_one_write_leaves_its_batch_alone(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_delay_s=0.01, policy="fixed")
    tasks = [asyncio.create_task(writer.write(r)) for r in ["a", "b", "c"]]
    await asyncio.sleep(0)
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert isinstance(done[0], WriteResult) and isinstance(done[2], WriteResult)
    assert done[0].position == done[2].position and done[2].batch_index == 2
    assert await records_of(ledger) == ["a", "b", "c"]  # a cancelled write is not taken back


async def test_cancelling_the_first_writer_of_an_idle_batch(ledger: Ledger) -> None:
    # The first write on an idle log appends the entry itself (auto policy): cancelling
    # it before the append hands the batch to a task, and the others still complete.
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode)
    tasks = [asyncio.create_task(writer.write(r)) for r in ["a", "b", "c"]]
    await asyncio.sleep(0)  # all three joined; "a" leads and yields once
    tasks[0].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert [(r.batch_index, r.batch_size) for r in done[1:]] == [(1, 3), (2, 3)]  # type: ignore[union-attr]
    assert await records_of(ledger) == ["a", "b", "c"]
    # Alone and cancelled while its append is in flight: the writer goes on, in order.
    double = DoubleLedger(ledger, delay_s=0.02)
    writer = BufferedWriter(double, str.encode)
    lone = asyncio.create_task(writer.write("d"))
    await asyncio.sleep(0.005)
    lone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await lone
    results = await write_in_order(writer, ["e", "f"])
    # "d" may or may not be written (here the double's latency was cancelled with it).
    assert await records_of(ledger) in (["a", "b", "c", "d", "e", "f"], ["a", "b", "c", "e", "f"])
    assert results[0].position == results[1].position


async def test_close_waits_for_an_entry_in_flight(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(DoubleLedger(ledger, delay_s=0.03), str.encode)
    lone = asyncio.create_task(writer.write("a"))
    await asyncio.sleep(0.005)  # "a" is being appended by its own writer
    await writer.close()
    assert lone.done() and (await lone).batch_size == 1
    # Closed while the first writer of a batch yields: its records fail.
    writer = BufferedWriter(ledger, str.encode)
    tasks = [asyncio.create_task(writer.write(r)) for r in ["b", "c"]]
    await asyncio.sleep(0)
    await writer.close()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(o, LedgerClosedError) for o in outcomes)
    assert await records_of(ledger) == ["a"]


# --- thresholds and their metrics (fixed policy: Pulsar's) ------------------------------


async def test_flush_by_records(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=5, max_delay_s=10, policy="fixed", metrics=tc(registry)
    )
    results = await write_in_order(writer, names(5))
    assert {r.batch_size for r in results} == {5}
    assert triggers(registry) == (1, 0, 0)  # by records, not by the 10 s delay
    assert sample(registry, "pulsar_txn_tc_log_records_count_per_entry_sum") == 5
    records_bucket = "pulsar_txn_tc_log_records_count_per_entry_bucket"
    assert sample(registry, records_bucket, {**TC_LABELS, "le": "10.0"}) == 1
    assert sample(registry, "pulsar_txn_tc_batched_log_entry_size_bytes_sum") == batched_size(
        [r.encode() for r in names(5)]
    )
    assert sample(
        registry, "pulsar_txn_tc_batched_log_oldest_record_delay_time_seconds_bucket",
        {**TC_LABELS, "le": "0.001"},
    ) == 1


async def test_flush_by_size(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    # Ten 96-byte records fill 4 + 10 * (4 + 96) = 1004 bytes exactly.
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_bytes=1004, max_delay_s=10, policy="fixed", metrics=tc(registry)
    )
    recs = [f"{i:02d}" + "x" * 94 for i in range(10)]
    results = await write_in_order(writer, recs)
    assert {r.batch_size for r in results} == {10}
    assert triggers(registry) == (0, 1, 0)
    assert sample(registry, "pulsar_txn_tc_batched_log_entry_size_bytes_sum") == 1004
    assert sample(
        registry, "pulsar_txn_tc_batched_log_entry_size_bytes_bucket", {**TC_LABELS, "le": "1024.0"}
    ) == 1
    # One more byte than fits: the batch is flushed before the record that would overflow it.
    recs = [f"{i:02d}" + "y" * 95 for i in range(10)]
    tasks = [asyncio.create_task(writer.write(r)) for r in recs]
    # Bounded by work, not time: the first nine complete (the 10 s delay never passes here).
    await asyncio.wait(tasks[:9])
    assert [t.done() for t in tasks] == [True] * 9 + [False]
    assert triggers(registry) == (0, 2, 0)
    await writer.close()
    (last,) = await asyncio.gather(tasks[9], return_exceptions=True)
    assert isinstance(last, LedgerClosedError)


async def test_flush_by_delay(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_delay_s=0.02, policy="fixed", metrics=tc(registry)
    )
    start = time.monotonic()
    results = await write_in_order(writer, names(3))
    assert time.monotonic() - start >= 0.02
    assert {r.batch_size for r in results} == {3}
    assert triggers(registry) == (0, 0, 1)
    delay = "pulsar_txn_tc_batched_log_oldest_record_delay_time_seconds"
    assert sample(registry, delay + "_sum") >= 0.02
    assert sample(registry, delay + "_bucket", {**TC_LABELS, "le": "0.01"}) == 0
    assert sample(registry, delay + "_bucket", {**TC_LABELS, "le": "+Inf"}) == 1


async def test_pending_ack_metric_names(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=2, metrics=pending_ack_metrics("c2", registry=registry)
    )
    await write_in_order(writer, names(4))
    labels = {"cluster": "c2"}
    prefix = "pulsar_pending_ack_batched_log_"
    assert registry.get_sample_value(prefix + "records_count_per_entry_count", labels) == 2
    assert registry.get_sample_value(prefix + "entry_size_bytes_count", labels) == 2
    assert registry.get_sample_value(prefix + "oldest_record_delay_time_seconds_count", labels) == 2
    assert registry.get_sample_value(prefix + "triggering_count_by_records_total", labels) == 2
    assert registry.get_sample_value(prefix + "triggering_count_by_size_total", labels) == 0
    assert registry.get_sample_value(prefix + "triggering_count_by_delay_time_total", labels) == 0


@pytest.mark.parametrize("family", ["tc", "pending_ack"])
async def test_shipped_pulsar_names_count_the_same_entries(ledger: Ledger, family: str) -> None:
    """Pulsar's shipped names see every entry the seed's do; a large record is large_data there."""
    registry = CollectorRegistry()
    if family == "tc":
        metrics, labels = tc_metrics("c1", 3, registry=registry), TC_LABELS
        seed, shipped = "pulsar_txn_tc_batched_log_", "pulsar_txn_tc_bufferedwriter_"
        seed_records = "pulsar_txn_tc_log_records_count_per_entry"
    else:
        metrics, labels = pending_ack_metrics("c1", registry=registry), {"cluster": "c1"}
        seed, shipped = "pulsar_pending_ack_batched_log_", "pulsar_txn_pending_ack_store_bufferedwriter_"
        seed_records = seed + "records_count_per_entry"
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=2, max_bytes=512, max_delay_s=10.0, policy="fixed", metrics=metrics
    )
    await write_in_order(writer, names(4))  # two entries, sealed by records
    small = asyncio.create_task(writer.write("s"))  # buffered ...
    await asyncio.sleep(0)
    await writer.write("x" * 1000)  # ... then sealed by a record too large to share (written alone)
    await small

    def value(name: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert value(shipped + "flush_trigger_max_records_total") == 2
    assert value(shipped + "flush_trigger_large_data_total") == 1
    assert value(shipped + "flush_trigger_max_size_total") == 0
    assert value(seed + "triggering_count_by_records_total") == 2
    assert value(seed + "triggering_count_by_size_total") == 1
    for seed_name, shipped_name in (
        (seed_records, shipped + "batch_records"),
        (seed + "entry_size_bytes", shipped + "batch_size_bytes"),
        (seed + "oldest_record_delay_time_seconds", shipped + "batch_oldest_record_delay_seconds"),
    ):
        assert value(shipped_name + "_count") == value(seed_name + "_count") == 3
        assert value(shipped_name + "_sum") == value(seed_name + "_sum")


def test_metrics_are_registered_once_per_registry() -> None:
    registry = CollectorRegistry()
    a, b = tc_metrics("c1", 0, registry=registry), tc_metrics("c1", 1, registry=registry)
    pending_ack_metrics("c1", registry=registry)
    pending_ack_metrics("c1", registry=registry)
    assert a is not b
    buckets = {
        s.labels["le"] for m in registry.collect() for s in m.samples
        if s.name == "pulsar_txn_tc_batched_log_entry_size_bytes_bucket"
        and s.labels["coordinator_id"] == "0"
    }
    assert {float(le) for le in buckets} == {
        128, 512, 1024, 2048, 4096, 16384, 102400, 1048576, float("inf")
    }
    with pytest.raises(ValueError, match="labels"):
        BatchedLogMetrics("pulsar_txn_tc_batched_log_", {"cluster": "c1"},
                          shipped_prefix="pulsar_txn_tc_bufferedwriter_", registry=registry)


# --- switching at run time ----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["auto", "fixed"])
async def test_switching_under_load_loses_and_reorders_nothing(ledger: Ledger, policy: str) -> None:
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_records=16, max_delay_s=0.001, policy=policy  # type: ignore[arg-type]
    )
    rng = random.Random(7)
    recs = names(5000)
    tasks = []
    switches = 0
    for rec in recs:
        tasks.append(asyncio.create_task(writer.write(rec)))
        roll = rng.random()
        if roll < 0.2:
            await asyncio.sleep(0)  # the tasks so far start: their records are submitted
        elif roll < 0.22:
            await asyncio.sleep(0.001)
        if rng.random() < 0.02:
            await asyncio.sleep(0)
            writer.set_enabled(not writer.enabled)
            switches += 1
    results = await asyncio.gather(*tasks)
    await check_results(ledger, recs, results)
    kinds = {is_batched(e.data) for e in await entries_of(ledger)}
    assert switches > 50 and kinds == {True, False}


@pytest.mark.parametrize("seed", range(12))
async def test_random_mix_keeps_every_record_in_order(ledgers: LedgerFactory, seed: int) -> None:
    """Batches, idle flushes, timers, large records, switching: the log is the write order."""
    rng = random.Random(seed)
    ledger = await ledgers.open(f"mix-{seed}")
    writer: BufferedWriter[str] = BufferedWriter(
        DoubleLedger(ledger, delay_s=rng.choice([0, 0.001])), str.encode,
        max_records=rng.choice([1, 2, 7, 64]), max_bytes=rng.choice([300, 2000, 1 << 20]),
        max_delay_s=rng.choice([0.0005, 0.002]), policy=rng.choice(["auto", "fixed"]),
    )
    recs = [f"r{i:05d}" + "x" * rng.choice([0, 0, 0, 50, 400, 2500]) for i in range(3000)]
    tasks = []
    for rec in recs:
        tasks.append(asyncio.create_task(writer.write(rec)))
        roll = rng.random()
        if roll < 0.3:
            await asyncio.sleep(0)
        elif roll < 0.32:
            await asyncio.sleep(0.001)
        elif roll < 0.34:
            await asyncio.sleep(0)
            writer.set_enabled(not writer.enabled)
    results = await asyncio.gather(*tasks)
    await check_results(ledger, recs, results)


@pytest.mark.parametrize("seed", range(12))
async def test_random_mix_with_failures_and_cancels(ledgers: LedgerFactory, seed: int) -> None:
    """As above, with failing appends and cancelled writes: what is stored is in order,
    holds every success and no failure."""
    rng, fail_rng = random.Random(seed), random.Random(-seed)
    ledger = await ledgers.open(f"mixf-{seed}")
    writer: BufferedWriter[str] = BufferedWriter(
        DoubleLedger(ledger, fail=lambda call: fail_rng.random() < 0.05), str.encode,
        max_records=rng.choice([2, 7, 64]), max_bytes=rng.choice([300, 1 << 20]),
        max_delay_s=0.001, policy=rng.choice(["auto", "fixed"]),
    )
    recs = [f"r{i:05d}" + "x" * rng.choice([0, 0, 50, 400]) for i in range(2000)]
    tasks: list[asyncio.Task[WriteResult]] = []
    for rec in recs:
        tasks.append(asyncio.create_task(writer.write(rec)))
        roll = rng.random()
        if roll < 0.3:
            await asyncio.sleep(0)
        elif roll < 0.32:
            await asyncio.sleep(0)
            writer.set_enabled(not writer.enabled)
        elif roll < 0.34:
            rng.choice(tasks[-20:]).cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0.01)  # cancelled writes whose entry was still on its way
    stored = await records_of(ledger)
    index = {rec: i for i, rec in enumerate(recs)}
    assert [index[r] for r in stored] == sorted(index[r] for r in stored)  # in write order
    ok = [(rec, o) for rec, o in zip(recs, outcomes, strict=True) if isinstance(o, WriteResult)]
    failed = {rec for rec, o in zip(recs, outcomes, strict=True) if isinstance(o, LedgerUnavailableError)}
    assert all(isinstance(o, (WriteResult, LedgerUnavailableError, asyncio.CancelledError)) for o in outcomes)
    assert failed and len(ok) > 1000
    assert not failed & set(stored)
    assert {rec for rec, _ in ok} <= set(stored)
    by_position = {e.position: decode_entry(e.data) for e in await entries_of(ledger)}
    for rec, res in ok:
        assert by_position[res.position][res.batch_index] == rec.encode()


async def test_switching_with_closed_loop_writers(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode)
    written: dict[int, list[tuple[str, WriteResult]]] = {w: [] for w in range(32)}
    stop = asyncio.Event()

    async def one(w: int) -> None:
        i = 0
        while not stop.is_set():
            rec = f"w{w:02d}-{i:05d}"
            written[w].append((rec, await writer.write(rec)))
            i += 1

    async def toggle() -> None:
        for _ in range(100):
            await asyncio.sleep(0.002)
            writer.set_enabled(not writer.enabled)
        stop.set()

    await asyncio.gather(toggle(), *(one(w) for w in range(32)))
    stored = {e.position: decode_entry(e.data) for e in await entries_of(ledger)}
    total = 0
    for results in written.values():
        spots = [(r.position, r.batch_index) for _, r in results]
        assert spots == sorted(spots)
        for rec, res in results:
            assert stored[res.position][res.batch_index] == rec.encode()
        total += len(results)
    assert sum(map(len, stored.values())) == total


async def test_switching_off_flushes_the_buffer_first(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_delay_s=10, policy="fixed")
    first = [asyncio.create_task(writer.write(r)) for r in ["a", "b"]]
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in first)
    writer.set_enabled(False)
    later = await writer.write("c")
    results = [*(await asyncio.gather(*first)), later]
    await check_results(ledger, ["a", "b", "c"], results)
    assert [(r.batch_index, r.batch_size) for r in results] == [(0, 2), (1, 2), (0, 1)]


# --- the auto policy ------------------------------------------------------------------------


async def test_auto_lone_writer_is_not_held_back(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    writer: BufferedWriter[str] = BufferedWriter(
        ledger, str.encode, max_delay_s=600, metrics=tc(registry)
    )
    for rec in names(50):  # never waits for the 600 s timer (the test's own timeout is shorter)
        res = await asyncio.wait_for(writer.write(rec), 60)
        assert res.batch_size == 1
    assert triggers(registry) == (0, 0, 50)  # the idle flush counts as by_delay_time
    fixed: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_delay_s=0.05, policy="fixed")
    start = time.monotonic()
    await fixed.write("held")
    assert time.monotonic() - start >= 0.05


async def test_auto_64_concurrent_writers_get_large_batches(ledger: Ledger) -> None:
    double = DoubleLedger(ledger, delay_s=0.001)
    writer: BufferedWriter[str] = BufferedWriter(double, str.encode)

    async def one(w: int) -> None:
        for i in range(30):
            await writer.write(f"w{w:02d}-{i:03d}")

    await asyncio.gather(*(one(w) for w in range(64)))
    assert writer.records_written == 64 * 30
    assert writer.records_written / writer.entries_written >= 32


async def test_auto_gathers_while_an_append_is_in_flight(ledger: Ledger) -> None:
    registry = CollectorRegistry()
    double = DoubleLedger(ledger, delay_s=0.03)
    writer: BufferedWriter[str] = BufferedWriter(double, str.encode, max_delay_s=5, metrics=tc(registry))
    first = asyncio.create_task(writer.write("a"))
    await asyncio.sleep(0.005)  # "a" is in flight
    rest = [asyncio.create_task(writer.write(r)) for r in ["b", "c", "d"]]
    results = [await first, *(await asyncio.gather(*rest))]
    await check_results(ledger, ["a", "b", "c", "d"], results)
    assert [r.batch_size for r in results] == [1, 3, 3, 3]  # flushed when "a" completed
    assert triggers(registry) == (0, 0, 2)
    # Still bounded by max delay: a short one flushes while the first append is in flight.
    short: BufferedWriter[str] = BufferedWriter(double, str.encode, max_delay_s=0.005)
    first = asyncio.create_task(short.write("e"))
    await asyncio.sleep(0.001)
    second = asyncio.create_task(short.write("f"))
    await asyncio.sleep(0.015)
    assert len(double.calls) == 4  # "f" handed to the ledger before "e" came back
    assert not first.done()
    await asyncio.gather(first, second)


async def test_auto_same_tick_writes_share_an_entry_even_past_max_records(ledger: Ledger) -> None:
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, max_records=10)
    results = await write_in_order(writer, names(25))
    assert [r.batch_size for r in results] == [10] * 20 + [5] * 5


# --- construction and settings ----------------------------------------------------------------


async def test_invalid_writer_arguments(ledger: Ledger) -> None:
    for bad in ({"max_records": 0}, {"max_bytes": 0}, {"max_delay_s": 0}, {"policy": "eager"}):
        with pytest.raises(ValueError):
            BufferedWriter(ledger, str.encode, **bad)  # type: ignore[arg-type]


def test_settings_defaults_and_writer_kwargs() -> None:
    s = BatchingSettings()
    assert s.writer_kwargs() == {
        "max_records": 512, "max_bytes": 4 << 20, "max_delay_s": 0.001, "policy": "auto",
        "enabled": True,
    }
    s = BatchingSettings(enabled=False, policy="fixed", max_records=10, max_bytes=128 << 10, max_delay_ms=5)
    assert s.writer_kwargs()["max_delay_s"] == 0.005


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_records", 9, "max_records must be at least 10"),
        ("max_bytes", (128 << 10) - 1, "max_bytes must be at least 131072 bytes"),
        ("max_delay_ms", 0.5, "max_delay_ms must be at least 1 ms"),
        ("policy", "eager", "auto"),
    ],
)
def test_settings_are_validated(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BatchingSettings.model_validate({field: value})


async def test_writer_from_settings(ledger: Ledger) -> None:
    settings = BatchingSettings(max_records=10)
    writer: BufferedWriter[str] = BufferedWriter(ledger, str.encode, **settings.writer_kwargs())
    results = await write_in_order(writer, names(30))
    assert {r.batch_size for r in results} == {10}

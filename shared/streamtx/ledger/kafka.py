"""The Kafka backend (``kafka://host:9092[,host2:9092][?options]``).

Topic naming
------------
One ledger is partition 0 of one single-partition topic::

    <topic_prefix><sanitized name>          the ledger's frames, entry id = Kafka offset
    <topic_prefix><sanitized name>.trim     sidecar: one record per trim (see below)

``sanitized name`` keeps a ledger name as it is when it only uses
``[A-Za-z0-9_-]``. Otherwise every other character (the dot included) becomes
``_`` and ``-`` plus the first 12 hex digits of the SHA-256 of the original name
is appended, so two names never share a topic. The dot is replaced on purpose:
a ledger named ``x.trim`` must not land on the sidecar of ledger ``x``, and Kafka
refuses topics whose names differ only by ``.`` versus ``_``. A sanitized name
longer than ``249 - len(".trim") - len(topic_prefix)`` characters is cut and
gets the same hash suffix, so the sidecar's name stays within Kafka's 249.
Examples with the default prefix ``streamtx.``::

    orders-0                       -> streamtx.orders-0
    persistent://public/default/t  -> streamtx.persistent___public_default_t-3f0c9f6b1a2e

Topics are created on open (one partition, ``retention.ms=-1``,
``retention.bytes=-1``, ``cleanup.policy=delete``; replication factor
``min(3, brokers)`` unless given) and deleted by :meth:`KafkaLedgerStore.delete`.

Writing
-------
One ``AIOKafkaProducer`` per store (``acks=all``, ``linger_ms=0``,
``enable_idempotence`` as configured). :meth:`KafkaRawLog.append_batch` puts all
the frames of one group commit in one Kafka record batch (``create_batch`` /
``send_batch``; a batch over ~900 KiB is split), so they get consecutive offsets
and land atomically. Any Kafka error or a timeout is a retriable
:class:`~streamtx.errors.LedgerUnavailableError`; a timed-out batch may still
land later, which is safe because replay drops duplicates (:mod:`.framed`).

Reading
-------
Each raw log has its own fetch connection (an ``AIOKafkaClient`` with no group,
no offsets committed) and sends plain Fetch requests. Fetches are explicit,
rather than through ``AIOKafkaConsumer``'s background prefetcher, so "a fetch
returned nothing" is a fact and not a timed-out wait: the tansu broker reports a
partition's end (ListOffsets ``latest`` and, as was seen, the high watermark)
as the start of the last record batch (or one past it), so a reader that stops
at the reported end misses acknowledged entries. :meth:`KafkaRawLog.read_raw`
therefore trusts data only: it fetches until a fetch returns nothing new, and a
fetch that returns nothing below the largest end ever seen is retried.
:meth:`KafkaRawLog.end_offset` is ``max(reported end, last offset seen + 1)``
after reading to the end. Frames read or appended are kept in a small per-log
cache (the log is immutable), so a writer reading its own tail does not fetch.

Trimming
--------
:meth:`KafkaRawLog.trim_raw` first appends ``(before, FenceState)`` to the
sidecar topic (acks=all), then, with ``delete_records`` on, asks the broker to
DeleteRecords below ``before`` in the ledger topic and below the new record in
the sidecar (a failure there is logged: the logical trim already stands).
:meth:`KafkaRawLog.trim_state` reads the sidecar's last record; reads never
return offsets below that logical start even when nothing was deleted
physically (tansu closes the connection on DeleteRecords, so tests run with
``delete_records=false``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    MessageSizeTooLargeError,
    ProducerClosed,
    RecordListTooLargeError,
    RecordTooLargeError,
    for_code,
)
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.memory_records import MemoryRecords

from streamtx.errors import (
    CorruptEntryError,
    LedgerClosedError,
    LedgerError,
    LedgerUnavailableError,
    MalformedError,
)
from streamtx.ledger.base import Ledger, LedgerStore, SegmentStats
from streamtx.ledger.framed import FramedLedger
from streamtx.ledger.framing import FenceState
from streamtx.ledger.raw import RawLog

log = logging.getLogger(__name__)

TOPIC_MAX = 249  # Kafka's limit on a topic name
TRIM_SUFFIX = ".trim"
_HASH_CHARS = 12
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX_OK = re.compile(r"[A-Za-z0-9._-]*")

_MAX_BATCH_BYTES = 900 * 1024  # one record batch per group commit, under 1 MiB requests
_MAX_REQUEST_BYTES = 1024 * 1024
_FETCH_MAX_BYTES = 1024 * 1024
_FETCH_MIN_BYTES = 64 * 1024
_CACHE_FRAMES = 4096
_CACHE_BYTES = 4 << 20
_EMPTY_RETRY_S = 0.005  # a fetch that returned nothing below a known end is retried
_METADATA_RETRIES = 3

_EARLIEST, _LATEST = -2, -1
_ERR_OFFSET_OUT_OF_RANGE = 1
_ERR_TOPIC_EXISTS = 36
_ERR_UNKNOWN_TOPIC = 3

_TRIM_RECORD = struct.Struct(">BQ")  # version 1, then the logical start; FenceState follows
_TRIM_VERSION = 1


def topic_for(prefix: str, name: str) -> str:
    """The ledger topic of ``name`` (see the module docstring for the scheme)."""
    budget = TOPIC_MAX - len(TRIM_SUFFIX) - len(prefix)
    safe = _UNSAFE.sub("_", name)
    if safe != name or not safe or len(safe) > budget:
        digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
        safe = f"{safe[: budget - _HASH_CHARS - 1]}-{digest}"
    return prefix + safe


@dataclass(slots=True)
class _Fetched:
    """One partition's part of a Fetch response."""

    frames: list[tuple[int, bytes]] = field(default_factory=list)
    next_offset: int = -1  # one past the last record batch returned
    high_watermark: int = -1
    log_start: int = -1
    out_of_range: bool = False


def _parse_fetch(response: Any, tp: Any) -> _Fetched:
    out = _Fetched()
    for topic, partitions in response.topics:
        if topic != tp.topic:
            continue
        for partition, error_code, high_watermark, *rest in partitions:
            if partition != tp.partition:
                continue
            if error_code == _ERR_OFFSET_OUT_OF_RANGE:
                out.out_of_range = True
                return out
            if error_code:
                raise for_code(error_code)(f"fetch {tp.topic}[{tp.partition}]")
            out.high_watermark = int(high_watermark)
            if response.API_VERSION >= 5 and len(rest) >= 4:
                out.log_start = int(rest[1])
            data = rest[-1]
            if not data:
                return out
            records = MemoryRecords(bytes(data))
            while records.has_next():
                batch = records.next_batch()
                if batch is None:
                    break
                next_offset = getattr(batch, "next_offset", None)
                if next_offset is not None:
                    out.next_offset = max(out.next_offset, int(next_offset))
                if getattr(batch, "is_control_batch", False):
                    continue
                for record in batch:
                    offset = int(record.offset)
                    value = record.value
                    out.frames.append((offset, bytes(value) if value is not None else b""))
                    out.next_offset = max(out.next_offset, offset + 1)
    return out


class KafkaRawLog(RawLog):
    """Partition 0 of one topic as a raw log; created by :class:`KafkaLedgerStore`."""

    def __init__(self, store: KafkaLedgerStore, name: str, topic: str) -> None:
        self.name = name
        self.topic = topic
        self.trim_topic = topic + TRIM_SUFFIX
        self._store = store
        self._tp = TopicPartition(topic, 0)
        self._trim_tp = TopicPartition(self.trim_topic, 0)
        self._client: Any = None
        self._client_lock = asyncio.Lock()
        self._start = 0
        self._state = FenceState()
        self._end_seen = 0  # one past the last offset seen in a fetch or an append
        self._reported_end = 0  # the broker's high watermark: may lag the real end
        self._cache: dict[int, bytes] = {}
        self._cache_bytes = 0
        self._counted_end = 0  # frames below this were counted into the byte stats
        self._frames_counted = 0
        self._bytes_counted = 0
        self._closed = False

    # --- the fetch connection -------------------------------------------------

    async def _fetch_client(self) -> Any:
        if self._closed:
            raise LedgerClosedError(f"kafka ledger {self.name} is closed")
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._client is None:
                client = AIOKafkaClient(
                    bootstrap_servers=self._store.bootstrap,
                    client_id=f"streamtx-ledger-reader-{self.topic}"[:200],
                    request_timeout_ms=self._store.request_timeout_ms,
                    retry_backoff_ms=50,
                )
                try:
                    await client.bootstrap()
                except BaseException:
                    await client.close()
                    raise
                self._client = client
        return self._client

    async def _leader(self, tp: Any) -> int:
        client = await self._fetch_client()
        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            await client._wait_on_metadata(tp.topic)
            node = client.cluster.leader_for_partition(tp)
            if node is None or node < 0:
                raise LeaderNotAvailableError(f"no leader for {tp.topic}[{tp.partition}]")
        return int(node)

    async def _request(self, tp: Any, request: Any) -> Any:
        """Send ``request`` to ``tp``'s leader, refreshing metadata on stale leaders."""
        for attempt in range(_METADATA_RETRIES):
            node = await self._leader(tp)
            client = await self._fetch_client()
            try:
                return await client.send(node, request)
            except KafkaError as exc:
                if not (exc.retriable or exc.invalid_metadata) or attempt == _METADATA_RETRIES - 1:
                    raise
                await client.force_metadata_update()
                await asyncio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    async def _fetch(self, tp: Any, offset: int, max_bytes: int = _FETCH_MAX_BYTES) -> _Fetched:
        """One Fetch request at ``offset``: frames at offsets >= ``offset`` (possibly none)."""
        request = FetchRequest(
            self._store.fetch_wait_ms, 1, max_bytes, 0, [(tp.topic, [(tp.partition, offset, max_bytes)])]
        )
        for attempt in range(_METADATA_RETRIES):
            response = await self._request(tp, request)
            try:
                fetched = _parse_fetch(response, tp)
            except KafkaError as exc:
                if not (exc.retriable or exc.invalid_metadata) or attempt == _METADATA_RETRIES - 1:
                    raise
                await (await self._fetch_client()).force_metadata_update()
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            fetched.frames = [f for f in fetched.frames if f[0] >= offset]
            return fetched
        raise AssertionError("unreachable")

    async def _list_offset(self, tp: Any, which: int) -> int:
        """ListOffsets ``earliest`` (-2) or ``latest`` (-1; may lag the real end on tansu)."""
        response = await self._request(tp, OffsetRequest(-1, 0, [(tp.topic, [(tp.partition, which)])]))
        for topic, partitions in response.topics:
            for partition, error_code, *info in partitions:
                if topic != tp.topic or partition != tp.partition:
                    continue
                if error_code:
                    raise for_code(error_code)(f"list offsets {tp.topic}[{tp.partition}]")
                if response.API_VERSION == 0:
                    return int(info[0][0]) if info[0] else 0
                return int(info[1])
        raise LeaderNotAvailableError(f"no offsets for {tp.topic}[{tp.partition}] in the response")

    async def _read_through(
        self, tp: Any, start: int, max_bytes: int = _FETCH_MAX_BYTES
    ) -> tuple[list[tuple[int, bytes]], int, bool]:
        """Frames at ``start`` onwards from one fetch, retrying an empty fetch below a known end.

        Returns the frames (none at the end), the next offset to read, and
        whether ``start`` was out of the partition's range.
        """
        known_end = start
        while True:
            fetched = await self._fetch(tp, start, max_bytes)
            if fetched.out_of_range:
                return [], start, True
            if tp == self._tp:
                self._reported_end = max(self._reported_end, fetched.high_watermark)
                known_end = max(self._reported_end, self._end_seen)
            else:
                known_end = max(known_end, fetched.high_watermark)
            if fetched.frames:
                return fetched.frames, fetched.frames[-1][0] + 1, False
            if fetched.next_offset > start:  # only control records here: skip them
                start = fetched.next_offset
                continue
            if start >= known_end:
                return [], start, False
            # The broker said the log goes past ``start`` but sent nothing: ask again.
            await asyncio.sleep(_EMPTY_RETRY_S)

    # --- RawLog ------------------------------------------------------------------

    async def append_batch(self, frames: Sequence[bytes]) -> list[int]:
        self._check_open()
        if not frames:
            return []
        for frame in frames:
            if len(frame) > _MAX_BATCH_BYTES:
                raise LedgerError(
                    f"kafka ledger {self.name}: a frame of {len(frame)} bytes is over the "
                    f"{_MAX_BATCH_BYTES} byte limit"
                )
        async with self._store.op(f"append to {self.topic}"):
            producer = await self._store.producer()
            batches: list[tuple[Any, int]] = []
            builder, count = producer.create_batch(), 0
            for frame in frames:
                if builder.append(timestamp=None, key=None, value=frame) is None:
                    batches.append((builder, count))
                    builder, count = producer.create_batch(), 0
                    if builder.append(timestamp=None, key=None, value=frame) is None:
                        raise LedgerError(f"kafka ledger {self.name}: frame does not fit a batch")
                count += 1
            batches.append((builder, count))
            futures = [await _send_batch(producer, b, self._tp) for b, _ in batches]
            metas = await asyncio.gather(*futures)
        offsets: list[int] = []
        for (_, n), meta in zip(batches, metas, strict=True):
            offsets.extend(range(int(meta.offset), int(meta.offset) + n))
        self._remember(list(zip(offsets, frames, strict=True)))
        return offsets

    async def read_raw(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        self._check_open()
        if max_frames <= 0:
            return []
        start = max(start, self._start)
        cached = self._from_cache(start, max_frames)
        if cached:
            return cached
        async with self._store.op(f"read {self.topic}"):
            while True:
                frames, _, out_of_range = await self._read_through(
                    self._tp, start, self._fetch_bytes(max_frames)
                )
                if frames:
                    self._remember(frames)
                    return frames[:max_frames]
                if not (out_of_range and await self._trimmed_by_others(start)):
                    return []
                start = max(start, self._start)

    async def _trimmed_by_others(self, start: int) -> bool:
        """After an out-of-range fetch: did another handle trim (and delete) below ``start``?"""
        earliest = await self._list_offset(self._tp, _EARLIEST)
        if start >= earliest:
            return False
        await self._load_trim()
        self._start = max(self._start, earliest)
        return True

    def start_offset(self) -> int:
        return self._start

    async def end_offset(self) -> int:
        self._check_open()
        async with self._store.op(f"find the end of {self.topic}"):
            pos = max(self._start, self._end_seen)
            while True:
                frames, nxt, _ = await self._read_through(self._tp, pos)
                if not frames:
                    break
                self._remember(frames)
                # Skip to just before the reported end: nothing in between matters here.
                pos = max(nxt, self._reported_end - 1)
            return max(self._start, self._end_seen, self._reported_end)

    async def trim_raw(self, before: int, state: FenceState) -> None:
        self._check_open()
        if before <= self._start:
            return
        record = _TRIM_RECORD.pack(_TRIM_VERSION, before) + state.encode()
        async with self._store.op(f"persist the trim of {self.topic}"):
            producer = await self._store.producer()
            builder = producer.create_batch()
            builder.append(timestamp=None, key=None, value=record)
            meta = await (await _send_batch(producer, builder, self._trim_tp))
        self._start, self._state = before, FenceState.decode(state.encode())
        for offset in [o for o in self._cache if o < before]:
            self._cache_bytes -= len(self._cache.pop(offset))
        if self._store.delete_records:
            await self._store.delete_below(
                {self._tp: before, self._trim_tp: int(meta.offset)}, what=self.topic
            )

    async def trim_state(self) -> tuple[int, FenceState]:
        self._check_open()
        async with self._store.op(f"read the trim state of {self.topic}"):
            await self._load_trim()
        return self._start, FenceState.decode(self._state.encode())

    async def _load_trim(self) -> None:
        """Read the sidecar's last record into ``_start`` and ``_state``."""
        tp = self._trim_tp
        earliest = await self._list_offset(tp, _EARLIEST)
        latest = await self._list_offset(tp, _LATEST)  # may be the start of the last batch
        last = await self._scan_last(tp, max(earliest, latest - 1))
        if last is None and latest - 1 > earliest:
            last = await self._scan_last(tp, earliest)
        if last is None:
            return
        raw = last[1]
        if len(raw) < _TRIM_RECORD.size:
            raise CorruptEntryError(f"{self.trim_topic}@{last[0]}: short trim record")
        version, start = _TRIM_RECORD.unpack_from(raw)
        if version != _TRIM_VERSION:
            raise CorruptEntryError(f"{self.trim_topic}@{last[0]}: trim record version {version}")
        try:
            state = FenceState.decode(raw[_TRIM_RECORD.size :])
        except struct.error as exc:
            raise CorruptEntryError(f"{self.trim_topic}@{last[0]}: {exc}") from exc
        if start >= self._start:
            self._start, self._state = start, state

    async def _scan_last(self, tp: Any, start: int) -> tuple[int, bytes] | None:
        last: tuple[int, bytes] | None = None
        while True:
            frames, start, _ = await self._read_through(tp, start)
            if not frames:
                return last
            last = frames[-1]

    def stats(self) -> Sequence[SegmentStats]:
        end = max(self._end_seen, self._reported_end, self._start)
        entries = end - self._start
        average = self._bytes_counted / self._frames_counted if self._frames_counted else 0.0
        return [SegmentStats(self._start, entries, round(entries * average))]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cache.clear()
        self._cache_bytes = 0
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        self._store.forget(self)

    # --- bookkeeping -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError(f"kafka ledger {self.name} is closed")

    def _remember(self, frames: Sequence[tuple[int, bytes]]) -> None:
        """Note frames seen at their offsets: the end, the byte stats, the cache."""
        if not frames:
            return
        self._end_seen = max(self._end_seen, frames[-1][0] + 1)
        for offset, data in frames:
            if offset >= self._counted_end:
                self._frames_counted += 1
                self._bytes_counted += len(data)
                self._counted_end = offset + 1
            if offset < self._start or offset in self._cache:
                continue
            self._cache[offset] = data
            self._cache_bytes += len(data)
        while self._cache and (
            len(self._cache) > _CACHE_FRAMES or self._cache_bytes > _CACHE_BYTES
        ):
            self._cache_bytes -= len(self._cache.pop(next(iter(self._cache))))

    def _fetch_bytes(self, max_frames: int) -> int:
        """Fetch about twice what ``max_frames`` frames take, so the rest fits the cache."""
        average = self._bytes_counted / self._frames_counted if self._frames_counted else 256.0
        want = int(max_frames * (average + 32) * 2)
        return max(_FETCH_MIN_BYTES, min(_FETCH_MAX_BYTES, want))

    def _from_cache(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        offset = start
        while len(out) < max_frames:
            data = self._cache.get(offset)
            if data is None:
                break
            out.append((offset, data))
            offset += 1
        return out


async def _send_batch(producer: Any, builder: Any, tp: Any) -> asyncio.Future[Any]:
    """``producer.send_batch``, plus a workaround for an aiokafka (0.14) leak.

    A batch that fails sets its exception on its future (which ``send_batch``
    returns shielded: once our wait is cancelled by a timeout, nobody reads it)
    and on an internal "drain waiter" that nobody awaits. "Future exception was
    never retrieved" is then logged from the garbage collector, at any point of
    the program; when that happens inside ``ast.parse`` (pytest's assertion
    rewriting), CPython 3.11 raises ``SystemError: AST constructor recursion
    depth mismatch``. Mark both retrieved once the batch is done; the caller
    still sees the error through the returned future when it waits.
    """
    future: asyncio.Future[Any] = await producer.send_batch(builder, tp.topic, partition=tp.partition)
    try:
        batch = producer._message_accumulator._batches[tp][-1]
        batch_future = batch.future
    except (AttributeError, KeyError, IndexError, TypeError):
        return future  # aiokafka changed: nothing to work around

    def retrieve(_: object) -> None:
        for fut in (batch_future, getattr(batch, "_drain_waiter", None)):
            if isinstance(fut, asyncio.Future) and fut.done() and not fut.cancelled():
                fut.exception()

    batch_future.add_done_callback(retrieve)
    return future


class KafkaLedgerStore(LedgerStore):
    """Ledgers as single-partition Kafka topics (see the module docstring).

    ``timeout_s`` bounds every broker operation (an append, a read, opening);
    when it passes the operation fails with a retriable LedgerUnavailableError.
    ``replication_factor`` defaults to ``min(3, brokers in the cluster)``.
    ``fetch_wait_ms`` is how long a fetch at the end of a log waits for data
    (tansu answers a zero wait with an empty response, so keep it at least 1).
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        idempotence: bool = True,
        delete_records: bool = True,
        topic_prefix: str = "streamtx.",
        timeout_s: float = 30.0,
        replication_factor: int | None = None,
        fetch_wait_ms: int = 5,
    ) -> None:
        if not _PREFIX_OK.fullmatch(topic_prefix):
            raise MalformedError(f"kafka topic prefix {topic_prefix!r} is not [A-Za-z0-9._-]*")
        if len(topic_prefix) > TOPIC_MAX - len(TRIM_SUFFIX) - _HASH_CHARS - 2:
            raise MalformedError(f"kafka topic prefix {topic_prefix!r} is too long")
        self.bootstrap = bootstrap
        self.idempotence = idempotence
        self.delete_records = delete_records
        self.topic_prefix = topic_prefix
        self.timeout_s = timeout_s
        self.request_timeout_ms = max(1000, int(timeout_s * 1000))
        self.fetch_wait_ms = max(1, fetch_wait_ms)
        self._replication = replication_factor
        self._producer: Any = None
        self._admin: Any = None
        self._producer_lock = asyncio.Lock()
        self._admin_lock = asyncio.Lock()
        self._topics_ready: set[str] = set()
        self._ledgers: dict[KafkaRawLog, Ledger] = {}
        self._closed = False

    def topic(self, name: str) -> str:
        """The ledger topic of ``name``."""
        return topic_for(self.topic_prefix, name)

    @contextlib.asynccontextmanager
    async def op(self, what: str) -> AsyncIterator[None]:
        """Bound a broker operation by ``timeout_s`` and map Kafka errors to ledger errors."""
        try:
            async with asyncio.timeout(self.timeout_s):
                yield
        except TimeoutError as exc:
            raise LedgerUnavailableError(f"kafka: {what} timed out after {self.timeout_s}s") from exc
        except ProducerClosed as exc:
            raise LedgerClosedError(f"kafka: {what}: the store is closed") from exc
        except (
            MessageSizeTooLargeError,
            RecordTooLargeError,
            RecordListTooLargeError,
            InvalidTopicError,
        ) as exc:
            raise LedgerError(f"kafka: {what}: {exc}") from exc
        except (KafkaError, OSError) as exc:
            raise LedgerUnavailableError(f"kafka: {what}: {exc!r}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("kafka ledger store is closed")

    async def producer(self) -> Any:
        """The store's one producer, started on first use."""
        self._check_open()
        if self._producer is not None:
            return self._producer
        async with self._producer_lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.bootstrap,
                    client_id="streamtx-ledger-writer",
                    acks="all",
                    enable_idempotence=self.idempotence,
                    linger_ms=0,
                    max_batch_size=_MAX_BATCH_BYTES,
                    max_request_size=_MAX_REQUEST_BYTES,
                    request_timeout_ms=self.request_timeout_ms,
                    retry_backoff_ms=100,
                )
                try:
                    await producer.start()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await producer.stop()
                    raise
                self._producer = producer
        return self._producer

    async def admin(self) -> Any:
        self._check_open()
        if self._admin is not None:
            return self._admin
        async with self._admin_lock:
            if self._admin is None:
                admin = AIOKafkaAdminClient(
                    bootstrap_servers=self.bootstrap,
                    client_id="streamtx-ledger-admin",
                    request_timeout_ms=self.request_timeout_ms,
                    retry_backoff_ms=50,
                )
                try:
                    await admin.start()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await admin.close()
                    raise
                self._admin = admin
        return self._admin

    async def _ensure_topics(self, topic: str) -> None:
        if topic in self._topics_ready:
            return
        admin = await self.admin()
        if self._replication is None:
            cluster = await admin.describe_cluster()
            self._replication = min(3, max(1, len(cluster.get("brokers") or [])))
        configs = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
        response = await admin.create_topics(
            [NewTopic(t, 1, self._replication, topic_configs=configs) for t in (topic, topic + TRIM_SUFFIX)]
        )
        for name, code, *rest in response.topic_errors:
            if code and code != _ERR_TOPIC_EXISTS:
                message = rest[0] if rest and rest[0] else ""
                raise for_code(code)(f"create topic {name}: {message}")
        self._topics_ready.add(topic)

    async def delete_below(self, before: dict[Any, int], *, what: str) -> None:
        """DeleteRecords below the given offsets; a failure is logged, not raised."""
        try:
            async with self.op(f"delete records of {what}"):
                admin = await self.admin()
                await admin.delete_records({tp: RecordsToDelete(o) for tp, o in before.items()})
        except LedgerError as exc:
            log.warning("kafka ledger %s: DeleteRecords failed (the trim stands): %s", what, exc)

    async def open(self, name: str, *, writer: bool = True) -> Ledger:
        self._check_open()
        topic = self.topic(name)
        async with self.op(f"create the topics of ledger {name!r}"):
            await self._ensure_topics(topic)
        raw = KafkaRawLog(self, name, topic)
        try:
            ledger = await FramedLedger.open(name, raw, writer=writer)
        except BaseException:
            await raw.close()
            raise
        self._ledgers[raw] = ledger
        return ledger

    def raw_log(self, name: str) -> KafkaRawLog:
        """A raw log on ``name``'s topic without a ledger over it (tests, tools).

        Its topics must exist (:meth:`open` creates them); close it when done.
        """
        self._check_open()
        return KafkaRawLog(self, name, self.topic(name))

    def forget(self, raw: KafkaRawLog) -> None:
        """Called by a raw log that closed."""
        self._ledgers.pop(raw, None)

    async def delete(self, name: str) -> None:
        self._check_open()
        topic = self.topic(name)
        async with self.op(f"delete ledger {name!r}"):
            admin = await self.admin()
            response = await admin.delete_topics([topic, topic + TRIM_SUFFIX])
        self._topics_ready.discard(topic)
        for deleted, code, *_ in response.topic_error_codes:
            if code and code != _ERR_UNKNOWN_TOPIC:
                raise LedgerUnavailableError(f"kafka: delete topic {deleted}: {for_code(code)}")

    async def close(self) -> None:
        if self._closed:
            return
        for ledger in list(self._ledgers.values()):
            with contextlib.suppress(Exception):
                await ledger.close()
        self._ledgers.clear()
        self._closed = True
        producer, self._producer = self._producer, None
        admin, self._admin = self._admin, None
        # A producer flushes on stop; its batches expire after request_timeout_ms.
        if producer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.timeout_s + 5):
                    await producer.stop()
        if admin is not None:
            with contextlib.suppress(Exception):
                await admin.close()

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
``min(3, brokers)`` unless given) and deleted by :meth:`KafkaLedgerFactory.delete`.

Writing
-------
One ``AIOKafkaProducer`` per store (``acks=all``, ``linger_ms=0``,
``enable_idempotence`` as configured). :meth:`KafkaRawLog.append_batch` puts all
the frames of one group commit in one Kafka record batch (``create_batch`` /
``send_batch``; a batch over ~900 KiB is split; :mod:`.kafka_produce`), so they
get consecutive offsets and land atomically. Any Kafka error or a timeout is a retriable
:class:`~streamtx.errors.LedgerUnavailableError`; a timed-out batch may still
land later, which is safe because replay drops duplicates (:mod:`.fenced_ledger`).

Reading
-------
Each raw log has its own fetch connection (an ``AIOKafkaClient`` with no group,
no offsets committed; :mod:`.kafka_fetch`) and sends plain Fetch requests.
Fetches are explicit, rather than through ``AIOKafkaConsumer``'s background
prefetcher, so "a fetch returned nothing" is a fact and not a timed-out wait:
the tansu broker reports a partition's end (ListOffsets ``latest`` and, as was
seen, the high watermark) as the start of the last record batch (or one past
it), so a reader that stops at the reported end misses acknowledged entries.
:meth:`KafkaRawLog.read_raw` therefore trusts data only: it fetches until a
fetch returns nothing new, and a fetch that returns nothing below the largest
end ever seen is retried. :meth:`KafkaRawLog.end_offset` is ``max(reported end,
last offset seen + 1)`` after reading to the end. Frames read or appended are
kept in a small per-log cache (the log is immutable; :mod:`.framecache`), so a
writer reading its own tail does not fetch.

Trimming
--------
:meth:`KafkaRawLog.trim_raw` first appends ``(before, FenceState)`` to the
sidecar topic (acks=all; the record is in :mod:`.kafka_trim`), then, with
``delete_records`` on, asks the broker to DeleteRecords below ``before`` in the
ledger topic and below the new record in the sidecar (a failure there is logged:
the logical trim already stands). :meth:`KafkaRawLog.trim_state` reads the
sidecar's last record; reads never return offsets below that logical start even
when nothing was deleted physically (tansu closes the connection on
DeleteRecords, so tests run with ``delete_records=false``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    ProducerClosed,
    RecordListTooLargeError,
    RecordTooLargeError,
    for_code,
)

from streamtx.errors import LedgerClosedError, LedgerError, LedgerUnavailableError
from streamtx.ledger.base import Ledger, LedgerFactory, SegmentStats
from streamtx.ledger.fenced_ledger import FencedLedger
from streamtx.ledger.framecache import FrameCache
from streamtx.ledger.frames import FenceState
from streamtx.ledger.kafka_fetch import EARLIEST, FETCH_MAX_BYTES, LATEST, PartitionFetcher, fetch_bytes
from streamtx.ledger.kafka_naming import TOPIC_MAX, TRIM_SUFFIX, check_topic_prefix, topic_for
from streamtx.ledger.kafka_produce import (
    MAX_BATCH_BYTES,
    MAX_REQUEST_BYTES,
    build_batches,
    check_frame_sizes,
    send_batch,
)
from streamtx.ledger.kafka_trim import decode_trim, encode_trim
from streamtx.ledger.rawlog import RawLog

__all__ = ["TOPIC_MAX", "TRIM_SUFFIX", "KafkaLedgerFactory", "KafkaRawLog", "topic_for"]

log = logging.getLogger(__name__)

_EMPTY_RETRY_S = 0.005  # a fetch that returned nothing below a known end is retried

_ERR_TOPIC_EXISTS = 36
_ERR_UNKNOWN_TOPIC = 3


class KafkaRawLog(RawLog):
    """Partition 0 of one topic as a raw log; created by :class:`KafkaLedgerFactory`."""

    def __init__(self, factory: KafkaLedgerFactory, name: str, topic: str) -> None:
        self.name = name
        self.topic = topic
        self.trim_topic = topic + TRIM_SUFFIX
        self._factory = factory
        self._tp = TopicPartition(topic, 0)
        self._trim_tp = TopicPartition(self.trim_topic, 0)
        self._fetcher = PartitionFetcher(
            name=name,
            bootstrap=factory.bootstrap,
            client_id=f"streamtx-ledger-reader-{topic}"[:200],
            request_timeout_ms=factory.request_timeout_ms,
            fetch_wait_ms=factory.fetch_wait_ms,
        )
        self._start = 0
        self._state = FenceState()
        self._end_seen = 0  # one past the last offset seen in a fetch or an append
        self._reported_end = 0  # the broker's high watermark: may lag the real end
        self._cache = FrameCache()  # frames read or appended, so a writer's tail reads do not fetch
        self._closed = False

    # --- reading -----------------------------------------------------------------

    async def _read_through(
        self, tp: Any, start: int, max_bytes: int = FETCH_MAX_BYTES
    ) -> tuple[list[tuple[int, bytes]], int, bool]:
        """Frames at ``start`` onwards from one fetch, retrying an empty fetch below a known end.

        Returns the frames (none at the end), the next offset to read, and
        whether ``start`` was out of the partition's range.
        """
        known_end = start
        while True:
            fetched = await self._fetcher.fetch(tp, start, max_bytes)
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
        check_frame_sizes(self.name, frames)
        async with self._factory.op(f"append to {self.topic}"):
            producer = await self._factory.producer()
            batches = build_batches(producer, frames, self.name)
            futures = [await send_batch(producer, b, self._tp) for b, _ in batches]
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
        cached = self._cache.run(start, max_frames)
        if cached:
            return cached
        async with self._factory.op(f"read {self.topic}"):
            while True:
                frames, _, out_of_range = await self._read_through(
                    self._tp, start, fetch_bytes(self._cache.average_size(256.0), max_frames)
                )
                if frames:
                    self._remember(frames)
                    return frames[:max_frames]
                if not (out_of_range and await self._trimmed_by_others(start)):
                    return []
                start = max(start, self._start)

    async def _trimmed_by_others(self, start: int) -> bool:
        """After an out-of-range fetch: did another handle trim (and delete) below ``start``?"""
        earliest = await self._fetcher.list_offset(self._tp, EARLIEST)
        if start >= earliest:
            return False
        await self._load_trim()
        self._start = max(self._start, earliest)
        return True

    def start_offset(self) -> int:
        return self._start

    async def end_offset(self) -> int:
        self._check_open()
        async with self._factory.op(f"find the end of {self.topic}"):
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
        record = encode_trim(before, state)
        async with self._factory.op(f"persist the trim of {self.topic}"):
            producer = await self._factory.producer()
            builder = producer.create_batch()
            builder.append(timestamp=None, key=None, value=record)
            meta = await (await send_batch(producer, builder, self._trim_tp))
        self._start, self._state = before, FenceState.decode(state.encode())
        self._cache.drop_below(before)
        if self._factory.delete_records:
            await self._factory.delete_below(
                {self._tp: before, self._trim_tp: int(meta.offset)}, what=self.topic
            )

    async def trim_state(self) -> tuple[int, FenceState]:
        self._check_open()
        async with self._factory.op(f"read the trim state of {self.topic}"):
            await self._load_trim()
        return self._start, FenceState.decode(self._state.encode())

    async def _load_trim(self) -> None:
        """Read the sidecar's last record into ``_start`` and ``_state``."""
        tp = self._trim_tp
        earliest = await self._fetcher.list_offset(tp, EARLIEST)
        latest = await self._fetcher.list_offset(tp, LATEST)  # may be the start of the last batch
        last = await self._scan_last(tp, max(earliest, latest - 1))
        if last is None and latest - 1 > earliest:
            last = await self._scan_last(tp, earliest)
        if last is None:
            return
        start, state = decode_trim(last[1], f"{self.trim_topic}@{last[0]}")
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
        average = self._cache.average_size(0.0)
        return [SegmentStats(self._start, entries, round(entries * average))]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cache.clear()
        await self._fetcher.close()
        self._factory.forget(self)

    # --- bookkeeping -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError(f"kafka ledger {self.name} is closed")

    def _remember(self, frames: Sequence[tuple[int, bytes]]) -> None:
        """Note frames seen at their offsets: the end, the byte stats, the cache."""
        if not frames:
            return
        self._end_seen = max(self._end_seen, frames[-1][0] + 1)
        self._cache.remember(frames, self._start)


class KafkaLedgerFactory(LedgerFactory):
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
        check_topic_prefix(topic_prefix)
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
                    max_batch_size=MAX_BATCH_BYTES,
                    max_request_size=MAX_REQUEST_BYTES,
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
            ledger = await FencedLedger.open(name, raw, writer=writer)
        except BaseException:
            await raw.close()
            raise
        self._ledgers[raw] = ledger
        return ledger

    async def exists(self, name: str) -> bool:
        self._check_open()
        topic = self.topic(name)
        if topic in self._topics_ready:
            return True
        async with self.op(f"look up ledger {name!r}"):
            admin = await self.admin()
            topics = await admin.list_topics()
        return topic in topics

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

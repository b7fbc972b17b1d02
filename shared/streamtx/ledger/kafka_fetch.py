"""Explicit Fetch and ListOffsets requests for the Kafka backend's reads.

A :class:`PartitionFetcher` is one raw log's fetch connection: an
``AIOKafkaClient`` with no group and no offsets committed, sending plain Fetch
and ListOffsets requests to a partition's leader. Fetches are explicit, rather
than through ``AIOKafkaConsumer``'s background prefetcher, so "a fetch returned
nothing" is a fact and not a timed-out wait (why that matters on tansu is in
:mod:`.kafka`'s docstring). Errors are aiokafka's; the caller maps them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, LeaderNotAvailableError, for_code
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.memory_records import MemoryRecords

from streamtx.errors import LedgerClosedError

FETCH_MAX_BYTES = 1024 * 1024
_FETCH_MIN_BYTES = 64 * 1024


def fetch_bytes(average_frame_bytes: float, max_frames: int) -> int:
    """Fetch about twice what ``max_frames`` frames take, so the rest fits the frame cache."""
    want = int(max_frames * (average_frame_bytes + 32) * 2)
    return max(_FETCH_MIN_BYTES, min(FETCH_MAX_BYTES, want))
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
_METADATA_RETRIES = 3
_ERR_OFFSET_OUT_OF_RANGE = 1


@dataclass(slots=True)
class Fetched:
    """One partition's part of a Fetch response."""

    frames: list[tuple[int, bytes]] = field(default_factory=list)
    next_offset: int = -1  # one past the last record batch returned
    high_watermark: int = -1
    log_start: int = -1
    out_of_range: bool = False


def parse_fetch(response: Any, tp: Any) -> Fetched:
    """``tp``'s records (control batches skipped) in a Fetch response; raises its error."""
    out = Fetched()
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


class PartitionFetcher:
    """One fetch connection, opened on first use; ``name`` is the ledger's, for errors."""

    def __init__(
        self,
        *,
        name: str,
        bootstrap: str,
        client_id: str,
        request_timeout_ms: int,
        fetch_wait_ms: int,
    ) -> None:
        self.name = name
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._fetch_wait_ms = fetch_wait_ms
        self._client: Any = None
        self._client_lock = asyncio.Lock()
        self._closed = False

    async def _fetch_client(self) -> Any:
        if self._closed:
            raise LedgerClosedError(f"kafka ledger {self.name} is closed")
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._client is None:
                client = AIOKafkaClient(
                    bootstrap_servers=self._bootstrap,
                    client_id=self._client_id,
                    request_timeout_ms=self._request_timeout_ms,
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

    async def fetch(self, tp: Any, offset: int, max_bytes: int = FETCH_MAX_BYTES) -> Fetched:
        """One Fetch request at ``offset``: frames at offsets >= ``offset`` (possibly none)."""
        request = FetchRequest(
            self._fetch_wait_ms, 1, max_bytes, 0, [(tp.topic, [(tp.partition, offset, max_bytes)])]
        )
        for attempt in range(_METADATA_RETRIES):
            response = await self._request(tp, request)
            try:
                fetched = parse_fetch(response, tp)
            except KafkaError as exc:
                if not (exc.retriable or exc.invalid_metadata) or attempt == _METADATA_RETRIES - 1:
                    raise
                await (await self._fetch_client()).force_metadata_update()
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            fetched.frames = [f for f in fetched.frames if f[0] >= offset]
            return fetched
        raise AssertionError("unreachable")

    async def list_offset(self, tp: Any, which: int) -> int:
        """ListOffsets ``EARLIEST`` or ``LATEST`` (which may lag the real end on tansu)."""
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

    async def close(self) -> None:
        """Close the connection; later requests raise LedgerClosedError."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

"""A retried append whose first try landed must not fence its own writer (issue 9, item 1).

A backend may report a failure for frames it did store: Kafka times out after
the broker appended, an fsync fails after the write reached the disk. The
fenced ledger retries with the same sequence numbers; the retry's copy is a
duplicate, and the append must succeed with the position of the first copy.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from streamtx.errors import LedgerUnavailableError
from streamtx.ledger import Position
from streamtx.ledger.base import SegmentStats
from streamtx.ledger.fenced_ledger import FencedLedger
from streamtx.ledger.file import FileRawLog
from streamtx.ledger.frames import FenceState
from streamtx.ledger.kafka import KafkaLedgerFactory
from streamtx.ledger.memory import MemoryRawLog, _Frames
from streamtx.ledger.rawlog import RawLog
from tests.conftest import kafka_url


class LandThenFail(RawLog):
    """A raw log whose next ``fail`` appends store their frames and then report a failure."""

    def __init__(self, inner: RawLog) -> None:
        self.inner = inner
        self.fail = 0

    async def append_batch(self, frames: Sequence[bytes]) -> list[int]:
        offsets = await self.inner.append_batch(frames)
        if self.fail:
            self.fail -= 1
            raise LedgerUnavailableError("the acknowledgement was lost (injected)")
        return offsets

    async def read_raw(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        return await self.inner.read_raw(start, max_frames)

    def start_offset(self) -> int:
        return self.inner.start_offset()

    async def end_offset(self) -> int:
        return await self.inner.end_offset()

    async def trim_raw(self, before: int, state: FenceState) -> None:
        await self.inner.trim_raw(before, state)

    async def trim_state(self) -> tuple[int, FenceState]:
        return await self.inner.trim_state()

    def stats(self) -> Sequence[SegmentStats]:
        return self.inner.stats()

    async def close(self) -> None:
        await self.inner.close()


NewRaw = Callable[[], Awaitable[RawLog]]


@pytest.fixture(params=["memory", "file", "kafka"])
async def new_raw(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NewRaw]:
    """A factory of raw logs that all address one fresh ledger of the backend."""
    opened: list[RawLog] = []
    kafka: KafkaLedgerFactory | None = None
    if request.param == "memory":
        frames = _Frames()

        async def make() -> RawLog:
            return MemoryRawLog(frames)
    elif request.param == "file":
        async def make() -> RawLog:
            return await FileRawLog.open(str(tmp_path / "retried"))
    else:
        url = kafka_url(request.getfixturevalue("kafka_bootstrap"))
        bootstrap, _, query = url.removeprefix("kafka://").partition("?")
        prefix = dict(kv.split("=") for kv in query.split("&"))["topic_prefix"]
        kafka = KafkaLedgerFactory(bootstrap, idempotence=False, delete_records=False, topic_prefix=prefix)
        name = f"retried-{uuid.uuid4().hex[:6]}"
        await (await kafka.open(name, writer=False)).close()  # creates the topics

        async def make() -> RawLog:
            assert kafka is not None
            return kafka.raw_log(name)

    async def tracked() -> RawLog:
        raw = await make()
        opened.append(raw)
        return raw

    yield tracked
    for raw in opened:
        await raw.close()
    if kafka is not None:
        await kafka.close()


async def test_a_retry_that_finds_its_first_try_landed_succeeds(new_raw: NewRaw) -> None:
    raw = LandThenFail(await new_raw())
    ledger = await FencedLedger.open("retried", raw, writer=True)
    first = await ledger.append(b"a")

    raw.fail = 1  # the next append lands, but its backend call fails; the retry lands a copy
    second = await ledger.append(b"b")
    assert second > first

    raw.fail = 2  # twice: three copies of each frame of a concurrent batch
    batch = await asyncio.gather(*(ledger.append(b"c%d" % i) for i in range(5)))
    later = await ledger.append(b"d")  # the writer is not fenced: appends go on

    assert not ledger.fenced
    positions = [first, second, *batch, later]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert ledger.last_position() == later
    payloads = [b"a", b"b", *(b"c%d" % i for i in range(5)), b"d"]
    expected = list(zip(positions, payloads, strict=True))
    assert [(e.position, e.data) for e in await ledger.read()] == expected

    reader = await FencedLedger.open("retried", await new_raw(), writer=False)
    assert [(e.position, e.data) for e in await reader.read()] == expected
    assert reader.next_entry_id(second.entry_id) == batch[0].entry_id
    await reader.close()
    await ledger.close()


async def test_reopening_after_landed_retries_keeps_one_copy(new_raw: NewRaw) -> None:
    raw = LandThenFail(await new_raw())
    ledger = await FencedLedger.open("retried", raw, writer=True)
    raw.fail = 1
    kept = await ledger.append(b"once")
    await ledger.close()
    again = await FencedLedger.open("retried", await new_raw(), writer=True)
    after = await again.append(b"after")
    assert [(e.position, e.data) for e in await again.read()] == [(kept, b"once"), (after, b"after")]
    assert isinstance(after, Position)
    await again.close()

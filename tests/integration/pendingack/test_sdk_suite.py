"""The SDK against the whole suite (coordinator, broker, pending-ack store) as real processes.

A consume-transform-produce loop in ``async with client.transaction()``:
commit makes the output visible and the input acked; an exception aborts,
hiding the output and making the input deliverable again; two zombie
consumers cannot both commit the same input (the optimistic check).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamtx.client import Consumer, Message, StreamtxClient
from streamtx.errors import ConflictError
from tests.support.services import ServiceProcess

IN, OUT = "persistent://t/n/in", "persistent://t/n/out"


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[dict[str, ServiceProcess]]:
    common = {"STREAMTX_LEDGER_URL": f"file://{tmp_path / 'ledgers'}", "STREAMTX_TEST_LOG_DIR": str(tmp_path)}
    procs = {name: ServiceProcess(name, dict(common)) for name in ("broker", "pendingack", "coordinator")}
    urls = {f"STREAMTX_{name.upper()}_URL": p.url for name, p in procs.items()}
    for p in procs.values():
        p.env.update(urls)
    procs["broker"].env["STREAMTX_ACK_TIMEOUT_MS"] = "60000"
    started: list[ServiceProcess] = []
    try:
        for p in procs.values():  # participants before the coordinator
            started.append(p.start())
        yield procs
    finally:
        for p in reversed(started):
            p.stop()


async def receive(consumer: Consumer, n: int, timeout_s: float = 10.0) -> list[Message]:
    out: list[Message] = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(out) < n and asyncio.get_running_loop().time() < deadline:
        out += await consumer.receive(max=n - len(out), wait_ms=300)
    return out


async def test_consume_transform_produce(suite: dict[str, ServiceProcess]) -> None:
    async with StreamtxClient(suite["coordinator"].url) as client:
        assert set(client.services) >= {"coordinator", "broker", "pendingack"}
        await client.create_topic(IN, 2)
        await client.create_topic(OUT, 3)
        source = await client.producer(IN, name="source")
        for i in range(6):
            await source.send(f"v{i}".encode(), key=f"k{i}")
        consumer = await client.consumer(IN, "work", "earliest", "Shared", name="w1")
        reader = await client.consumer(OUT, "read", "earliest", "Shared", name="r1")
        sink = await client.producer(OUT, name="sink")

        batch = await receive(consumer, 6)
        assert len(batch) == 6
        batch.sort(key=lambda m: m.value)  # two partitions interleave
        first, second = batch[:3], batch[3:]

        # Committed: output visible, input acked.
        async with client.transaction(timeout_ms=30_000) as txn:
            for m in first:
                await sink.send(m.value.upper(), key=m.key, txn=txn)
            await consumer.ack(first, txn=txn)
            assert await reader.receive(max=10, wait_ms=200) == []  # not before the commit
        meta = await client.transaction_metadata(txn.txn_id)
        assert meta["state"] == "COMMITTED"
        assert len(meta["partitions"]) >= 1 and len(meta["subscriptions"]) == 1
        got = await receive(reader, 3)
        assert sorted(m.value for m in got) == [b"V0", b"V1", b"V2"]

        # Aborted by an exception: output hidden, input deliverable again.
        with pytest.raises(RuntimeError):
            async with client.transaction(timeout_ms=30_000) as txn:
                for m in second:
                    await sink.send(m.value.upper(), key=m.key, txn=txn)
                await consumer.ack(second, txn=txn)
                raise RuntimeError("transform failed")
        assert (await client.transaction_metadata(txn.txn_id))["state"] == "ABORTED"
        await consumer.nack(second)
        again = await receive(consumer, 3)
        assert sorted(m.value for m in again) == [b"v3", b"v4", b"v5"]
        assert await reader.receive(max=10, wait_ms=300) == []


async def test_zombie_consumers_cannot_both_commit(suite: dict[str, ServiceProcess]) -> None:
    async with StreamtxClient(suite["broker"].url) as client:
        await client.create_topic(IN, 1)
        source = await client.producer(IN)
        for i in range(3):
            await source.send(f"v{i}".encode())
        consumer = await client.consumer(IN, "work", "earliest", "Shared", name="zombie-a")
        msgs = await receive(consumer, 3)
        assert len(msgs) == 3

        a = await client.new_transaction(timeout_ms=30_000)
        b = await client.new_transaction(timeout_ms=30_000)
        await consumer.ack([msgs[1]], txn=a)  # A consumed m1
        with pytest.raises(ConflictError):
            await consumer.ack([msgs[1]], txn=b)  # B may not hold it too
        await consumer.ack([msgs[2]], txn=b, cumulative=True)  # B claims everything up to m2
        await a.commit()
        with pytest.raises(ConflictError):
            await b.commit()  # the optimistic check: m1 was committed by A
        assert (await client.transaction_metadata(b.txn_id))["state"] in ("ABORTED", "ABORTING")

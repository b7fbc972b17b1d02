"""The pending-ack store with the real broker: held messages, commit deletes, abort redelivers.

The test plays the coordinator (it calls prepare and end itself) and drives
the broker through the SDK and its REST API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamtx.client import StreamtxClient
from tests.support.services import ServiceProcess
from tests.support.suite import Suite

TOPIC = "persistent://t/n/pa"


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    with Suite(f"file://{tmp_path / 'ledgers'}", tmp_path, services=("broker", "pendingack"),
               env={"STREAMTX_ACK_TIMEOUT_MS": "60000"}) as suite:
        yield suite.broker, suite.pendingack


async def end(pendingack: ServiceProcess, what: str, txn: str, sub: str, **extra: str) -> httpx.Response:
    body = {"txn_id": txn, "topic": TOPIC, "subscription": sub, **extra}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{pendingack.url}/v1/txn/subscriptions/{what}", json=body)


async def test_txn_acks_through_the_broker(suite: tuple[ServiceProcess, ServiceProcess]) -> None:
    broker, pendingack = suite
    async with StreamtxClient(broker.url) as client:
        assert client.services["pendingack"] == pendingack.url
        await client.create_topic(TOPIC, 1)
        consumer = await client.consumer(TOPIC, "s", "earliest", "Shared", name="c1")
        other = await client.consumer(TOPIC, "s", name="c2")
        producer = await client.producer(TOPIC, name="p")
        for i in range(4):
            await producer.send(f"m{i}".encode())
        got = await consumer.receive(max=10, wait_ms=2000)
        assert [m.value for m in got] == [b"m0", b"m1", b"m2", b"m3"]
        ids = [m.message_id for m in got]

        acks = f"{broker.url}/v1/topics/t/n/pa/subscriptions/s/acks"
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(acks, json={"message_ids": ids[:2], "txn_id": "0:1"})
            assert r.status_code == 200, r.text
            r = await http.post(acks, json={"message_ids": ids[2:], "txn_id": "0:2"})
            assert r.status_code == 200, r.text
            r = await http.post(acks, json={"message_ids": ids[:1], "txn_id": "0:3"})
            assert r.status_code == 409, r.text  # held by 0:1
            r = await http.get(f"{pendingack.url}/v1/pendingack/held",
                               params={"topic": TOPIC, "subscription": "s"})
            held = r.json()["message_ids"]
        assert sorted(held) == sorted(ids)

        assert (await end(pendingack, "prepare", "0:1", "s")).status_code == 200
        assert (await end(pendingack, "end", "0:1", "s", action="commit")).status_code == 200
        assert (await end(pendingack, "end", "0:2", "s", action="abort")).status_code == 200

        # Aborted acks are deliverable again; committed ones never come back.
        await consumer.nack(got[2:])
        again: list[str] = []
        for _ in range(20):
            again += [m.message_id for m in await other.receive(max=10, wait_ms=300)]
            if len(again) >= 2:
                break
            await asyncio.sleep(0.1)
        assert sorted(again) == sorted(ids[2:])
        stats = await client.endpoint("pendingack").call(
            "GET", "/admin/v3/transactions/pendingAckStats/t/n/pa/s")
        assert stats["ongoingTxnSize"] == 0

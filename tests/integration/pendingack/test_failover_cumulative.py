"""A Failover subscription over the real broker and pending-ack store: a consumer stops and
the other takes over its partition with nothing lost; transactional cumulative acks, one
position per partition, one transaction committed and one aborted.

The test plays the coordinator (it calls prepare and end on the pending-ack store).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamtx.client import StreamtxClient
from streamtx.client.consumer import Consumer, Message
from tests.support.services import ServiceProcess
from tests.support.suite import Suite

TOPIC = "persistent://t/n/fo"
SUBS = "/v1/topics/t/n/fo/subscriptions"


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    with Suite(f"file://{tmp_path / 'ledgers'}", tmp_path, services=("broker", "pendingack"),
               broker_env={"STREAMTX_FAILOVER_IDLE_MS": "500"}) as suite:
        yield suite.broker, suite.pendingack


async def end(pendingack: ServiceProcess, txn: str, commit: bool) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        body = {"txn_id": txn, "topic": TOPIC, "subscription": "fo"}
        if commit:
            r = await http.post(f"{pendingack.url}/v1/txn/subscriptions/prepare", json=body)
            assert r.status_code == 200, r.text
        r = await http.post(f"{pendingack.url}/v1/txn/subscriptions/end",
                            json={**body, "action": "commit" if commit else "abort"})
        assert r.status_code == 200, r.text


async def txn_ack(broker: ServiceProcess, ids: list[str], txn: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{broker.url}/v1/topics/t/n/fo/subscriptions/fo/acks",
                               json={"message_ids": ids, "txn_id": txn, "cumulative": True})


async def receive(consumer: Consumer, want: int) -> list[Message]:
    got: list[Message] = []
    while len(got) < want:
        more = await consumer.receive(max=100, wait_ms=5000)
        assert more, f"{consumer.name} received {len(got)} of {want}"
        got += more
    return got


def by_partition(msgs: list[Message], p: int) -> list[bytes]:
    return [m.value for m in msgs if m.partition == p]


async def test_failover_takeover_and_cumulative_txn_acks(
    suite: tuple[ServiceProcess, ServiceProcess],
) -> None:
    broker, pendingack = suite
    sent = {p: [f"p{p}-{i}".encode() for i in range(5)] for p in (0, 1)}
    async with StreamtxClient(broker.url) as client:
        await client.create_topic(TOPIC, 2)
        a = await client.consumer(TOPIC, "fo", "earliest", "Failover", name="a")
        b = await client.consumer(TOPIC, "fo", "earliest", "Failover", name="b")
        producer = await client.producer(TOPIC)
        for p, values in sent.items():
            for v in values:
                await producer.send(v, partition=p)

        got_a = await receive(a, 10)  # alone: a is active on both partitions
        assert by_partition(got_a, 0) == sent[0] and by_partition(got_a, 1) == sent[1]
        got_b = await receive(b, 5)  # b joins and takes partition 1, with a's unacked ones, in order
        assert by_partition(got_b, 1) == sent[1] and by_partition(got_b, 0) == []

        # One cumulative position per partition per transaction: a commits through p0's third
        # message, b's transaction through p1's last aborts.
        p0 = [m.message_id for m in got_a if m.partition == 0]
        p1 = [m.message_id for m in got_b]
        assert (await txn_ack(broker, [p0[2]], "0:1")).status_code == 200
        assert (await txn_ack(broker, [p1[4]], "0:2")).status_code == 200
        r = await txn_ack(broker, [p1[3]], "0:3")
        assert r.status_code == 409, r.text  # 0:2 holds partition 1's cumulative ack
        await end(pendingack, "0:1", commit=True)
        await end(pendingack, "0:2", commit=False)

        # a stops fetching: after the idle time b is active on partition 0 too, and gets what
        # a had not acked there, in order; the aborted range of partition 1 comes back too.
        got = await receive(b, 7)
        assert by_partition(got, 0) == sent[0][3:]
        assert by_partition(got, 1) == sent[1]
        assert (await txn_ack(broker, [p0[1]], "0:4")).status_code == 409  # below the mark-delete

        # One request, one position on each partition, committed: the backlog is empty.
        last = [[m.message_id for m in got if m.partition == p][-1] for p in (0, 1)]
        assert (await txn_ack(broker, last, "0:5")).status_code == 200
        await end(pendingack, "0:5", commit=True)
        stats = await client.endpoint("broker").call("GET", "/v1/topics/t/n/fo/subscriptions/fo/stats")
        assert stats["type"] == "Failover" and stats["msgBacklog"] == 0
        assert stats["activeConsumers"] == {"0": "b", "1": "b"}
        # While b's long poll waits it is live, active on both partitions.
        poll = asyncio.create_task(b.receive(max=100, wait_ms=3000))
        for _ in range(50):
            mine = await client.endpoint("broker").call("GET", f"{SUBS}/fo/consumers/b")
            if mine["partitions"] == [0, 1]:
                break
            await asyncio.sleep(0.05)
        assert mine["partitions"] == [0, 1]
        assert await poll == []
        assert await b.receive(max=100, wait_ms=300) == []
        pa = await client.endpoint("pendingack").call(
            "GET", "/admin/v3/transactions/pendingAckStats/t/n/fo/fo")
        assert len(pa["committedCumulative"]) == 2 and pa["ongoingTxnSize"] == 0
        await b.close()

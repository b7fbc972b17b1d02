"""Against a real broker and store: acks under a topic's name and under its partition's meet one
exactly-once check (issue 32 defect 1), and a deleted subscription takes its pending-ack state
with it (defect 10). The test plays the coordinator (prepare and end)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamtx.client import StreamtxClient
from tests.support.services import ServiceProcess
from tests.support.suite import Suite

TOPIC = "persistent://t/n/c"
SUBS = "/v1/topics/t/n/{topic}/subscriptions/s"


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    with Suite(f"file://{tmp_path / 'ledgers'}", tmp_path, services=("broker", "pendingack"),
               env={"STREAMTX_ACK_TIMEOUT_MS": "60000"}) as suite:
        yield suite.broker, suite.pendingack


async def _ids(client: StreamtxClient, count: int) -> list[str]:
    consumer = await client.consumer(TOPIC, "s", "earliest", "Shared", name="c1")
    producer = await client.producer(TOPIC, name="p")
    for i in range(count):
        await producer.send(f"m{i}".encode())
    got: list[str] = []
    while len(got) < count:
        got += [m.message_id for m in await consumer.receive(max=count, wait_ms=2000)]
    return got


async def _end(http: httpx.AsyncClient, pendingack: ServiceProcess, txn: str, name: str, action: str) -> None:
    body = {"txn_id": txn, "topic": name, "subscription": "s"}
    r = await http.post(f"{pendingack.url}/v1/txn/subscriptions/prepare", json=body)
    assert r.status_code == 200, r.text
    r = await http.post(f"{pendingack.url}/v1/txn/subscriptions/end", json={**body, "action": action})
    assert r.status_code == 200, r.text


Services = tuple[ServiceProcess, ServiceProcess]


def _http(broker: ServiceProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=broker.url, timeout=30)


async def test_cumulative_acks_under_both_names_conflict(suite: Services) -> None:
    broker, _ = suite
    async with StreamtxClient(broker.url) as client, _http(broker) as http:
        await client.create_topic(TOPIC, 1)
        ids = await _ids(client, 11)
        r = await http.post(SUBS.format(topic="c") + "/acks",
                            json={"message_ids": [ids[5]], "txn_id": "0:1", "cumulative": True})
        assert r.status_code == 200, r.text
        r = await http.post(SUBS.format(topic="c-partition-0") + "/acks",
                            json={"message_ids": [ids[10]], "txn_id": "0:2", "cumulative": True})
        assert r.status_code == 409, r.text  # was 200, and both committed the same messages


async def test_a_subscription_created_again_starts_afresh(suite: Services) -> None:
    broker, pendingack = suite
    async with StreamtxClient(broker.url) as client, _http(broker) as http:
        await client.create_topic(TOPIC, 1)
        ids = await _ids(client, 3)
        sub = SUBS.format(topic="c")
        r = await http.post(sub + "/acks", json={"message_ids": [ids[1]], "txn_id": "0:1",
                                                 "cumulative": True})
        assert r.status_code == 200, r.text
        r = await http.delete(sub, params={"force": "true"})
        assert r.status_code == 409, r.text  # 0:1 holds acks on it
        await _end(http, pendingack, "0:1", TOPIC, "commit")
        r = await http.delete(sub, params={"force": "true"})
        assert r.status_code == 200, r.text
        r = await http.get(f"{pendingack.url}/admin/v3/transactions/pendingAckStats/t/n/c/s")
        assert r.status_code == 404, r.text  # nothing left of it in the store
        # The same name again, from the earliest message: its commits are not the old one's.
        r = await http.put(sub, json={"initial_position": "earliest"})
        assert r.status_code == 200, r.text
        got: list[str] = []
        consumer = await client.consumer(TOPIC, "s", "earliest", "Shared", name="c2")
        while len(got) < 3:
            got += [m.message_id for m in await consumer.receive(max=3, wait_ms=2000)]
        r = await http.post(sub + "/acks", json={"message_ids": [got[1]], "txn_id": "0:2",
                                                 "cumulative": True})
        assert r.status_code == 200, r.text  # was 409 "already acked", for good

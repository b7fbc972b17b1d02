"""Promises of the README and docs/internal-api.md, on the real services with bearer tokens set and
the fast lane off (``STREAMTX_FAST_LANE=false``: every hot route served by FastAPI itself)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from streamtx.client import StreamtxClient
from streamtx.client.names import path_of
from streamtx.errors import ConflictError
from streamtx.wire import batch as wire
from tests.support.suite import Suite, receive

ADMIN, CLIENT = "admin-secret", "client-secret"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("promises")
    env = {"STREAMTX_ADMIN_TOKEN": ADMIN, "STREAMTX_CLIENT_TOKEN": CLIENT, "STREAMTX_FAST_LANE": "false"}
    with Suite(f"file://{tmp / 'ledgers'}", tmp, env=env) as running:
        yield running


def topic(stem: str) -> str:
    return f"persistent://t/n/{stem}-{uuid.uuid4().hex[:8]}"


class LoseFirstProduceAnswer(httpx.AsyncBaseTransport):
    """Real HTTP; the first produce reaches the broker but its answer is lost (a 503 instead)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[bytes] = []
        self.lost: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path.endswith("/messages"):
            self.sent.append(request.content)
            if not self.lost:
                self.lost.append(await response.aread())
                await response.aclose()
                return httpx.Response(503, json={"error": "unavailable", "message": "answer lost"})
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_every_service_serves_healthz_and_docs_without_a_token(suite: Suite) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for name, proc in suite.procs.items():
            assert (await http.get(f"{proc.url}/healthz")).json() == {"status": "ok"}, name
            docs = await http.get(f"{proc.url}/docs")
            assert docs.status_code == 200 and "swagger" in docs.text.lower(), name
            paths = (await http.get(f"{proc.url}/openapi.json")).json()["paths"]
            assert paths and all(p.startswith("/") for p in paths), name
            # The lane is off: even a hot route is FastAPI's, and it still wants a token.
            hot = {"broker": "/v1/topics/t/n/x/messages", "coordinator": "/v1/transactions",
                   "pendingack": "/v1/txn/subscriptions/prepare"}[name]
            assert (await http.post(f"{proc.url}{hot}", json={})).status_code == 401, name


async def test_a_transaction_with_tokens_and_the_lane_off(suite: Suite) -> None:
    src, out = topic("in"), topic("out")
    async with StreamtxClient(suite.url, token=ADMIN) as admin:
        await admin.create_topic(src, 1)
        await admin.create_topic(out, 2)
    async with StreamtxClient(suite.url, token=CLIENT) as client:
        feeder = await client.producer(src, name="feeder")
        for word in ("alpha", "beta"):
            await feeder.send(word.encode(), key=word)
        consumer = await client.consumer(src, "job", "earliest")
        producer = await client.producer(out, name="job")
        reader = await client.consumer(out, "reader", "earliest")
        async with client.transaction(timeout_ms=30_000) as txn:
            for m in await receive(consumer, 2):
                await producer.send(m.value.upper(), key=m.key, txn=txn)
                await consumer.ack([m], txn=txn)
            assert await reader.receive(max=10, wait_ms=200) == []  # not before the commit
        assert sorted(m.value for m in await receive(reader, 2)) == [b"ALPHA", b"BETA"]
        assert await consumer.receive(max=10, wait_ms=200) == []  # the acks committed too


async def test_a_named_producer_retry_is_deduplicated_by_the_broker(suite: Suite) -> None:
    name = topic("dedup")
    transport = LoseFirstProduceAnswer()
    async with StreamtxClient(suite.url, token=ADMIN, transport=transport) as client:
        await client.create_topic(name, 1)
        producer = await client.producer(name, name="retrier")
        first_id = await producer.send(b"once")  # stored, answer lost, sent again
        assert len(transport.sent) == 2 and transport.sent[0] == transport.sent[1]
        assert wire.decode_produced(transport.lost[0]) == [first_id]  # the first copy's id (SDK: binary)
        await producer.send(b"twice")
        reader = await client.consumer(name, "all", "earliest")
        assert [m.value for m in await receive(reader, 3, timeout_s=3)] == [b"once", b"twice"]


async def test_prepare_repeats_and_an_aborted_prepare_releases_its_reservation(suite: Suite) -> None:
    name = topic("prep")
    async with StreamtxClient(suite.url, token=ADMIN) as client:
        await client.create_topic(name, 1)
        feeder = await client.producer(name)
        for i in range(3):
            await feeder.send(f"m{i}".encode())
        consumer = await client.consumer(name, "s", "earliest", "Exclusive", name="only")
        _, m1, m2 = await receive(consumer, 3)
        a = await client.new_transaction(timeout_ms=60_000)
        await consumer.ack([m1], txn=a)
        pendingack = client.endpoint("pendingack")
        body = {"txn_id": a.txn_id, "topic": name, "subscription": "s"}
        for _ in range(2):  # preparing is repeatable
            await pendingack.call("POST", "/v1/txn/subscriptions/prepare", json=body)
        b = await client.new_transaction(timeout_ms=60_000)
        await consumer.ack([m2], cumulative=True, txn=b)  # consumes m0..m2, m1 among them
        with pytest.raises(ConflictError):  # m1 is reserved by the prepared A
            await pendingack.call("POST", "/v1/txn/subscriptions/prepare",
                                  json={**body, "txn_id": b.txn_id})
        await a.abort()  # a prepared transaction may still be aborted: m1 is released
        await b.commit()
        assert (await client.transaction_metadata(b.txn_id))["state"] == "COMMITTED"
        stats = await client.broker.call("GET", f"/v1/topics/{path_of(name)}/subscriptions/s/stats")
        assert stats["msgBacklog"] == 0, stats

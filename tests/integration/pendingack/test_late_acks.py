"""Acks that arrive after their transaction ended must not hold messages forever.

The real coordinator, broker and pending-ack store. The client begins a
transaction, registers the subscription, ends it, and only then acks a
message with it through the broker. The ack is refused (409; 404 for a
transaction the coordinator never knew), also after a store restart lost
the store's memory of the end: the broker and the store ask the coordinator
before they hold an ack (issue 21 item 2; before, the store held it until its
stuck-transaction checker ended it). The message stays deliverable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamtx.client import Consumer, Message, StreamtxClient
from streamtx.errors import NotFoundError
from tests.support.suite import Suite, receive

TOPIC = "persistent://t/n/late"
ACKS = "/v1/topics/t/n/late/subscriptions/s/acks"


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[Suite]:
    with Suite(
        f"file://{tmp_path / 'ledgers'}", tmp_path,
        broker_env={"STREAMTX_ACK_TIMEOUT_MS": "60000"},
        pendingack_env={"STREAMTX_BROKER_END_TIMEOUT_S": "3", "STREAMTX_STUCK_TXN_AFTER_S": "1",
                        "STREAMTX_STUCK_TXN_INTERVAL_S": "0.2"},
        coordinator_env={"STREAMTX_FANOUT_MAX_BACKOFF_MS": "300"},
    ) as running:
        yield running


async def setup(client: StreamtxClient) -> tuple[Consumer, Consumer, Message]:
    """A topic with one message, received (not acked) by consumer c1; c2 waits on the same Shared sub."""
    await client.create_topic(TOPIC, 1)
    c1 = await client.consumer(TOPIC, "s", "earliest", "Shared", name="c1")
    c2 = await client.consumer(TOPIC, "s", name="c2")
    producer = await client.producer(TOPIC, name="p")
    await producer.send(b"m0")
    got = await receive(c1, 1)
    assert [m.value for m in got] == [b"m0"]
    return c1, c2, got[0]


async def late_ack(suite: Suite, txn_id: str, message: Message) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{suite.broker.url}{ACKS}",
                               json={"message_ids": [message.message_id], "txn_id": txn_id})


async def ongoing(client: StreamtxClient) -> int:
    """Transactions holding acks at the store (0 where none was ever logged)."""
    try:
        stats = await client.endpoint("pendingack").call(
            "GET", "/admin/v3/transactions/pendingAckStats/t/n/late/s")
    except NotFoundError:
        return 0
    return int(stats["ongoingTxnSize"])


async def redelivered(c1: Consumer, c2: Consumer, message: Message) -> bool:
    """The message comes back to another consumer once c1 gives it up."""
    await c1.nack([message])
    return [m.message_id for m in await receive(c2, 1, timeout_s=5)] == [message.message_id]


async def test_ack_after_abort_is_refused_and_the_message_stays_deliverable(suite: Suite) -> None:
    async with StreamtxClient(suite.url) as client:
        c1, c2, message = await setup(client)
        txn = await client.new_transaction()
        await txn.add_subscription(TOPIC, "s")
        await txn.abort()  # the store hears the end before any ack of the transaction

        r = await late_ack(suite, txn.txn_id, message)
        assert r.status_code == 409, r.text
        assert await ongoing(client) == 0
        assert await redelivered(c1, c2, message)


@pytest.mark.parametrize("end", ["abort", "commit"])
async def test_ack_after_the_end_and_a_store_restart_is_refused(suite: Suite, end: str) -> None:
    async with StreamtxClient(suite.url) as client:
        c1, c2, message = await setup(client)
        txn = await client.new_transaction()
        await txn.add_subscription(TOPIC, "s")
        await (txn.abort() if end == "abort" else txn.commit())
        suite.pendingack.restart()  # the remembered end is lost; the coordinator still knows

        r = await late_ack(suite, txn.txn_id, message)
        assert r.status_code == 409 and "not OPEN" in r.json()["message"], r.text
        # The store asks as well: a broker's late ack forwarded to it is refused there too.
        direct = {"topic": TOPIC, "subscription": "s", "txn_id": txn.txn_id,
                  "message_ids": [message.message_id]}
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(f"{suite.pendingack.url}/v1/pendingack/acks", json=direct)
        assert r.status_code == 409, r.text
        assert await ongoing(client) == 0
        assert await redelivered(c1, c2, message)
        # A new transaction may take the message.
        other = await client.new_transaction()
        await c2.ack([message], txn=other)
        await other.commit()


async def test_ack_of_a_txn_the_coordinator_never_knew_is_refused(suite: Suite) -> None:
    async with StreamtxClient(suite.url) as client:
        c1, c2, message = await setup(client)
        r = await late_ack(suite, "0:987654", message)
        assert r.status_code == 404 and r.json()["error"] == "not_found", r.text
        assert await ongoing(client) == 0
        assert await redelivered(c1, c2, message)

"""The SDK against a fake cluster (httpx.MockTransport)."""

from __future__ import annotations

import pytest

from streamtx.client import AuthError, OutMessage, StreamtxClient
from streamtx.client.names import key_partition
from streamtx.errors import ConflictError, MalformedError, NotFoundError, UnavailableError
from tests.unit.client.fake_cluster import BROKER, COORDINATOR, FakeCluster

TOPIC = "persistent://t/n/x"


async def connect(cluster: FakeCluster) -> StreamtxClient:
    client = StreamtxClient("http://any:9", transport=cluster.transport, binary=False)  # the fake speaks JSON
    await client.connect()
    return client


async def test_discovers_services_through_cluster() -> None:
    cluster = FakeCluster()
    client = await connect(cluster)
    assert client.cluster == "c1"
    await client.partitions(TOPIC)
    assert cluster.paths() == ["GET http://any:9/v1/cluster",
                               f"GET {BROKER}/admin/v2/persistent/t/n/x/partitions"]
    await client.close()


async def test_transaction_registers_before_produce_and_ack_then_commits() -> None:
    cluster = FakeCluster(partitions=3)
    client = await connect(cluster)
    producer = await client.producer(TOPIC)
    consumer = await client.consumer("persistent://t/n/in", "sub", "earliest")
    async with client.transaction(timeout_ms=5000) as txn:
        await producer.send_many([OutMessage(b"a", key="k1"), OutMessage(b"b", partition=2)], txn=txn)
        await producer.send(b"c", key="k1", txn=txn)  # same partition: no second registration
        await consumer.ack(["1:1"], txn=txn)
        await consumer.ack(["1:2"], txn=txn)
    calls = [(m, u, b) for m, u, b in cluster.calls if u.startswith((COORDINATOR, BROKER))]
    paths = [f"{m} {u.split(':', 2)[2].split('/', 1)[1]}" for m, u, _ in calls]
    k1 = key_partition("k1", 3)
    assert k1 != 2
    assert paths == [
        "GET admin/v2/persistent/t/n/x/partitions",
        "PUT v1/topics/t/n/in/subscriptions/sub",
        "GET admin/v2/persistent/t/n/in/partitions",
        # Does the topic spread over broker replicas? (here: one broker owns it all)
        *(f"GET lookup/v2/topic/persistent/t/n/in-partition-{i}" for i in range(3)),
        "POST v1/transactions",
        "POST v1/transactions/0:1/partitions",
        # Each partition's messages to the partition's own name (its owner, with replicas).
        f"POST v1/topics/t/n/x-partition-{k1}/messages",
        "POST v1/topics/t/n/x-partition-2/messages",
        f"POST v1/topics/t/n/x-partition-{k1}/messages",
        "POST v1/transactions/0:1/subscriptions",
        "POST v1/topics/t/n/in/subscriptions/sub/acks",
        "POST v1/topics/t/n/in/subscriptions/sub/acks",
        "POST v1/transactions/0:1/commit",
    ]
    assert calls[6][2] == {"timeout_ms": 5000}
    assert calls[7][2] == {"partitions": sorted({f"{TOPIC}-partition-{k1}", f"{TOPIC}-partition-2"})}
    produce = calls[8][2]
    assert produce["txn_id"] == "0:1"
    assert [m["partition"] for m in produce["messages"]] == [k1]
    assert [m["partition"] for m in calls[9][2]["messages"]] == [2]
    assert calls[11][2] == {"subscriptions": [{"topic": "persistent://t/n/in", "subscription": "sub"}]}
    assert calls[12][2] == {"message_ids": ["1:1"], "cumulative": False, "txn_id": "0:1"}
    assert txn.state == "COMMITTED"
    await client.close()


async def test_exception_aborts_and_propagates() -> None:
    cluster = FakeCluster()
    client = await connect(cluster)
    with pytest.raises(RuntimeError, match="boom"):
        async with client.transaction() as txn:
            raise RuntimeError("boom")
    assert cluster.paths()[-1] == f"POST {COORDINATOR}/v1/transactions/0:1/abort"
    assert txn.state == "ABORTED"
    await client.close()


async def test_commit_conflict_raises() -> None:
    cluster = FakeCluster()
    client = await connect(cluster)
    cluster.fail["/commit"] = (409, {"error": "conflict", "message": "overlapping commit"})
    with pytest.raises(ConflictError, match="overlapping commit"):
        async with client.transaction():
            pass
    await client.close()


async def test_named_producer_sends_epoch_and_increasing_sequences() -> None:
    cluster = FakeCluster()
    client = await connect(cluster)
    producer = await client.producer(TOPIC, name="p1", epoch=7)
    await producer.send(b"x")
    await producer.send(b"y")
    bodies = [b for m, u, b in cluster.calls if u.endswith("/messages")]
    assert [b["producer"] for b in bodies] == [
        {"name": "p1", "epoch": 7, "sequence": 0}, {"name": "p1", "epoch": 7, "sequence": 1}]
    # Routed here as the broker would (sticky by name:sequence), sent to that partition's name.
    sticky = key_partition("p1:0", 3)
    assert bodies[0]["messages"][0]["partition"] == sticky
    assert next(u for m, u, b in cluster.calls if u.endswith("/messages")).endswith(
        f"/x-partition-{sticky}/messages")
    await client.close()


async def test_named_producer_retries_503_with_the_same_body_but_unnamed_does_not() -> None:
    """A retry must carry the same sequence (the broker drops it as a duplicate only then)."""
    cluster = FakeCluster()
    client = await connect(cluster)
    named = await client.producer(TOPIC, name="p1", epoch=3)
    cluster.fail["/messages"] = (503, {"error": "unavailable", "message": "later"})
    await named.send(b"x", key="k")
    await named.send(b"y")
    sent = [b for _, u, b in cluster.calls if u.endswith("/messages")]
    assert len(sent) == 3 and sent[0] == sent[1]  # the 503'd request, then the same one again
    assert [b["producer"]["sequence"] for b in sent] == [0, 0, 1]
    assert {b["producer"]["epoch"] for b in sent} == {3}
    unnamed = await client.producer(TOPIC)
    cluster.fail["/messages"] = (503, {"error": "unavailable", "message": "later"})
    with pytest.raises(UnavailableError, match="later"):
        await unnamed.send(b"x")
    assert len([u for _, u, _ in cluster.calls if u.endswith("/messages")]) == 4  # tried once
    await client.close()


async def test_receive_decodes_and_ack_nack_send_ids() -> None:
    cluster = FakeCluster()
    client = await connect(cluster)
    consumer = await client.consumer(TOPIC, "s1", "earliest", "Exclusive", name="c1")
    puts = [c[2] for c in cluster.calls if c[0] == "PUT"]
    assert puts[-1] == {"initial_position": "earliest", "type": "Exclusive"}
    [m] = await consumer.receive(max=10, wait_ms=50)
    assert (m.message_id, m.partition, m.key, m.value, m.properties) == ("5:6", 1, "k", b"hello", {"a": "b"})
    assert cluster.queries[-1] == "max=10&wait_ms=50&consumer=c1"
    await consumer.ack([m], cumulative=True)
    assert cluster.calls[-1][2] == {"message_ids": ["5:6"], "cumulative": True}
    await consumer.nack([m, "7:8"])
    assert cluster.calls[-1][1].endswith("/subscriptions/s1/nacks")
    assert cluster.calls[-1][2] == {"message_ids": ["5:6", "7:8"]}
    await client.close()


async def test_errors_map_to_streamtx_classes() -> None:
    cluster = FakeCluster()
    client = await connect(cluster)
    cluster.fail["/partitions"] = (404, {"error": "not_found", "message": "no topic"})
    with pytest.raises(NotFoundError):
        await client.producer(TOPIC)
    consumer = await client.consumer(TOPIC, "s")
    cluster.fail["/acks"] = (409, {"error": "conflict", "message": "held by 0:9"})
    with pytest.raises(ConflictError, match="held by 0:9"):
        await consumer.ack(["1:1"])
    cluster.fail["/acks"] = (401, {"error": "unauthorized", "message": "no token"})
    with pytest.raises(AuthError):
        await consumer.ack(["1:1"])
    with pytest.raises(MalformedError):
        await client.producer("not-a-topic")
    await client.close()


async def test_failed_registration_is_retried_by_the_next_send() -> None:
    cluster = FakeCluster(partitions=1)
    client = await connect(cluster)
    producer = await client.producer(TOPIC)
    txn = await client.new_transaction()
    cluster.fail["/0:1/partitions"] = (409, {"error": "conflict", "message": "not open"})
    with pytest.raises(ConflictError):
        await producer.send(b"x", txn=txn)
    assert not [u for _, u, _ in cluster.calls if u.endswith("/messages")]  # never produced
    await producer.send(b"x", txn=txn)
    assert txn.partitions == [f"{TOPIC}-partition-0"]
    await client.close()

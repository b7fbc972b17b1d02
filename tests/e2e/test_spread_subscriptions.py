"""Subscriptions of a topic whose partitions two broker processes split: topic-wide, as in Pulsar.

Two brokers over Redis leases and the Kafka backend (tansu), one topic of four
partitions, two on each. A ``latest`` subscription created through one broker
starts on EVERY partition at the end it had when the call was answered (the
creator has each other owner open it before answering), so a message produced
right after, on any partition, is received; and an Exclusive subscription is
exclusive over the whole topic (a claim in Redis every owner checks), so a
second consumer attaching through the other broker is refused with 409.
The lease is long (6 s: an owner's catalog tick every 2 s), so without the
fan-out the other broker would open the subscription only after the produce.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import kafka_url
from tests.e2e.test_broker_replicas import owners_of, spread_topic
from tests.support.replicas import Replicas
from tests.support.suite import eventually, until_served


@pytest.fixture(scope="module")
def replicas(kafka_bootstrap: str, redis_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with Replicas(kafka_url(kafka_bootstrap), redis_url, tmp_path_factory.mktemp("spread-subs"),
                  coordinators=1, brokers=2, ttl_ms=6000,
                  env={"STREAMTX_EXCLUSIVE_IDLE_MS": "20000"}) as r:
        yield r


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def _produce(http: httpx.AsyncClient, owners: list[str | None], name: str, tag: str) -> None:
    """One message per partition, each sent to its partition's owner under the partition's name
    (503 while the topic it took still opens)."""
    for i, owner in enumerate(owners):
        r = await until_served(http, "POST", f"{owner}/v1/topics/{name}-partition-{i}/messages",
                               timeout_s=20, json={"messages": [{"value": _b64(f"{tag}{i}")}]})
        assert r.status_code == 200, r.text


async def _split_topic(http: httpx.AsyncClient, replicas: Replicas, stem: str
                       ) -> tuple[list[str], str, list[str | None]]:
    """The brokers' URLs, a new topic's name split two and two over them, each partition's owner."""
    urls = [b.url for b in replicas.brokers]
    topic = await spread_topic(http, replicas, stem)
    return urls, topic.removeprefix("persistent://"), await owners_of(http, urls[0], topic, 4)


async def test_a_latest_subscription_starts_on_every_partition_when_the_call_is_answered(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls, name, owners = await _split_topic(http, replicas, "latest")
    await _produce(http, owners, name, "before")
    # 503 not_owner (retried, as the SDK does) while a broker's map of the owners lags
    r = await until_served(http, "PUT", f"{urls[0]}/v1/topics/{name}/subscriptions/late",
                           timeout_s=20, json={"initial_position": "latest", "type": "Shared"})
    assert r.status_code == 200, r.text
    await _produce(http, owners, name, "after")  # right away, on both brokers' partitions
    got: list[dict[str, Any]] = []

    async def received() -> bool:
        r = await http.get(f"{urls[0]}/v1/topics/{name}/subscriptions/late/messages",
                           params={"max": 10, "wait_ms": 300, "consumer": "c"})
        assert r.status_code == 200, r.text
        got.extend(r.json()["messages"])
        return len(got) >= 4

    await eventually(received, timeout_s=8, what="the 4 messages produced after the subscribe")
    values = sorted(base64.b64decode(m["value"]).decode() for m in got)
    assert values == [f"after{i}" for i in range(4)]
    r = await http.post(f"{urls[1]}/v1/topics/{name}/subscriptions/late/acks",
                        json={"message_ids": [m["message_id"] for m in got]})
    assert r.status_code == 200, r.text
    # Creating it again (a consumer's implicit create, a worker's restart) moves nothing.
    await _produce(http, owners, name, "again")
    for u in urls:
        r = await until_served(http, "PUT", f"{u}/v1/topics/{name}/subscriptions/late",
                               timeout_s=20, json={"initial_position": "latest"})
        assert r.status_code == 200, r.text
    stats = (await http.get(f"{urls[1]}/v1/topics/{name}/subscriptions/late/stats")).json()
    assert stats["msgBacklog"] == 4, stats  # the "again" messages, unread


async def _fetch(http: httpx.AsyncClient, url: str, consumer: str) -> httpx.Response:
    return await http.get(url, params={"max": 10, "wait_ms": 0, "consumer": consumer})


async def test_an_exclusive_subscription_admits_one_consumer_over_every_broker(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls, name, owners = await _split_topic(http, replicas, "excl")
    sub = f"only-{uuid.uuid4().hex[:4]}"
    r = await http.put(f"{urls[0]}/v1/topics/{name}/subscriptions/{sub}",
                       json={"initial_position": "earliest", "type": "Exclusive"})
    assert r.status_code == 200, r.text
    mine = {u: f"{u}/v1/topics/{name}-partition-{owners.index(u)}/subscriptions/{sub}/messages" for u in urls}

    async def served(url: str, consumer: str) -> httpx.Response:
        """The answer once the owner serves the subscription (404 or 503 while its partition still opens)."""
        return await until_served(http, "GET", url, timeout_s=10, retry_on=(404, 503),
                                  params={"max": 10, "wait_ms": 0, "consumer": consumer})

    # x attaches through broker 0 only (its own partition), then y through broker 1 only.
    assert (await served(mine[urls[0]], "x")).status_code == 200
    refused = await served(mine[urls[1]], "y")
    assert refused.status_code == 409 and refused.json()["error"] == "conflict", refused.text
    r = await served(f"{urls[1]}/v1/topics/{name}/subscriptions/{sub}/messages", "y")
    assert r.status_code == 409, r.text  # the topic's name, through broker 1, too
    assert (await _fetch(http, mine[urls[1]], "x")).status_code == 200  # x holds broker 1's too
    # x leaves: y gets the whole topic, and x is refused on both.
    r = await http.delete(f"{urls[1]}/v1/topics/{name}/subscriptions/{sub}/consumers/x")
    assert r.status_code == 200 and r.json()["closed"], r.text
    assert (await _fetch(http, mine[urls[1]], "y")).status_code == 200
    assert (await _fetch(http, mine[urls[0]], "y")).status_code == 200
    for u in urls:
        r = await _fetch(http, mine[u], "x")
        assert r.status_code == 409, r.text
    stats = (await http.get(f"{urls[0]}/v1/topics/{name}/subscriptions/{sub}/stats")).json()
    assert stats["activeConsumerName"] == "y", stats


async def _open_polls(http: httpx.AsyncClient, url: str) -> float:
    for line in (await http.get(f"{url}/metrics")).text.splitlines():
        if line.startswith("streamtx_long_polls_open "):
            return float(line.split()[1])
    raise AssertionError(f"no streamtx_long_polls_open gauge on {url}")


async def test_a_spread_fetch_whose_client_left_ends_everywhere_and_hands_nothing_out(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    """Issue 21 item 6: the client of a long poll on a spread topic's name leaves; before, the
    poll the first broker had forwarded to the other ran on for its whole wait, took what was
    produced meanwhile, and its answer went nowhere: on an Exclusive subscription that message
    stayed out with the consumer for good (its next fetches got nothing)."""
    urls, name, owners = await _split_topic(http, replicas, "gone")
    sub = f"gone-{uuid.uuid4().hex[:4]}"
    r = await http.put(f"{urls[0]}/v1/topics/{name}/subscriptions/{sub}",
                       json={"initial_position": "earliest", "type": "Exclusive"})
    assert r.status_code == 200, r.text
    fetch = f"/v1/topics/{name}/subscriptions/{sub}/messages"

    async def known() -> bool:  # both brokers serve it (each opens it at its catalog tick)
        return (await _fetch(http, f"{urls[0]}{fetch}", "x")).status_code == 200

    await eventually(known, timeout_s=15, what="the subscription served on both brokers")
    before = await _open_polls(http, urls[1])
    host, port = urls[0].removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {fetch}?wait_ms=25000&consumer=x HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    await writer.drain()

    async def forwarded() -> bool:
        return await _open_polls(http, urls[1]) > before

    await eventually(forwarded, timeout_s=10, what="the poll forwarded to the other broker")
    writer.close()  # the client leaves
    await writer.wait_closed()
    del reader

    async def ended() -> bool:
        return await _open_polls(http, urls[1]) <= before

    await eventually(ended, timeout_s=10, what="the forwarded poll to end with its client (not at 25 s)")
    theirs = owners.index(urls[1])
    r = await until_served(http, "POST", f"{urls[1]}/v1/topics/{name}-partition-{theirs}/messages",
                           timeout_s=20, json={"messages": [{"value": _b64("after")}]})
    assert r.status_code == 200, r.text
    r = await http.get(f"{urls[0]}{fetch}", params={"max": 10, "wait_ms": 5000, "consumer": "x"})
    assert r.status_code == 200, r.text
    assert [base64.b64decode(m["value"]).decode() for m in r.json()["messages"]] == ["after"]


async def test_acks_of_undelivered_ids_are_refused_by_each_partitions_owner(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    """Issue 21 item 1 on the spread path: an ack through one broker of an id past what a
    partition (its own or another broker's) dispatched is a 400, and hides nothing written there."""
    urls, name, owners = await _split_topic(http, replicas, "undelivered")
    r = await until_served(http, "PUT", f"{urls[0]}/v1/topics/{name}/subscriptions/u",
                           timeout_s=20, json={"initial_position": "earliest", "type": "Shared"})
    assert r.status_code == 200, r.text
    await _produce(http, owners, name, "first")
    got: list[dict[str, Any]] = []

    async def received(want: int) -> bool:
        r = await http.get(f"{urls[0]}/v1/topics/{name}/subscriptions/u/messages",
                           params={"max": 100, "wait_ms": 300, "consumer": "c"})
        assert r.status_code == 200, r.text
        got.extend(r.json()["messages"])
        return len(got) >= want

    await eventually(lambda: received(4), timeout_s=8, what="one message of each partition")
    acks = f"{urls[0]}/v1/topics/{name}/subscriptions/u/acks"
    for m in got:
        ledger, entry = (int(x) for x in str(m["message_id"]).split(":")[:2])
        for cumulative in (False, True):
            future = {"message_ids": [f"{ledger}:{entry + 2}"], "cumulative": cumulative}
            r = await http.post(acks, json=future)
            assert r.status_code == 400 and r.json()["error"] == "malformed", (owners[m["partition"]], r.text)
    delivered = {"message_ids": [str(m["message_id"]) for m in got]}
    assert (await http.post(acks, json=delivered)).status_code == 200
    for tag in ("second", "third"):  # the second "third" message of each partition sits at entry + 2
        await _produce(http, owners, name, tag)
    got.clear()
    await eventually(lambda: received(8), timeout_s=8, what="two more messages of each partition")
    values = sorted(base64.b64decode(m["value"]).decode() for m in got)
    assert values == sorted(f"{t}{i}" for t in ("second", "third") for i in range(4))

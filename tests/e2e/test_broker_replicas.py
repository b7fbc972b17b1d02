"""Broker replicas over Redis leases and the Kafka backend, all as real processes.

Two brokers share the PARTITIONS through leases in a real redis-server (each
partition served by one broker, so one partitioned topic spreads over both); one
pending-ack store, one coordinator (leased too); every ledger on the tansu
Kafka-protocol broker. Every peer and client knows only the first broker's URL
and is redirected to each partition's owner. The failures: kill -9 the other
broker during a transactional workload through the SDK over one topic whose
partitions both own (its partitions move within the lease time, every
transaction commits, every committed message is read once, nothing else) and
SIGSTOP it past its lease (on SIGCONT none of its appends lands: the new owner
fenced the partition ledgers).
"""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from streamtx.client import OutMessage, StreamtxClient
from streamtx.client.names import path_of
from streamtx.errors import StreamtxError
from tests.conftest import kafka_url
from tests.support.replicas import Replicas
from tests.support.suite import eventually, everything, receive


@pytest.fixture(scope="module")
def replicas(kafka_bootstrap: str, redis_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with Replicas(kafka_url(kafka_bootstrap), redis_url, tmp_path_factory.mktemp("broker-replicas"),
                  coordinators=1, brokers=2) as r:
        yield r


async def topic_owner(http: httpx.AsyncClient, via: str, topic: str, partition: int = 0) -> str | None:
    """Pulsar's lookup of one partition: its owner's URL (None while it moves)."""
    r = await http.get(f"{via}/lookup/v2/topic/persistent/{topic.removeprefix('persistent://')}"
                       f"-partition-{partition}")
    if r.status_code == 503:
        return None
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["brokerUrl"] == body["httpUrl"]
    return str(body["httpUrl"])


async def make_topics(replicas: Replicas, stem: str, n: int, partitions: int = 2) -> list[str]:
    topics = [f"persistent://t/n/{stem}-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
    async with StreamtxClient(replicas.tcs[0].url) as client:
        for t in topics:
            await client.create_topic(t, partitions)
    return topics


async def topics_on_both(http: httpx.AsyncClient, replicas: Replicas, stem: str, partitions: int
                         ) -> list[str]:
    """New topics, as many as it takes (the spread is over every topic) for each broker to own one."""
    topics: list[str] = []
    await eventually(lambda: _broker_spread(http, replicas, []), timeout_s=20, what="both brokers up")
    while not topics or not await _broker_spread(http, replicas, topics):
        assert len(topics) < 12, "the spread never gave both brokers a topic"
        topics += await make_topics(replicas, stem, 1, partitions)
    return topics


async def topics_by_owner(http: httpx.AsyncClient, replicas: Replicas, topics: list[str]
                          ) -> dict[str | None, list[str]]:
    out: dict[str | None, list[str]] = {}
    for t in topics:
        out.setdefault(await topic_owner(http, replicas.brokers[0].url, t), []).append(t)
    return out


async def owners_of(http: httpx.AsyncClient, via: str, topic: str, partitions: int) -> list[str | None]:
    return [await topic_owner(http, via, topic, p) for p in range(partitions)]


async def spread_topic(http: httpx.AsyncClient, replicas: Replicas, stem: str, partitions: int = 4) -> str:
    """A new topic once its partitions are shared out over both brokers, half each."""
    await eventually(lambda: _broker_spread(http, replicas, []), timeout_s=20, what="both brokers up")
    [topic] = await make_topics(replicas, stem, 1, partitions)
    urls = sorted(b.url for b in replicas.brokers)

    async def spread() -> bool:
        # Both brokers' views: one that still sees a partition moving answers a produce 503.
        views = [await owners_of(http, u, topic, partitions) for u in urls]
        owners = [o for o in views[0] if o is not None]
        return views[0] == views[1] and len(owners) == partitions and sorted(set(owners)) == urls and \
            owners.count(urls[0]) == partitions // 2

    await eventually(spread, timeout_s=20, what=f"the partitions of {topic} spread half and half, "
                                                "as both brokers see it")
    return topic


async def test_one_topics_partitions_spread_over_the_brokers_and_a_non_owner_redirects(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls = [b.url for b in replicas.brokers]
    topic = await spread_topic(http, replicas, "spread")

    async def agreed() -> bool:  # every broker answers the same owner, for every partition
        views = [await owners_of(http, u, topic, 4) for u in urls]
        return views[0] == views[1] and None not in views[0]

    await eventually(agreed, what="every broker to answer the owner (once it opened the partition)")
    r = await http.get(f"{urls[0]}/lookup/v2/topic/persistent/t/n/nope-{uuid.uuid4().hex[:6]}")
    assert r.status_code == 404, r.text
    owners = await owners_of(http, urls[0], topic, 4)
    index = owners.index(urls[1])
    name = topic.removeprefix("persistent://")
    path = f"/v1/topics/{name}-partition-{index}/messages"
    # The other broker redirects there once its owner map (refreshed every lease third) has
    # it; until then it answers 503 not_owner, which callers retry.
    got: list[httpx.Response] = []

    async def redirected() -> bool:
        got.append(await http.post(urls[0] + path, json={"messages": [{"value": "aGk="}]}))
        assert got[-1].status_code in (307, 503), got[-1].text
        return got[-1].status_code == 307

    await eventually(redirected, what="a 307 from the broker that does not own the partition")
    assert got[-1].headers["location"] == f"{urls[1]}{path}" and got[-1].json()["owner"] == urls[1]
    # The topic's own name spans both owners: the broker that gets it serves its partitions and
    # forwards the rest to their owner (REST callers that name the topic, as the demo's jobs).
    r = await http.post(f"{urls[0]}/v1/topics/{name}/messages",
                        json={"messages": [{"value": "aGk=", "partition": i} for i in range(4)]})
    assert r.status_code == 200 and len({i.split(":")[0] for i in r.json()["message_ids"]}) == 4, r.text
    await http.put(f"{urls[1]}/v1/topics/{name}/subscriptions/rest", json={"initial_position": "earliest"})
    fetched: list[dict[str, Any]] = []

    async def fetched_all() -> bool:
        r = await http.get(f"{urls[1]}/v1/topics/{name}/subscriptions/rest/messages",
                           params={"max": 10, "wait_ms": 200, "consumer": "c"})
        assert r.status_code in (200, 404), r.text  # 404: an owner has not opened the new subscription
        fetched.extend(r.json()["messages"] if r.status_code == 200 else [])
        return len(fetched) >= 4

    await eventually(fetched_all, what="a fetch on the topic's name to bring every partition's message")
    assert sorted(m["partition"] for m in fetched) == [0, 1, 2, 3]
    r = await http.post(f"{urls[1]}/v1/topics/{name}/subscriptions/rest/acks",
                        json={"message_ids": [m["message_id"] for m in fetched]})
    assert r.status_code == 200, r.text
    stats = (await http.get(f"{urls[0]}/v1/topics/{name}/subscriptions/rest/stats")).json()
    assert (stats["msgBacklog"], stats["unackedMessages"]) == (0, 0), stats
    async with StreamtxClient(replicas.tcs[0].url) as client:
        producer = await client.producer(topic)
        sent = [f"m{i}".encode() for i in range(8)]
        await producer.send_many([OutMessage(v, partition=i % 4) for i, v in enumerate(sent)])
        consumer = await client.consumer(topic, "all", "earliest", "Shared")
        assert consumer.spread
        got_msgs = await receive(consumer, 12, timeout_s=5)
        assert sorted(m.value for m in got_msgs) == sorted([b"hi"] * 4 + sent)
        assert {m.partition for m in got_msgs} == {0, 1, 2, 3}
        await consumer.ack(got_msgs)
        for u in urls:  # each broker acked its own partitions' messages
            stats = (await http.get(f"{u}/v1/topics/{name}-partition-{owners.index(u)}"
                                    "/subscriptions/all/stats")).json()
            assert stats["msgBacklog"] == 0, stats
        # The topic's stats on either broker: each owner asked for its partitions, merged.
        for u in urls:
            whole = (await http.get(f"{u}/admin/v2/persistent/{name}/stats")).json()
            listed = [p["partition"] for p in whole["partitions"]]
            assert listed == [f"{topic}-partition-{i}" for i in range(4)], whole
            assert whole["subscriptions"]["all"]["msgBacklog"] == 0 and whole["storageSize"] > 0, whole
            tb = (await http.get(f"{u}/admin/v3/transactions/transactionBufferStats/{name}")).json()
            assert len(tb["partitions"]) == 4 and tb["ongoingTxnSize"] == 0, tb
        await consumer.close()


async def test_trim_on_a_spread_topics_name_trims_every_partition_on_its_owner(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls = [b.url for b in replicas.brokers]
    topic = await spread_topic(http, replicas, "trim")
    name = topic.removeprefix("persistent://")
    r = await http.put(f"{urls[0]}/v1/topics/{name}/subscriptions/keep",
                       json={"initial_position": "earliest"})
    assert r.status_code == 200, r.text
    ids: list[list[str]] = []  # ids[round][partition]
    for _ in range(3):
        r = await http.post(f"{urls[0]}/v1/topics/{name}/messages",
                            json={"messages": [{"value": "aGk=", "partition": i} for i in range(4)]})
        assert r.status_code == 200, r.text
        ids.append(r.json()["message_ids"])
    fetched: list[str] = []

    async def fetched_all() -> bool:
        r = await http.get(f"{urls[1]}/v1/topics/{name}/subscriptions/keep/messages",
                           params={"max": 12, "wait_ms": 200, "consumer": "c"})
        assert r.status_code in (200, 404), r.text  # 404: an owner has not opened the subscription
        if r.status_code == 200:
            fetched.extend(m["message_id"] for m in r.json()["messages"])
        return len(fetched) >= 12

    await eventually(fetched_all, what="every partition's messages on the topic's name")
    # "keep" consumed the first two rounds on every partition, not the last.
    r = await http.post(f"{urls[1]}/v1/topics/{name}/subscriptions/keep/acks",
                        json={"message_ids": ids[0] + ids[1]})
    assert r.status_code == 200, r.text
    # Pulsar's trim of a partitioned topic, asked of a broker owning half of it: every partition
    # trimmed by its owner, each up to what "keep" has yet to consume.
    r = await http.post(f"{urls[0]}/admin/v2/persistent/{name}/trim")
    assert r.status_code == 200, r.text
    rows = r.json()["partitions"]
    assert [row["partition"] for row in rows] == [f"{topic}-partition-{i}" for i in range(4)], rows
    assert [row["firstPosition"] for row in rows] == ids[2], rows
    # One partition named on the topic's name: forwarded to its owner; a refusal comes back as is.
    owners = await owners_of(http, urls[0], topic, 4)
    theirs, mine = owners.index(urls[1]), owners.index(urls[0])
    r = await http.post(f"{urls[0]}/admin/v2/persistent/{name}/trim",
                        json={"partition": theirs, "before": ids[2][theirs]})
    assert r.status_code == 200 and r.json()["firstPosition"] == ids[2][theirs], r.text
    r = await http.post(f"{urls[0]}/admin/v2/persistent/{name}/trim",
                        json={"partition": theirs, "before": ids[2][mine]})
    assert r.status_code == 404 and f"not a position of {topic}-partition-{theirs}" in r.text, r.text
    # A position without its partition: the partition it is of, by its ledger id (here or its owner).
    for index in (mine, theirs):
        r = await http.post(f"{urls[0]}/admin/v2/persistent/{name}/trim", json={"before": ids[2][index]})
        assert r.status_code == 200 and r.json()["partition"] == f"{topic}-partition-{index}", r.text
    # What "keep" had not consumed is all still there: a new subscription reads exactly that.
    async with StreamtxClient(replicas.tcs[0].url) as client:
        assert sorted(await everything(client, topic)) == [b"hi"] * 4


async def _transfer(client: StreamtxClient, producer: Any, i: int) -> tuple[str, bool]:
    """One transaction writing ``v<i>`` to every partition; (txn id, whether the SDK saw it commit)."""
    txn = await client.new_transaction(timeout_ms=60_000)
    try:
        await producer.send_many([OutMessage(f"v{i}".encode(), partition=p) for p in range(4)], txn=txn)
        await txn.commit()
        return txn.txn_id, True
    except StreamtxError:
        with contextlib.suppress(StreamtxError):
            await txn.abort()
        return txn.txn_id, False


async def test_a_killed_brokers_partitions_move_and_a_transactional_workload_goes_on(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    victim, first = replicas.brokers[1], replicas.brokers[0]
    topic = await spread_topic(http, replicas, "kill")
    outcomes: list[tuple[int, str, bool]] = []
    async with StreamtxClient(replicas.tcs[0].url) as client:
        producer = await client.producer(topic, name=f"w-{uuid.uuid4().hex[:6]}")
        for i in range(6):
            outcomes.append((i, *await _transfer(client, producer, i)))
        # One transaction straddles the kill: it produced to every partition and acked on
        # partitions of both brokers before, and commits after. The coordinator's end calls
        # and the pending-ack store's are redirected to the new owner.
        worker = await client.consumer(topic, "work", "earliest", "Shared")
        assert worker.spread
        got = await receive(worker, 24)
        assert len({m.partition for m in got}) == 4, got
        straddle = await client.new_transaction(timeout_ms=60_000)
        await producer.send_many([OutMessage(b"vS", partition=p) for p in range(4)], txn=straddle)
        await worker.ack(got, txn=straddle)
        victim.kill9()
        await straddle.commit()
        outcomes.append((14, straddle.txn_id, True))
        # The SDK sees the move as latency: the next transactions wait for the new owner.
        for i in range(6, 14):
            outcomes.append((i, *await _transfer(client, producer, i)))

        async def moved() -> bool:
            return await owners_of(http, first.url, topic, 4) == [first.url] * 4

        await eventually(moved, timeout_s=20, what="the killed broker's partitions to move")
        committed = {(f"v{i}" if i < 14 else "vS").encode() for i, txn, _ in outcomes
                     if await _state(client, txn) == "COMMITTED"}
        # Every transaction committed: the kill was only latency to the client.
        assert all(ok for _, _, ok in outcomes) and len(committed) == len(outcomes), outcomes
        # Every committed write exactly once on every partition, nothing else.
        assert sorted(await everything(client, topic)) == sorted(list(committed) * 4)
        # The straddling acks were committed on the new owner: the 24 messages are gone.
        stats = await client.broker.call("GET", f"/v1/topics/{path_of(topic)}/subscriptions/work/stats")
        assert (stats["heldByTransactions"], stats["msgBacklog"]) == (0, 4 * len(committed) - 24), stats
        # A consumer made while one broker owns it all polls the topic's name ...
        late = await client.consumer(topic, "late", "earliest", "Shared")
        assert not late.spread
        victim.start()  # it rejoins and takes its share of the partitions back by handover

        async def back() -> bool:
            return set(await owners_of(http, first.url, topic, 4)) == {first.url, victim.url}

        await eventually(back, timeout_s=20, what="the restarted broker to get partitions back")
        # ... and still gets every partition's messages once they spread (the broker it asks
        # forwards the other's share).
        seen = await receive(late, 4 * len(committed), timeout_s=20)
        assert sorted(m.value for m in seen) == sorted(list(committed) * 4)


async def _broker_spread(http: httpx.AsyncClient, replicas: Replicas, topics: list[str]) -> bool:
    """Every broker owns one of ``topics`` (none: every broker is a live member)."""
    if not topics:
        return [(await http.get(f"{b.url}/readyz")).status_code for b in replicas.brokers] == [200, 200]
    placed = await topics_by_owner(http, replicas, topics)
    return all(placed.get(b.url) for b in replicas.brokers)


async def _state(client: StreamtxClient, txn: str) -> str:
    return str((await client.transaction_metadata(txn))["state"])


async def test_a_broker_paused_past_its_lease_lands_no_append_after_it_wakes(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    zombie, first = replicas.brokers[1], replicas.brokers[0]
    topics = await topics_on_both(http, replicas, "pause", 1)
    chosen: list[str] = []

    async def appended_before() -> bool:
        """"before", appended by the zombie-to-be (the spread of new topics may still move one:
        its 307 means look again)."""
        mine = (await topics_by_owner(http, replicas, topics)).get(zombie.url, [])
        if not mine:
            return False
        path = f"/v1/topics/{mine[0].removeprefix('persistent://')}/messages"
        r = await http.post(zombie.url + path, json={"messages": [{"value": "YmVmb3Jl"}]})
        assert r.status_code in (200, 307, 503), r.text
        chosen[:] = [mine[0]] if r.status_code == 200 else []
        return bool(chosen)

    await eventually(appended_before, timeout_s=20, what="the zombie-to-be to append to a topic it owns")
    topic = chosen[0]
    path = f"/v1/topics/{topic.removeprefix('persistent://')}/messages"
    assert zombie.proc is not None
    zombie.proc.send_signal(signal.SIGSTOP)
    try:
        async def moved() -> bool:
            return await topic_owner(http, first.url, topic) == first.url

        await eventually(moved, timeout_s=20, what="the paused broker's topic to move")
        r = await http.post(first.url + path, json={"messages": [{"value": "YWZ0ZXI="}]})  # "after"
        assert r.status_code == 200, r.text
    finally:
        zombie.proc.send_signal(signal.SIGCONT)
    # The woken broker is asked to append at once, without following redirects: it may
    # still believe it owns the topic, but the new owner's fence refuses its append.
    answers = [await http.post(zombie.url + path, json={"messages": [{"value": "em9tYmll"}]})
               for _ in range(5)]
    assert all(a.status_code != 200 for a in answers), [a.text for a in answers]
    async with StreamtxClient(replicas.tcs[0].url) as client:
        assert sorted(await everything(client, topic)) == [b"after", b"before"]


async def test_unsubscribing_a_spread_topic_deletes_its_cursors_on_every_owner(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls = [b.url for b in replicas.brokers]
    topic = await spread_topic(http, replicas, "unsub")
    sub = f"{urls[0]}/v1/topics/{topic.removeprefix('persistent://')}/subscriptions/gone"
    r = await http.put(sub, json={"initial_position": "earliest"})
    assert r.status_code == 200, r.text
    r = await http.post(f"{urls[0]}/v1/topics/{topic.removeprefix('persistent://')}/messages",
                        json={"messages": [{"value": "aGk=", "partition": i} for i in range(4)]})
    assert r.status_code == 200, r.text
    sent = sorted(r.json()["message_ids"])

    async def fetched_all(got: list[str]) -> bool:
        r = await http.get(f"{sub}/messages", params={"max": 4, "wait_ms": 200, "consumer": "c"})
        assert r.status_code in (200, 404), r.text  # 404: an owner has not opened it yet
        if r.status_code == 200:
            ids = [m["message_id"] for m in r.json()["messages"]]
            got.extend(ids)
            if ids:
                assert (await http.post(f"{sub}/acks", json={"message_ids": ids})).status_code == 200
        return sorted(got) == sent

    first: list[str] = []
    await eventually(lambda: fetched_all(first), what="every partition's messages, acked")
    r = await http.delete(sub)
    assert r.status_code == 409 and r.json()["error"] == "conflict", r.text  # consumer c is connected
    r = await http.delete(sub, params={"force": "true"})
    assert r.status_code == 200, r.text
    r = await http.get(f"{urls[1]}/v1/topics/{topic.removeprefix('persistent://')}/subscriptions/gone/stats")
    assert r.status_code == 404, r.text
    # Created again it starts anew on every partition (the other owner's cursors went too):
    # everything acked before is delivered again.
    assert (await http.put(sub, json={"initial_position": "earliest"})).status_code == 200
    again: list[str] = []
    await eventually(lambda: fetched_all(again), what="every message again after re-creating")


async def test_unsubscribing_a_spread_topic_waits_for_what_the_other_owner_holds(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    """Asked of one broker, the delete also sees the other owner's partitions: a consumer connected
    only there (409 unless forced) and an open transaction's acks held only there (409 even
    forced: they would be lost with the cursor). Before, only the answering broker's were checked."""
    here = replicas.brokers[0].url
    topic = await spread_topic(http, replicas, "unsub-held")
    path = topic.removeprefix("persistent://")
    owners = await owners_of(http, here, topic, 4)
    theirs = [i for i, o in enumerate(owners) if o != here]
    assert theirs, owners
    sub = f"{here}/v1/topics/{path}/subscriptions/held"
    assert (await http.put(sub, json={"initial_position": "earliest"})).status_code == 200
    r = await http.post(f"{here}/v1/topics/{path}/messages",
                        json={"messages": [{"value": "aGk=", "partition": i} for i in theirs]})
    assert r.status_code == 200, r.text
    got: list[str] = []

    async def fetched() -> bool:  # the other owner's partitions only: consumer c is known there alone
        r = await http.get(f"{sub}/messages", params={"max": 10, "wait_ms": 200, "consumer": "c",
                                                      "partitions": ",".join(map(str, theirs))})
        assert r.status_code in (200, 404), r.text  # 404: the owner has not opened it yet
        if r.status_code == 200:
            got.extend(m["message_id"] for m in r.json()["messages"])
        return len(got) == len(theirs)

    await eventually(fetched, what="the other owner's messages")
    r = await http.delete(sub)
    assert r.status_code == 409 and "consumers" in r.json()["message"], r.text
    tc = replicas.tcs[0].url
    txn = (await http.post(f"{tc}/v1/transactions", json={"timeout_ms": 60_000})).json()["txn_id"]
    r = await http.post(f"{tc}/v1/transactions/{txn}/subscriptions",
                        json={"subscriptions": [{"topic": topic, "subscription": "held"}]})
    assert r.status_code == 200, r.text
    r = await http.post(f"{sub}/acks", json={"message_ids": got[:1], "txn_id": txn})
    assert r.status_code == 200, r.text
    r = await http.delete(sub, params={"force": "true"})
    assert r.status_code == 409 and "transactions" in r.json()["message"], r.text
    assert (await http.post(f"{tc}/v1/transactions/{txn}/abort")).status_code == 200
    r = await http.delete(sub, params={"force": "true"})
    assert r.status_code == 200, r.text

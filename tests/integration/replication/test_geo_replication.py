"""Geo-replication across three clusters of real processes: exactly once, in order, no loops.

Covers issue 11 item 3: messages produced in every cluster reach every other
exactly once and in source order per partition, across kill -9 of a
replication controller and of a broker; replicated messages name their source;
only committed transactional messages replicate, aborted ones never; a remote
down keeps a growing backlog and loses nothing when it returns. Cluster ``c``
runs on the Kafka ledger backend, ``a`` and ``b`` on files (conftest.py).
"""

from __future__ import annotations

import asyncio
import re

import httpx

from streamtx.client import StreamtxClient
from tests.deploy import dashboards
from tests.integration.replication.conftest import b64, create_topic, decoded, get, replicate
from tests.support.geo import Geo, check_exactly_once_in_order, drain, post_until_stored
from tests.support.suite import eventually

PARTITIONS = 2


async def produce(url: str, topic: str, cluster: str, requests: int, per_request: int,
                  sent: list[int], partitions: int = PARTITIONS) -> None:
    """Named-producer requests (retried with the same sequence until stored: exactly once here)."""
    path = f"/v1/topics/{topic}/messages"
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for seq in range(requests):
            body = {"producer": {"name": f"p-{cluster}", "epoch": 1, "sequence": seq},
                    "messages": [{"value": b64(f"{cluster}-{seq}-{j}"), "partition": seq % partitions}
                                 for j in range(per_request)]}
            await post_until_stored(http, path, body, f"{cluster}: produce {seq}")
            sent[0] += 1


async def test_every_message_everywhere_once_in_order_across_kill9(clusters: Geo) -> None:
    names = ["a", "b", "c"]
    replicate(clusters, "t/ex", names)
    topic = "t/ex/orders"
    for name in names:
        create_topic(clusters, name, f"{topic}", PARTITIONS)
    requests, per_request = 40, 5
    sent = [0]
    producers = [asyncio.create_task(produce(clusters.url(n), topic, n, requests, per_request, sent))
                 for n in names]
    await eventually(lambda: _at_least(sent, requests), what="a third of the produce requests")
    # Crash a replication controller (mid-copy) and a broker (a target of two and a source).
    await asyncio.to_thread(clusters["a"].replication.restart)
    await asyncio.to_thread(clusters["b"].broker.restart)
    await asyncio.gather(*producers)
    total = len(names) * requests * per_request
    results = await asyncio.gather(*(drain(clusters.url(n), topic, "check", total) for n in names))
    for name, got in zip(names, results, strict=True):
        check_exactly_once_in_order(name, got, names, requests, per_request)


async def _at_least(sent: list[int], n: int) -> bool:
    return sent[0] >= n


async def test_only_committed_messages_replicate(clusters: Geo) -> None:
    replicate(clusters, "t/txn", ["a", "b"])
    topic = "persistent://t/txn/x"
    async with StreamtxClient(clusters.url("a")) as client:
        await client.create_topic(topic, 1)
        producer = await client.producer(topic)
        async with client.transaction() as committed:
            await producer.send(b"committed-1", txn=committed)
            await producer.send(b"committed-2", txn=committed)
        aborted = await client.new_transaction()
        await producer.send(b"aborted-1", txn=aborted)
        await producer.send(b"plain-1")  # held back behind the open txn, then replicated
        await aborted.abort()
        await producer.send(b"sentinel")
    got = await drain(clusters.url("b"), "t/txn/x", "check", 4)
    assert [decoded(m) for m in got] == ["committed-1", "committed-2", "plain-1", "sentinel"]
    assert all(m["replicated_from"] == "a" for m in got)
    # c is not in the list: the topic never reached it.
    r = await get(f"{clusters.url('c')}/admin/v2/persistent/t/txn/x/partitions")
    assert r.status_code == 404


async def test_remote_down_backlog_grows_then_drains(clusters: Geo) -> None:
    replicate(clusters, "t/down", ["a", "c"])
    topic = "t/down/x"
    create_topic(clusters, "a", topic, 1)
    create_topic(clusters, "c", topic, 1)
    stats_url = f"{clusters.url('a')}/admin/v2/persistent/{topic}/stats"

    async def replicating() -> bool:
        repl = (await get(stats_url)).json()["replication"].get("c")
        return repl is not None and repl["connected"]

    # c goes down once a replicates to it (down from the very start: the next test).
    await eventually(replicating, what="a replicating to c before c goes down")
    clusters["c"].broker.kill9()
    sent = [0]
    await produce(clusters.url("a"), topic, "a", 20, 3, sent, partitions=1)

    async def backlog_and_disconnected() -> bool:
        repl = (await get(stats_url)).json()["replication"].get("c")
        return repl is not None and repl["replicationBacklog"] >= 20 and not repl["connected"]

    await eventually(backlog_and_disconnected, what="a's backlog towards c grows while c is down")
    stats = (await get(stats_url)).json()["replication"]["c"]
    assert stats["replicationDelayInSeconds"] > 0
    metrics = (await get(f"{clusters.url('a')}/metrics")).text
    assert 'pulsar_replication_backlog{cluster="a",namespace="t/down",remote_cluster="c",topic=' \
           '"persistent://t/down/x"} 20.0' in metrics
    # Every metric the replication dashboard reads is there, per remote cluster.
    board = dashboards.load()["replication.json"]
    names = {n for _, expr in dashboards.queries(board) for n in re.findall(r"pulsar_replication_\w+", expr)}
    assert len(names) == 7
    for name in names:
        assert re.search(rf'^{name}{{[^}}]*remote_cluster="c"', metrics, re.M), name
    await c_returns_and_drains(clusters, topic, 20, 3)


async def test_remote_down_from_the_start_holds_trims_then_drains(clusters: Geo) -> None:
    """c is down before a ever replicates this topic to it: the cursor is there all the same."""
    replicate(clusters, "t/never", ["a", "c"])
    clusters["c"].broker.kill9()
    topic = "t/never/x"
    create_topic(clusters, "a", topic, 1)  # never seen by c: it is down
    sent = [0]
    await produce(clusters.url("a"), topic, "a", 10, 3, sent, partitions=1)
    stats_url = f"{clusters.url('a')}/admin/v2/persistent/{topic}/stats"

    async def backlog_and_disconnected() -> bool:
        repl = (await get(stats_url)).json()["replication"].get("c")
        return repl is not None and repl["replicationBacklog"] >= 10 and not repl["connected"]

    await eventually(backlog_and_disconnected, what="a backlog towards c, which was never reached")
    lid, eid = (await get(stats_url)).json()["partitions"][0]["lastPosition"].split(":")
    async with httpx.AsyncClient(timeout=30) as http:

        async def trim(before: str) -> str:
            r = await http.post(f"{clusters.url('a')}/admin/v2/persistent/{topic}/trim",
                                json={"partition": 0, "before": before})
            assert r.status_code == 200, r.text
            return str(r.json()["firstPosition"])

        first = await trim(f"{lid}:0")  # trims nothing: where the partition starts
        # No subscription here: only the replicator cursor keeps the entries.
        assert await trim(f"{lid}:{int(eid) + 1}") == first, "trimmed what c has not received"
    await c_returns_and_drains(clusters, topic, 10, 3)


async def c_returns_and_drains(clusters: Geo, topic: str, requests: int, per_request: int) -> None:
    """c's broker starts again: a's backlog reaches it exactly once, in order, and drains."""
    clusters["c"].broker.start()
    total = requests * per_request
    got = await drain(clusters.url("c"), topic, "check", total)
    check_exactly_once_in_order("c", got, ["a"], requests, per_request)
    stats_url = f"{clusters.url('a')}/admin/v2/persistent/{topic}/stats"

    async def drained() -> bool:
        repl = (await get(stats_url)).json()["replication"]["c"]
        return bool(repl["replicationBacklog"] == 0 and repl["connected"] and repl["msgOutCounter"] == total)

    await eventually(drained, what="the backlog towards c drains once c is back")


async def test_a_cluster_removed_from_the_policy_leaves_no_cursor_behind(clusters: Geo) -> None:
    """Issue 21 item 7: c leaves the namespace's replication list while a still has a backlog for
    it; before, a's broker kept c's cursor for good (reopened with the partition at every start),
    holding back every trim of the topic. The controller now has it deleted."""
    replicate(clusters, "t/left", ["a", "c"])
    topic = "t/left/x"
    clusters["c"].broker.kill9()  # so that a's cursor for c holds something back
    try:
        create_topic(clusters, "a", topic, 1)
        sent = [0]
        await produce(clusters.url("a"), topic, "a", 5, 2, sent, partitions=1)
        stats_url = f"{clusters.url('a')}/admin/v2/persistent/{topic}/stats"

        async def held_for(present: bool) -> bool:
            repl = (await get(stats_url)).json()["replication"].get("c")
            return (repl is not None and repl["replicationBacklog"] >= 5) if present else repl is None

        await eventually(lambda: held_for(True), what="a's backlog towards c")
        replicate(clusters, "t/left", ["a"])  # c leaves the list
        await eventually(lambda: held_for(False), what="c's cursor deleted once c left the list")
        clusters["a"].broker.restart()
        await eventually(lambda: held_for(False), what="a's broker back")
        assert (await get(stats_url)).json()["replication"] == {}
    finally:
        clusters["c"].broker.start()

"""Replicated subscriptions (PIP-33) across three clusters of real processes.

Covers issue 11 item 4: a consumer that fails over loses nothing and gets few
duplicates; the subscription appears in the other clusters at the right place;
a lagging consumer with more snapshots than the cache holds still moves them;
no snapshot completes while a cluster is down (one request per timeout) and
they resume when it returns; an idle topic writes no markers; a topic written
only in transactions completes snapshots; a marker at the end of a partition
does not end a long poll early.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from streamtx.client import StreamtxClient
from tests.integration.replication.conftest import b64, create_topic, decoded, get, replicate
from tests.support.geo import Geo
from tests.support.suite import eventually


class Topic:
    """One single-partition topic, its replicated subscription ``s`` in ``a``, and helpers."""

    def __init__(self, geo: Geo, namespace: str, clusters: list[str] | None) -> None:
        self.geo = geo
        self.path = f"{namespace}/x"
        if clusters is not None:
            replicate(geo, namespace, clusters)
        create_topic(geo, "a", self.path, 1)
        r = httpx.put(f"{geo.url('a')}/v1/topics/{self.path}/subscriptions/s", timeout=30,
                      json={"initial_position": "earliest", "replicated": True})
        assert r.status_code == 200 and r.json()["replicated"] is True, r.text

    async def produce(self, values: list[str], pause_s: float = 0.0, cluster: str = "a") -> None:
        async with httpx.AsyncClient(base_url=self.geo.url(cluster), timeout=30) as http:
            for v in values:
                r = await http.post(f"/v1/topics/{self.path}/messages",
                                    json={"messages": [{"value": b64(v)}]})
                assert r.status_code == 200, r.text
                await asyncio.sleep(pause_s)

    async def consume(self, cluster: str, n: int, *, ack: bool = True, wait_ms: int = 300,
                      timeout_s: float = 60.0, until: Callable[[list[str]], bool] | None = None,
                      sub: str = "s") -> list[dict[str, Any]]:
        """Up to ``n`` messages of ``sub`` in ``cluster`` (or until ``until(values)``), acked in order."""
        out: list[dict[str, Any]] = []
        base = f"/v1/topics/{self.path}/subscriptions/{sub}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def done() -> bool:
            return len(out) >= n or (until is not None and until([decoded(m) for m in out]))

        async with httpx.AsyncClient(base_url=self.geo.url(cluster), timeout=30) as http:
            if sub != "s":
                r = await http.put(base, json={"initial_position": "earliest"})
                assert r.status_code == 200, r.text
            while not done() and loop.time() < deadline:
                got = (await http.get(f"{base}/messages", params={"max": n - len(out), "wait_ms": wait_ms,
                                                                   "consumer": "c"})).json()["messages"]
                out += got
                if ack and got:
                    r = await http.post(f"{base}/acks", json={"message_ids": [m["message_id"] for m in got]})
                    assert r.status_code == 200, r.text
        return out

    async def status(self, cluster: str = "a") -> dict[str, Any]:
        """The controller's snapshot status of this topic, once it has picked the topic up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:
            body = (await get(f"{self.geo[cluster].replication.url}/admin/v2/replication/status")).json()
            mine = [s for s in body["replicatedSubscriptions"] if s["topic"] == f"persistent://{self.path}"]
            if mine:
                return mine[0]  # type: ignore[no-any-return]
            assert loop.time() < deadline, f"the controller of {cluster} never picked up {self.path}"
            await asyncio.sleep(0.1)

    async def mark_delete(self, cluster: str) -> str | None:
        r = await get(f"{self.geo.url(cluster)}/v1/topics/{self.path}/subscriptions/s/stats")
        return r.json()["markDeletePositions"][0] if r.status_code == 200 else None

    async def entries(self) -> int:
        return int((await get(f"{self.geo.url('a')}/admin/v2/persistent/{self.path}/stats")).json()
                   ["partitions"][0]["entries"])


async def test_consumer_fails_over_with_nothing_lost(clusters: Geo) -> None:
    t = Topic(clusters, "t/fo", ["a", "b", "c"])

    async def answering() -> bool:
        return int((await t.status())["completedSnapshots"]) >= 1

    # The start-up snapshot first: b and c answer. (A broker that an earlier test killed
    # may hold c's replicator back a while; snapshots requested meanwhile time out, and
    # none starts after the last message - an idle topic gets none - to land among them.)
    await eventually(answering, timeout_s=90, what="the start-up snapshot, answered by b and c")
    sent = [f"m{i}" for i in range(100)]
    await t.produce(sent[:11], pause_s=0.05)  # snapshots (every 200 ms) land among the messages
    before = int((await t.status())["completedSnapshots"])
    await t.produce(sent[11:40], pause_s=0.05)

    async def one_among_the_messages() -> bool:
        # The second to complete from here was requested after m10: under load (a
        # snapshot timing out) it may take longer than producing the rest would.
        return int((await t.status())["completedSnapshots"]) >= before + 2

    await eventually(one_among_the_messages, timeout_s=90, what="a snapshot between m10 and m40")
    await t.produce(sent[40:], pause_s=0.05)
    in_a = [decoded(m) for m in await t.consume("a", 60)]
    assert in_a == sent[:60]
    # Where each message is in b, read through a subscription of b's own (left unacked).
    probe = [(decoded(m), m["message_id"]) for m in await t.consume("b", 100, ack=False, sub="probe")]
    where_b = {v: tuple(int(x) for x in mid.split(":")[:2]) for v, mid in probe}

    async def moved_everywhere() -> bool:
        marks = [await t.mark_delete(c) for c in ("b", "c")]
        if None in marks:
            return False
        md_b = tuple(int(x) for x in str(marks[0]).split(":"))
        # Past every message acked in a: the acks marker names them all, and b, where no
        # consumer passes the markers between them, deletes those along. (An update alone
        # may leave it before m0: a cache of 3 keeps the two oldest snapshots and the
        # newest while the consumer stands still, and the newest is past m59.)
        return md_b >= where_b["m59"]

    # The subscription never existed in b or c: the markers create it there.
    await eventually(moved_everywhere, timeout_s=90, what="s created in b and c, moved past m59 in b")
    in_b = [decoded(m) for m in
            await t.consume("b", 100, until=lambda got: set(in_a) | set(got) == set(sent))]
    in_b += [decoded(m) for m in await t.consume("b", 100, timeout_s=1)]  # a duplicate would come now
    assert set(in_a) | set(in_b) == set(sent), "lost on failover"
    assert in_b == sorted(in_b, key=lambda v: int(v[1:]))
    duplicates = len(set(in_a) & set(in_b))
    print(f"failover a->b: {duplicates} duplicates of 60 acked")
    assert duplicates == 0  # b started where a's consumer was: every ack followed it


async def test_lagging_consumer_with_more_snapshots_than_the_cache_holds(clusters: Geo) -> None:
    t = Topic(clusters, "t/lag", ["a", "b"])
    sent = [f"m{i}" for i in range(100)]
    await t.produce(sent, pause_s=0.02)  # about ten snapshots meanwhile; the cache holds 3

    async def many_snapshots() -> bool:
        return int((await t.status())["completedSnapshots"]) > 3

    await eventually(many_snapshots, timeout_s=90, what="more snapshots than the cache holds")
    got = await t.consume("a", 100, ack=False)
    async with httpx.AsyncClient(base_url=clusters.url("a"), timeout=30) as http:
        r = await http.post(f"/v1/topics/{t.path}/subscriptions/s/acks",
                            json={"message_ids": [m["message_id"] for m in got[:50]]})
        assert r.status_code == 200
    await eventually(lambda: _not_none(t.mark_delete("b")), timeout_s=90,
                     what="an update from the oldest cached snapshot")
    in_b = [decoded(m) for m in await t.consume("b", 100, until=lambda got: set(sent[50:]) <= set(got))]
    assert set(sent[50:]) <= set(in_b) and len(in_b) < 100


async def _not_none(value: Any) -> bool:
    return (await value) is not None


async def test_no_snapshot_while_a_cluster_is_down_then_they_resume(clusters: Geo) -> None:
    replicate(clusters, "t/cdown", ["a", "b", "c"])
    clusters["c"].broker.kill9()
    t = Topic(clusters, "t/cdown", None)
    producing = asyncio.create_task(t.produce([f"m{i}" for i in range(140)], pause_s=0.05))

    async def timed_out_twice() -> bool:
        s = await t.status()
        assert s["completedSnapshots"] == 0, "a snapshot completed without c"
        return int(s["requests"]) >= 3  # the third starts once the second timed out

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await eventually(timed_out_twice, timeout_s=90, what="requests repeated per timeout")
    elapsed = loop.time() - t0
    assert (await t.status())["requests"] <= elapsed / 3 + 1  # one per 3 s timeout at most
    await producing
    clusters["c"].broker.start()
    await t.produce(["after"])

    async def resumed() -> bool:
        return int((await t.status())["completedSnapshots"]) > 0

    await eventually(resumed, timeout_s=90, what="snapshots resume once c is back")


async def test_txn_only_topic_snapshots_idle_topic_no_markers_and_long_poll(clusters: Geo) -> None:
    t = Topic(clusters, "t/txo", ["a", "b"])
    async with StreamtxClient(clusters.url("a")) as client:
        producer = await client.producer(f"persistent://{t.path}")
        for i in range(3):
            async with client.transaction() as txn:
                await producer.send(f"t{i}".encode(), txn=txn)

    async def snapshot_done() -> bool:
        s = await t.status()
        return int(s["completedSnapshots"]) >= 1 and not s["pending"]

    await eventually(snapshot_done, timeout_s=90,
                     what="a topic written only in transactions completes a snapshot")
    assert [decoded(m) for m in await t.consume("a", 3)] == ["t0", "t1", "t2"]

    # Idle now: once the acks' update (and the snapshot it starts in b) have landed,
    # five snapshot periods in a row pass without a marker. A topic that kept
    # writing markers while idle would never get there.
    async def five_quiet_periods() -> bool:
        before, scans = await t.entries(), int((await t.status())["scans"])
        for _ in range(100):
            if int((await t.status())["scans"]) >= scans + 5:
                break
            await asyncio.sleep(0.1)
        return await t.entries() == before

    await eventually(five_quiet_periods, timeout_s=90, what="an idle topic writes no markers")

    # ONE long poll waiting at the end while markers land after the last message:
    # it answers the next message, not an early empty answer.
    completed = int((await t.status())["completedSnapshots"])
    await t.produce(["trigger"])  # data: the next snapshot writes markers behind it
    assert [decoded(m) for m in await t.consume("a", 1)] == ["trigger"]
    poll = asyncio.create_task(get(f"{clusters.url('a')}/v1/topics/{t.path}/subscriptions/s/messages"
                                   "?max=10&wait_ms=30000&consumer=c"))

    async def markers_written() -> bool:
        return int((await t.status())["completedSnapshots"]) > completed

    await eventually(markers_written, timeout_s=90, what="markers after the last message")
    assert not poll.done(), "the long poll ended early: " + (await poll).text
    await t.produce(["after-markers"])
    assert [decoded(m) for m in (await poll).json()["messages"]] == ["after-markers"]

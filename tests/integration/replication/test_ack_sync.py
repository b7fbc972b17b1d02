"""Individual acks follow the consumer to the other clusters (issue 11 item 4, beyond PIP-33).

A consumer in ``a`` acknowledges out of order, leaving a few early messages
(so the mark-delete stays stuck before them) among messages produced in all
three clusters; once the ack sync has run, a failover to ``b`` or to ``c``
(Kafka ledger backend) receives exactly the unacknowledged ones, and what the
consumer then acknowledges in ``b`` is acknowledged in ``a`` and ``c`` too. Then
a consumer acknowledging in order, past the snapshot its mark-delete last passed:
a failover gets nothing it acknowledged once the sync has run; and one message
of a batch, acknowledged by its batch index.
"""

from __future__ import annotations

import asyncio
import re

import httpx

from tests.deploy import dashboards
from tests.integration.replication.conftest import b64, decoded, get
from tests.integration.replication.test_replicated_subscriptions import Topic
from tests.support.geo import Geo
from tests.support.suite import eventually


async def test_individual_acks_beyond_the_mark_delete_follow_the_consumer(clusters: Geo) -> None:
    t = Topic(clusters, "t/acks", ["a", "b", "c"])

    async def topic_everywhere() -> bool:
        codes = [(await get(f"{clusters.url(c)}/admin/v2/persistent/{t.path}/stats")).status_code
                 for c in ("b", "c")]
        return codes == [200, 200]

    await eventually(topic_everywhere, timeout_s=60, what="the topic created in b and c")
    sent = [f"a{i}" for i in range(20)]
    await t.produce(sent)
    for cluster in ("b", "c"):  # messages whose origin is b or c, known in a by their copies
        values = [f"{cluster}{i}" for i in range(10)]
        await t.produce(values, cluster=cluster)
        sent += values
    # Every cluster holds all of them before the acks (read through probes, left unacked).
    for cluster in ("b", "c"):
        got = await t.consume(cluster, len(sent), ack=False, sub="probe")
        assert sorted(decoded(m) for m in got) == sorted(sent), cluster
    got = await t.consume("a", len(sent), ack=False)
    assert sorted(decoded(m) for m in got) == sorted(sent)
    keep = {"a1", "a5", "b3", "c7"}  # not acknowledged: the mark-delete stays before a1
    acked = [m["message_id"] for m in got if decoded(m) not in keep]
    async with httpx.AsyncClient(base_url=clusters.url("a"), timeout=30) as http:
        r = await http.post(f"/v1/topics/{t.path}/subscriptions/s/acks", json={"message_ids": acked})
        assert r.status_code == 200, r.text
    first_kept = min(tuple(map(int, m["message_id"].split(":")[:2])) for m in got if decoded(m) in keep)
    md = await t.mark_delete("a")
    assert md is None or tuple(map(int, md.split(":"))) < first_kept

    async def backlog_is(cluster: str, n: int) -> bool:
        r = await get(f"{clusters.url(cluster)}/v1/topics/{t.path}/subscriptions/s/stats")
        return r.status_code == 200 and r.json()["msgBacklog"] == n

    for cluster in ("b", "c"):
        await eventually(lambda c=cluster: backlog_is(c, len(keep)), timeout_s=60,  # type: ignore[misc]
                         what=f"a's acks applied in {cluster}")
    for cluster, ack in (("c", False), ("b", True)):  # the consumer fails over (to c only to look)
        got = await t.consume(cluster, len(sent), ack=ack, until=lambda values: keep <= set(values))
        got += await t.consume(cluster, len(sent), ack=ack, timeout_s=1)  # anything acked would come now
        in_there = [decoded(m) for m in got]
        assert sorted(in_there) == sorted(keep), cluster

    for cluster in ("a", "c"):  # what the consumer acked in b follows it back
        await eventually(lambda c=cluster: backlog_is(c, 0), timeout_s=60,  # type: ignore[misc]
                         what=f"b's acks applied in {cluster}")
    status = await t.status("a")
    assert 1 <= status["ackMarkers"] <= 4, status  # a marker per sync that says something new, not per ack
    # a's acks arrived as acks (b's last four by an update marker or acks: either).
    assert (await t.status("c"))["syncedAcks"] >= len(sent) - len(keep)
    metrics = (await get(f"{clusters['c'].replication.url}/metrics")).text
    found = re.search(r'^pulsar_replicated_subscriptions_synced_acks\{cluster="c"\} (\S+)$', metrics, re.M)
    assert found and float(found.group(1)) >= len(sent) - len(keep)
    # Every controller metric the dashboard's replicated-subscriptions row reads exists.
    board = dashboards.load()["replication.json"]
    names = {re.sub(r"_bucket$", "", n) for _, expr in dashboards.queries(board)
             for n in re.findall(r"pulsar_replicated_subscriptions_\w+", expr)}
    assert len(names) == 4
    for name in names:
        assert f"# HELP {name} " in metrics, name

    # In order now, back in a: acked past the last snapshot's update, then a failover to c.
    more = [f"n{i}" for i in range(20)]
    await t.produce(more)
    for cluster in ("b", "c"):  # there before the acks, so only the acks bring the backlogs down
        assert {decoded(m) for m in await t.consume(cluster, 20, ack=False, sub="probe")} == set(more)
    got = await t.consume("a", 15, ack=False)
    async with httpx.AsyncClient(base_url=clusters.url("a"), timeout=30) as http:
        for i in range(0, 15, 5):
            r = await http.post(f"/v1/topics/{t.path}/subscriptions/s/acks",
                                json={"message_ids": [m["message_id"] for m in got[i:i + 5]]})
            assert r.status_code == 200, r.text
    await eventually(lambda: backlog_is("c", 5), timeout_s=60, what="in-order acks applied in c")
    got = await t.consume("c", 20, ack=False, until=lambda values: len(values) >= 5)
    got += await t.consume("c", 20, ack=False, timeout_s=1)
    assert [decoded(m) for m in got] == more[15:]

    # One message of a batch: acked by its batch index, synced as a bitset.
    async with httpx.AsyncClient(base_url=clusters.url("a"), timeout=30) as http:
        r = await http.post(f"/v1/topics/{t.path}/messages",
                            json={"messages": [{"value": b64(f"p{i}")} for i in range(3)]})
        assert r.status_code == 200, r.text
        assert {decoded(m) for m in await t.consume("c", 3, ack=False, sub="probe")} == {"p0", "p1", "p2"}
        rest = await t.consume("a", 10, ack=False, until=lambda values: "p2" in values)
        ids = {decoded(m): m["message_id"] for m in rest}
        assert ids["p1"].count(":") == 2, ids  # ledger:entry:batch index
        r = await http.post(f"/v1/topics/{t.path}/subscriptions/s/acks",
                            json={"message_ids": [ids[v] for v in (*more[15:], "p1")]})
        assert r.status_code == 200, r.text
    await eventually(lambda: backlog_is("c", 2), timeout_s=60, what="a batch index acked in c")
    got = await t.consume("c", 20, ack=False, until=lambda values: len(values) >= 2)
    got += await t.consume("c", 20, ack=False, timeout_s=1)
    assert [decoded(m) for m in got] == ["p0", "p2"]


async def test_acks_of_a_third_clusters_messages_that_reach_b_late_are_applied_when_they_come(
        clusters: Geo) -> None:
    # c's messages reach a, are consumed and acknowledged there, and only then reach b
    # (c -> b paused meanwhile, longer than a snapshot timeout): b's subscription must
    # skip them when they come, and its mark-delete follow - b has no consumer to move
    # it over the markers between the messages.
    t = Topic(clusters, "t/late", ["a", "b", "c"])
    replication = f"/admin/v2/persistent/{t.path}/replication"

    async def replicators_to_b(running: bool) -> bool:
        body = (await get(f"{clusters['c'].replication.url}/admin/v2/replication/status")).json()
        to_b = [r for r in body["replicators"]
                if r["topic"] == f"persistent://{t.path}" and r["remote"] == "b"]
        return bool(to_b) == running and (not running or all(r["connected"] for r in to_b))

    await eventually(lambda: replicators_to_b(True), timeout_s=60, what="c replicating to b")
    first = [f"a{i}" for i in range(5)]
    await t.produce(first)
    async with httpx.AsyncClient(base_url=clusters.url("c"), timeout=30) as http:
        r = await http.post(replication, json=["a", "c"])  # c -> b paused, c -> a goes on
        assert r.status_code == 200, r.text
    await eventually(lambda: replicators_to_b(False), timeout_s=60, what="c's replicator to b stopped")
    late = [f"c{i}" for i in range(10)]
    await t.produce(late, cluster="c")
    got = await t.consume("a", 15, until=lambda values: set(first + late) <= set(values))  # acked in order
    assert sorted(decoded(m) for m in got) == sorted(first + late)

    async def waiting_in_b() -> bool:
        return int((await t.status("b"))["lateAckMarkers"]) > 0

    await eventually(waiting_in_b, timeout_s=60, what="a's acks marker in b, naming c's messages not there")
    await asyncio.sleep(4)  # longer than the snapshot timeout (3 s), after which a marker used to be dropped
    async with httpx.AsyncClient(base_url=clusters.url("c"), timeout=30) as http:
        r = await http.post(replication, json=["a", "b", "c"])  # c -> b resumes from its cursor
        assert r.status_code == 200, r.text
    probe = await t.consume("b", 15, ack=False, sub="probe", until=lambda values: set(late) <= set(values))
    where_b = {decoded(m): tuple(int(x) for x in m["message_id"].split(":")[:2]) for m in probe}
    assert set(where_b) == set(first + late)

    async def skipped_in_b() -> bool:
        r = await get(f"{clusters.url('b')}/v1/topics/{t.path}/subscriptions/s/stats")
        if r.status_code != 200 or r.json()["msgBacklog"] != 0:
            return False
        md = r.json()["markDeletePositions"][0]
        return md is not None and tuple(int(x) for x in md.split(":")) >= where_b["c9"]

    await eventually(skipped_in_b, timeout_s=60,
                     what="c's late messages acknowledged in b, its mark-delete past them")
    assert (await t.status("b"))["lateAckMarkers"] == 0
    assert await t.consume("b", 15, timeout_s=1) == []  # a failover to b gets none of them again

"""Geo-replication of topics whose partitions are spread over broker replicas (issues 11 and 14).

Clusters ``a`` and ``b`` each run TWO brokers leasing partitions through a real
redis-server over their own Kafka-protocol ledger (tansu), and a replication
controller that knows only the first broker (as a Kubernetes Service gives one).
Every per-partition replication call, in the source and in the target, is served
by the partition's owner (a non-owner answers 307), so each partition's cursor
``pulsar.repl.b`` lives with the partition and moves with it.

* a 4-partition topic split two and two over the brokers of each cluster: every
  message produced in a reaches b exactly once, in order per partition, across
  kill -9 of a's second broker mid-stream (its partitions and their cursors move
  to the first) and its restart (half of them handed back);
* a replicated subscription on such a topic: snapshots complete on every
  partition (each partition's markers written by its owner, in both clusters)
  and the update and acks markers move the subscription in b past everything
  consumed in a.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import kafka_url
from tests.integration.replication.conftest import SNAPSHOTS_ENV, b64
from tests.support.geo import FAST, check_exactly_once_in_order, drain, post_until_stored
from tests.support.services import ServiceProcess
from tests.support.suite import eventually

PARTITIONS = 4


class Clusters:
    """Clusters ``a`` and ``b``: each two brokers leasing partitions (over one Redis, keys per
    cluster) on a Kafka ledger of its own, and a controller knowing only the first broker."""

    def __init__(self, ledger_url: Callable[[], str], redis_url: str, root: Path) -> None:
        logs = root / "logs"
        logs.mkdir()
        common = {"STREAMTX_TEST_LOG_DIR": str(logs), "STREAMTX_ACK_TIMEOUT_MS": "60000",
                  "STREAMTX_REDIS_URL": redis_url, "STREAMTX_LEASE_TTL_MS": "1500"}
        self.brokers: dict[str, list[ServiceProcess]] = {}
        self.controllers: dict[str, ServiceProcess] = {}
        for name in ("a", "b"):
            env = {**common, "STREAMTX_CLUSTER": name, "STREAMTX_LEDGER_URL": ledger_url()}
            brokers = self.brokers[name] = [ServiceProcess("broker", dict(env)) for _ in range(2)]
            for i, p in enumerate(brokers):
                p.env.update({"STREAMTX_ADVERTISED_URL": p.url, "STREAMTX_MEMBER": f"broker{i}"})
            ctl = self.controllers[name] = ServiceProcess("replication", {**env, **FAST, **SNAPSHOTS_ENV})
            for p in [*brokers, ctl]:
                p.env.update({"STREAMTX_BROKER_URL": brokers[0].url, "STREAMTX_REPLICATION_URL": ctl.url})

    @property
    def procs(self) -> list[ServiceProcess]:
        return [*self.brokers["a"], *self.brokers["b"], *self.controllers.values()]

    def url(self, cluster: str) -> str:
        return self.brokers[cluster][0].url

    def start(self) -> Clusters:
        try:
            for p in self.procs:
                p.start(60)
            for name, peer in (("a", "b"), ("b", "a")):
                r = httpx.put(f"{self.url(name)}/admin/v2/clusters/{peer}",
                              json={"service_url": self.url(peer)}, timeout=30)
                assert r.status_code == 200, r.text
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()

    def replicate(self, namespace: str) -> None:
        for name in ("a", "b"):
            r = httpx.post(f"{self.url(name)}/admin/v2/namespaces/{namespace}/replication", json=["a", "b"],
                           timeout=30)
            assert r.status_code == 200, r.text

    async def spread_topic(self, http: httpx.AsyncClient, namespace: str) -> str:
        """A new topic of a, once its partitions are split two and two over a's brokers."""
        topic = f"{namespace}/x{uuid.uuid4().hex[:6]}"
        r = await http.put(f"{self.url('a')}/admin/v2/persistent/{topic}/partitions",
                           json={"partitions": PARTITIONS})
        assert r.status_code == 200, r.text
        await self.split(http, "a", topic)
        return topic

    async def split(self, http: httpx.AsyncClient, cluster: str, topic: str) -> None:
        """Until ``cluster``'s brokers own two partitions of ``topic`` each."""
        urls = {p.url for p in self.brokers[cluster]}

        async def two_and_two() -> bool:
            owners = await self.owners(http, cluster, topic)
            return set(owners) == urls and all(owners.count(u) == PARTITIONS // 2 for u in urls)

        await eventually(two_and_two, timeout_s=30, what=f"{topic}'s partitions over {cluster}'s brokers")

    async def owners(self, http: httpx.AsyncClient, cluster: str, topic: str) -> list[str | None]:
        """Each partition's owner as the cluster's first broker sees it (None while it moves)."""
        out: list[str | None] = []
        for i in range(PARTITIONS):
            r = await http.get(f"{self.url(cluster)}/lookup/v2/topic/persistent/{topic}-partition-{i}")
            out.append(r.json()["httpUrl"] if r.status_code == 200 else None)
        return out


@pytest.fixture(scope="module")
def clusters(kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Clusters]:
    running = Clusters(lambda: kafka_url(kafka_bootstrap), redis_url, tmp_path_factory.mktemp("geo-replicas"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


async def produce(url: str, topic: str, partition: int, requests: range, per_request: int) -> None:
    """Requests ``requests`` (every PARTITIONS-th is this partition's), each by the partition's
    named producer on the partition's own name (a non-owner redirects), retried with its
    sequence until stored: exactly once in a."""
    path = f"/v1/topics/{topic}-partition-{partition}/messages"
    async with httpx.AsyncClient(base_url=url, timeout=10, follow_redirects=True) as http:
        for request in requests:
            if request % PARTITIONS != partition:
                continue
            body = {"producer": {"name": f"p{partition}", "epoch": 1, "sequence": request // PARTITIONS},
                    "messages": [{"value": b64(f"a-{request}-{j}")} for j in range(per_request)]}
            await post_until_stored(http, path, body, f"partition {partition}: produce {request}", 0.1)
            await asyncio.sleep(0.02)  # a stream, not a burst


def stream(url: str, topic: str, requests: range, per_request: int) -> asyncio.Future[list[None]]:
    return asyncio.gather(*(produce(url, topic, p, requests, per_request) for p in range(PARTITIONS)))


async def test_a_spread_topic_replicates_exactly_once_across_kill9_of_a_broker(
        clusters: Clusters, http: httpx.AsyncClient) -> None:
    clusters.replicate("t/geo")
    topic = await clusters.spread_topic(http, "t/geo")
    url, victim = clusters.url("a"), clusters.brokers["a"][1]
    requests, per_request = 240, 3
    third = requests // 3

    async def in_b(n: int) -> bool:
        r = await http.get(f"{clusters.url('b')}/admin/v2/persistent/{topic}/stats")
        return r.status_code == 200 and sum(p["entries"] for p in r.json()["partitions"]) >= n

    await stream(url, topic, range(third), per_request)
    await clusters.split(http, "b", topic)  # created in b by the controller: b's brokers split it too
    second = stream(url, topic, range(third, 2 * third), per_request)
    await eventually(lambda: in_b(third + PARTITIONS), timeout_s=30, what="the second third under way in b")
    victim.kill9()  # mid-stream: its partitions (and their pulsar.repl.b cursors) move to broker 0

    async def moved() -> bool:
        return set(await clusters.owners(http, "a", topic)) == {clusters.url("a")}

    await eventually(moved, timeout_s=30, what="the killed broker's partitions on the other")
    await second
    # The last third while it comes back and half the partitions are handed over to it again.
    await asyncio.gather(stream(url, topic, range(2 * third, requests), per_request),
                         asyncio.to_thread(victim.start, 60))
    got = await drain(clusters.url("b"), topic, "check", requests * per_request, timeout_s=60)
    check_exactly_once_in_order("b", got, ["a"], requests, per_request)
    assert {m["partition"] for m in got} == set(range(PARTITIONS))

    async def both_again() -> bool:
        return set(await clusters.owners(http, "a", topic)) == {p.url for p in clusters.brokers["a"]}

    await eventually(both_again, timeout_s=30, what="the restarted broker owning partitions again")
    # Topic stats fan out over the owners, each partition's replication row from its owner.
    async def caught_up() -> bool:
        r = await http.get(f"{clusters.url('a')}/admin/v2/persistent/{topic}/stats")
        if r.status_code == 503:  # a partition moving
            return False
        assert r.status_code == 200, r.text
        row = r.json()["replication"].get("b")
        return row is not None and row["replicationBacklog"] == 0 and row["connected"]

    await eventually(caught_up, timeout_s=30, what="a's stats: nothing left for b, every partition connected")


async def test_a_replicated_subscription_on_a_spread_topic_moves_in_the_other_cluster(
        clusters: Clusters, http: httpx.AsyncClient) -> None:
    for p in clusters.procs:
        if p.proc is None or p.proc.poll() is not None:
            p.start(60)  # an earlier test that failed mid-crash
    clusters.replicate("t/geosub")
    topic = await clusters.spread_topic(http, "t/geosub")
    base = f"{clusters.url('a')}/v1/topics/{topic}/subscriptions/s"
    r = await http.put(base, json={"initial_position": "earliest", "replicated": True})
    assert r.status_code == 200 and r.json()["replicated"] is True, r.text
    sent = 40
    async with httpx.AsyncClient(base_url=clusters.url("a"), timeout=10, follow_redirects=True) as a:
        for i in range(sent):  # retried while a partition moves (the rebalance after a restart)
            await post_until_stored(a, f"/v1/topics/{topic}-partition-{i % PARTITIONS}/messages", {
                "producer": {"name": "p", "epoch": 1, "sequence": i // PARTITIONS},
                "messages": [{"value": b64(f"m{i}")}]}, f"produce m{i}", 0.1)
    await clusters.split(http, "b", topic)
    consumed: set[str] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while len(consumed) < sent and loop.time() < deadline:  # on the topic's name: fanned out
        r = await http.get(f"{base}/messages", params={"max": 100, "wait_ms": 300, "consumer": "c"})
        if r.status_code == 503:  # a partition moving: its messages come again from its new owner
            await asyncio.sleep(0.1)
            continue
        assert r.status_code == 200, r.text
        msgs = r.json()["messages"]
        if msgs:
            r = await http.post(f"{base}/acks", json={"message_ids": [m["message_id"] for m in msgs]})
            if r.status_code == 503:
                continue
            assert r.status_code == 200, r.text
            consumed |= {m["value"] for m in msgs}
    assert consumed == {b64(f"m{i}") for i in range(sent)}

    async def snapshots_everywhere() -> bool:
        body = (await http.get(f"{clusters.controllers['a'].url}/admin/v2/replication/status")).json()
        mine = {s["partition"]: s for s in body["replicatedSubscriptions"] if s["topic"] == f"persistent://{topic}"}
        return len(mine) == PARTITIONS and all(s["completedSnapshots"] >= 1 for s in mine.values())

    await eventually(snapshots_everywhere, timeout_s=60, what="a snapshot completed on every partition")

    async def moved_in_b() -> bool:
        r = await http.get(f"{clusters.url('b')}/v1/topics/{topic}/subscriptions/s/stats")
        if r.status_code != 200:
            return False  # not created in b yet: the first update marker creates it
        body = r.json()
        return body["msgBacklog"] == 0 and None not in body["markDeletePositions"]

    # Nothing was consumed in b: only the update (and acks) markers can empty its backlog there.
    await eventually(moved_in_b, timeout_s=60, what="s in b past all consumed in a, on every partition")

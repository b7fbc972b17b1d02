"""Coordinator replicas over Redis leases and the Kafka backend, all as real processes.

Three coordinators share six coordinator ids through leases in a real
redis-server; the broker and the pending-ack store are single; every ledger is
on the tansu Kafka-protocol broker. Clients reach any replica and are
redirected to the owner. The failures: kill -9 an owner (its ids move within
the lease time, its transactions finish on the new owner) and SIGSTOP an owner
past its lease (on SIGCONT none of its appends lands: the new owner's fence).
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import httpx
import pytest

from streamtx.client import StreamtxClient
from streamtx.transport.redirect import send_to_owner
from tests.conftest import kafka_url
from tests.support.replicas import COORDINATOR_IDS, Replicas, lookup
from tests.support.suite import eventually, until_served

ids = COORDINATOR_IDS
ttl_ms = 1500


@pytest.fixture(scope="module")
def replicas(kafka_bootstrap: str, redis_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with Replicas(kafka_url(kafka_bootstrap), redis_url, tmp_path_factory.mktemp("replicas"),
                  ttl_ms=ttl_ms) as r:
        yield r


async def owners(http: httpx.AsyncClient, via: str) -> dict[int, str | None]:
    return {cid: await lookup(http, via, f"coordinator/{cid}") for cid in ids}


def coordinator_of(txn: str) -> int:
    return int(txn.split(":")[0]) >> 48


async def open_txn(http: httpx.AsyncClient, tc: str, topic: str) -> str:
    """A transaction created on ``tc`` that produced one message to ``topic``."""
    txn = (await http.post(f"{tc}/v1/transactions", json={"timeout_ms": 120_000})).json()["txn_id"]
    r = await send_to_owner(http, "POST", f"{tc}/v1/transactions/{txn}/partitions",
                            json={"partitions": [f"{topic}-partition-0"]})
    assert r.status_code == 200, r.text
    return str(txn)


async def test_ids_spread_evenly_and_any_replica_redirects_to_the_owner(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls = [tc.url for tc in replicas.tcs]
    await eventually(lambda: _spread(http, urls), what="six ids spread two by two over three replicas")
    # Every replica comes to answer the same owners (each refreshes its map every
    # lease third); a request to a non-owner is a 307 to the owner.
    async def agreed() -> bool:
        views = [await owners(http, u) for u in urls]
        return all(v == views[0] for v in views)

    await eventually(agreed, what="every replica to know every owner")
    seen = await owners(http, urls[0])
    async with StreamtxClient(urls[0]) as client:
        txn = await client.new_transaction(timeout_ms=60_000)
        cid = coordinator_of(txn.txn_id)
        other = next(u for u in urls if u != seen[cid])
        r = await http.get(f"{other}/v1/transactions/{txn.txn_id}")
        assert r.status_code == 307 and r.headers["location"] == f"{seen[cid]}/v1/transactions/{txn.txn_id}"
        assert r.json()["owner"] == seen[cid]
        await txn.abort()


async def _spread(http: httpx.AsyncClient, urls: list[str]) -> bool:
    placed = await owners(http, urls[0])
    counts = [list(placed.values()).count(u) for u in urls]
    return counts == [2, 2, 2]


async def test_a_killed_owners_ids_move_and_its_transactions_finish_on_the_new_owner(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    victim = replicas.tcs[1]
    survivors = [tc.url for tc in replicas.tcs if tc is not victim]
    topic = f"persistent://t/n/kill-{uuid.uuid4().hex[:6]}"
    async with StreamtxClient(survivors[0]) as client:
        await client.create_topic(topic, 1)
    txn = await open_txn(http, victim.url, topic)
    r = await http.post(f"{replicas.broker.url}/v1/topics/{topic.removeprefix('persistent://')}"
                        "/messages", json={"messages": [{"value": "aGk=", "partition": 0}], "txn_id": txn})
    assert r.status_code == 200, r.text
    victim.kill9()
    cid = coordinator_of(txn)

    async def moved() -> bool:
        return (await owners(http, survivors[0]))[cid] in survivors

    await eventually(moved, timeout_s=20, what=f"coordinator {cid} to move off the killed replica")
    # The new owner of a moved id answers 503 not_owner while its log replays (the owner map
    # names it first), which clients wait out.
    r = await until_served(http, "POST", f"{survivors[0]}/v1/transactions/{txn}/commit",
                           timeout_s=20, send=send_to_owner)
    assert r.status_code == 200, r.text
    r = await until_served(http, "GET", f"{survivors[1]}/v1/transactions/{txn}",
                           timeout_s=20, send=send_to_owner)
    assert r.json()["state"] == "COMMITTED"
    victim.start()  # it rejoins and gets its share back by handover
    await eventually(lambda: _spread(http, [tc.url for tc in replicas.tcs]), timeout_s=20,
                     what="the restarted replica to get its share back")


async def test_an_owner_paused_past_its_lease_lands_no_append_after_it_wakes(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    urls = [tc.url for tc in replicas.tcs]
    await eventually(lambda: _spread(http, urls), timeout_s=20, what="an even spread first")
    zombie = replicas.tcs[2]
    others = [u for u in urls if u != zombie.url]
    topic = f"persistent://t/n/pause-{uuid.uuid4().hex[:6]}"
    async with StreamtxClient(others[0]) as client:
        await client.create_topic(topic, 1)
    txn = await open_txn(http, zombie.url, topic)
    cid = coordinator_of(txn)
    assert zombie.proc is not None
    zombie.proc.send_signal(signal.SIGSTOP)
    try:
        async def moved() -> bool:
            return (await owners(http, others[0]))[cid] in others

        await eventually(moved, timeout_s=20, what=f"coordinator {cid} to move off the paused replica")
        r = await until_served(http, "POST", f"{others[0]}/v1/transactions/{txn}/abort",
                               timeout_s=20, send=send_to_owner)
        assert r.status_code == 200, r.text
    finally:
        zombie.proc.send_signal(signal.SIGCONT)
    # The woken replica is asked to commit directly (no redirect followed): whatever it
    # answers, it must not be a commit; the owner's log says ABORTED.
    r = await http.post(f"{zombie.url}/v1/transactions/{txn}/commit")
    assert r.status_code != 200 or r.json().get("state") != "COMMITTED", r.text
    r = await until_served(http, "GET", f"{others[1]}/v1/transactions/{txn}",
                           timeout_s=20, send=send_to_owner)
    assert r.json()["state"] == "ABORTED", r.text

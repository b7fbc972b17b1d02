"""Pending-ack replicas over Redis leases and the Kafka backend, all as real processes.

Two pending-ack stores share the subscription slots through leases in a real
redis-server; one broker, one coordinator (leased too); every ledger on the
tansu Kafka-protocol broker. The broker and the coordinator know only the first
store's URL and are redirected to the owner of each subscription. The
failures: kill -9 the other store during a transactional workload (its
subscriptions move within the lease time, the decided transactions finish, no
message is committed twice or lost) and SIGSTOP it past its lease (on SIGCONT
none of its appends lands: the new owner fenced every log of the slot).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import Iterator

import httpx
import pytest

from streamtx.batching.codec import decode_entry
from streamtx.client import AdminClient, Consumer, Message, StreamtxClient, Transaction
from streamtx.errors import StreamtxError
from streamtx.ledger import open_ledger_factory
from streamtx.pendingack.store import log_name
from streamtx.records.pendingack import PendingAck, decode
from tests.conftest import kafka_url
from tests.support.replicas import Replicas, lookup
from tests.support.suite import eventually

log = logging.getLogger(__name__)

messages = 12  # per subscription


@pytest.fixture(scope="module")
def replicas(kafka_bootstrap: str, redis_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with Replicas(kafka_url(kafka_bootstrap), redis_url, tmp_path_factory.mktemp("pa-replicas"),
                 coordinators=1, pendingacks=2,
                 env={"STREAMTX_FANOUT_MAX_BACKOFF_MS": "300", "STREAMTX_ACK_TIMEOUT_MS": "60000"}) as r:
        yield r


def sub_path(topic: str, subscription: str) -> str:
    return f"subscription/{topic.replace('://', '/')}/{subscription}"


async def spread(http: httpx.AsyncClient, r: Replicas, topic: str, per_store: int) -> dict[str, list[str]]:
    """Subscriptions of ``topic``, ``per_store`` owned by each store (once both own a share)."""
    urls = [p.url for p in r.pendingacks]
    out: dict[str, list[str]] = {u: [] for u in urls}

    async def both_own() -> bool:
        views = [await lookup(http, urls[0], sub_path(topic, f"probe{i}")) for i in range(24)]
        return all(u in views for u in urls)

    await eventually(both_own, timeout_s=20, what="both stores to own slots")
    i = 0
    while any(len(v) < per_store for v in out.values()):
        name = f"s{i}"
        owner = await lookup(http, urls[0], sub_path(topic, name))
        if owner in out and len(out[owner]) < per_store:
            out[owner].append(name)
        i += 1
    return out


async def consume_transactionally(client: StreamtxClient, topic: str, subscription: str,
                                  committed: list[str], stop: asyncio.Event) -> None:
    """Take messages a few at a time, ack them in a transaction, commit; on a failure abort and go
    on (the messages come back). ``committed``: ids of committed transactions' acks. Every failure
    is logged: a stalled subscription says why."""
    consumer = await client.consumer(topic, subscription, initial_position="earliest")
    while len(committed) < messages and not stop.is_set():
        try:
            got = await consumer.receive(max=3, wait_ms=300)
        except (StreamtxError, httpx.HTTPError) as exc:
            log.warning("%s: receive failed: %r", subscription, exc)
            await asyncio.sleep(0.2)
            continue
        if not got:
            continue
        ids = [m.message_id for m in got]
        txn: Transaction | None = None
        try:
            txn = await client.new_transaction(timeout_ms=30_000)
            await consumer.ack(got, txn)
            await txn.commit()
        except (StreamtxError, httpx.HTTPError) as exc:
            log.warning("%s: acking %s in %s failed: %r", subscription, ids, txn and txn.txn_id, exc)
            await _undo(consumer, got, txn)
            continue
        committed.extend(ids)


async def _undo(consumer: Consumer, got: list[Message], txn: Transaction | None) -> None:
    if txn is not None:
        try:
            await txn.abort()
        except (StreamtxError, httpx.HTTPError) as exc:  # the coordinator times it out
            log.warning("%s: aborting %s failed: %r", consumer.subscription, txn.txn_id, exc)
    try:
        await consumer.nack(got)
    except (StreamtxError, httpx.HTTPError) as exc:  # redelivered when the transaction ends
        log.warning("%s: nack failed: %r", consumer.subscription, exc)


async def test_a_killed_stores_subscriptions_move_and_the_workload_loses_and_repeats_nothing(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    victim, survivor = replicas.pendingacks[1], replicas.pendingacks[0]
    topic = f"persistent://t/n/pa-kill-{uuid.uuid4().hex[:6]}"
    async with StreamtxClient(replicas.tcs[0].url) as client:
        await client.create_topic(topic, 1)
        subs = await spread(http, replicas, topic, per_store=2)
        names = [s for v in subs.values() for s in v]
        for name in names:
            await client.consumer(topic, name, initial_position="earliest")
        producer = await client.producer(topic)
        for i in range(messages):
            await producer.send(f"m{i}".encode())
        committed: dict[str, list[str]] = {name: [] for name in names}
        stop = asyncio.Event()
        workers = [asyncio.create_task(consume_transactionally(client, topic, n, committed[n], stop))
                   for n in names]
        try:
            await eventually(lambda: _at_least(committed, 3, workers), timeout_s=120,
                             what="a few commits on each")
            victim.kill9()

            async def moved() -> bool:
                owners = [await lookup(http, survivor.url, sub_path(topic, n)) for n in subs[victim.url]]
                return owners == [survivor.url] * len(owners)

            await eventually(moved, timeout_s=20, what="the killed store's subscriptions to move")
            await eventually(lambda: _at_least(committed, messages, workers), timeout_s=180,
                             what="every message committed on every subscription")
        finally:
            stop.set()
            await asyncio.gather(*workers, return_exceptions=True)
        for name, ids in committed.items():
            assert len(ids) == len(set(ids)) == messages, (name, ids)
        admin = AdminClient(client)

        async def all_ended() -> bool:  # the decided transactions finished on the new owner too
            sizes = [(await admin.pending_ack_stats(topic, n))["ongoingTxnSize"] for n in names]
            return sizes == [0] * len(names)

        await eventually(all_ended, timeout_s=30, what="no transaction left open on any subscription")
    victim.start()  # it rejoins and gets its share back by handover
    await eventually(lambda: spread_back(http, replicas), timeout_s=20, what="the store to rejoin")


async def _at_least(committed: dict[str, list[str]], n: int, workers: list[asyncio.Task[None]]) -> bool:
    for worker in workers:  # one that died would stall its subscription without a word
        if worker.done() and worker.exception() is not None:
            raise AssertionError(f"a consumer died: {worker.exception()!r}")
    return all(len(v) >= n for v in committed.values())


async def spread_back(http: httpx.AsyncClient, r: Replicas) -> bool:
    views = [await lookup(http, r.pendingacks[0].url, f"subscription/persistent/t/n/x/probe{i}")
             for i in range(24)]
    return r.pendingacks[1].url in views


async def test_a_store_paused_past_its_lease_lands_no_append_after_it_wakes(
        replicas: Replicas, http: httpx.AsyncClient) -> None:
    zombie, owner = replicas.pendingacks[1], replicas.pendingacks[0]
    # Its writes wait a second in the batch buffer: the zombie's append is underway when it is
    # paused, and its flush timer is overdue when it wakes (the ledger's fence must refuse it;
    # if the zombie notices its lost lease first, closing the store drops the write instead).
    zombie.stop()
    zombie.env.update({"STREAMTX_BATCHING__POLICY": "fixed", "STREAMTX_BATCHING__MAX_DELAY_MS": "1000"})
    zombie.start()
    topic = f"persistent://t/n/pa-pause-{uuid.uuid4().hex[:6]}"
    name = (await spread(http, replicas, topic, per_store=1))[zombie.url][0]
    stats = f"{zombie.url}/admin/v3/transactions/pendingAckStats/{topic.removeprefix('persistent://')}/{name}"
    async with StreamtxClient(replicas.tcs[0].url) as client:
        txn = await client.new_transaction(timeout_ms=60_000)
        await txn.add_subscription(topic, name)  # the store takes acks of registered subscriptions only
        # A durable ack on the zombie first: the log it owns has a writer's history.
        r = await http.post(f"{zombie.url}/v1/pendingack/acks", json={
            "topic": topic, "subscription": name, "txn_id": txn.txn_id, "message_ids": ["1:0"]})
        assert r.status_code == 200, r.text
        late = await client.new_transaction(timeout_ms=60_000)
        await late.add_subscription(topic, name)
        ack = asyncio.create_task(http.post(f"{zombie.url}/v1/pendingack/acks", timeout=60, json={
            "topic": topic, "subscription": name, "txn_id": late.txn_id, "message_ids": ["1:1"]}))

        async def buffered() -> bool:  # held in memory, its record in the writer's buffer
            return int((await http.get(stats)).json()["heldMessageCount"]) == 2

        await eventually(buffered, what="the late ack to wait in the zombie's batch buffer")
        assert zombie.proc is not None
        zombie.proc.send_signal(signal.SIGSTOP)
        paused = asyncio.get_running_loop().time()
        try:

            async def moved() -> bool:
                return await lookup(http, owner.url, sub_path(topic, name)) == owner.url

            await eventually(moved, timeout_s=20, what="the paused store's subscription to move")
            await txn.abort()  # ended on the new owner, which replayed the zombie's ack
            # Not a timed assertion: the zombie's flush must be due when it wakes.
            await asyncio.sleep(max(0.0, paused + 1.2 - asyncio.get_running_loop().time()))
        finally:
            zombie.proc.send_signal(signal.SIGCONT)
        answer = await ack
        assert answer.status_code != 200, answer.text
    # What the log holds (read as the ledger layer hands it to any reader): no ack of ``late``.
    ledgers = open_ledger_factory(replicas.ledger_url)
    try:
        ledger = await ledgers.open(log_name(topic, name), writer=False)
        await ledger.refresh()
        records = [decode(raw) for e in await ledger.read(None, 10_000) for raw in decode_entry(e.data)]
        await ledger.close()
    finally:
        await ledgers.close()
    acked = {str(rec.txn) for rec in records if isinstance(rec, PendingAck)}
    assert txn.txn_id in acked and late.txn_id not in acked, records

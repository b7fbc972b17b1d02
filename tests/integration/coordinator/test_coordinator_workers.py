"""Coordinator workers on one port with the Redis batch buffer: the failures particular to them.

Real processes: a supervisor with 4 workers (``STREAMTX_WORKERS=4``), a real
redis-server, the test participant. Each request goes on a new connection, so the
kernel hands it to any worker and most per-transaction calls travel through the
owner's mailbox. (The API answering the same with 4 workers as with one:
test_coordinator_api.py, parametrised.)
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcClient, TcFactory, lease_holders
from tests.integration.coordinator.participant import Participant
from tests.support.procs import free_port, redis_server
from tests.support.services import ServiceProcess
from tests.support.suite import eventually, until_served

pytestmark = pytest.mark.parametrize("tc_workers", [4], indirect=True)

P0 = f"{TOPIC}-partition-0"


def workers_of(proc: ServiceProcess) -> list[int]:
    children = proc.children()
    assert len(children) == 4, children
    return children


def live_members(proc: ServiceProcess) -> set[str]:
    env = proc.env
    with redis.Redis.from_url(env["STREAMTX_REDIS_URL"], decode_responses=True) as r:
        key = f"streamtx:{env['STREAMTX_CLUSTER']}:coordinator:members"
        return set(r.zrangebyscore(key, int(time.time() * 1000), "+inf"))


def mailbox_backlog(proc: ServiceProcess) -> dict[int, tuple[int, int]]:
    """Coordinator id -> (entries in its mailbox stream, entries read and not acknowledged)."""
    env = proc.env
    out = {}
    with redis.Redis.from_url(env["STREAMTX_REDIS_URL"]) as r:
        for cid in lease_holders(proc):
            key = f"streamtx:{env['STREAMTX_CLUSTER']}:coordinator:mailbox:{cid}"
            pending = r.xpending(key, "owner")["pending"] if r.exists(key) else 0
            out[cid] = (r.xlen(key), pending)
    return out


async def test_a_killed_worker_loses_no_acknowledged_transaction_and_ends_none_twice(
        file_url: str, tc_factory: TcFactory, client_factory: ClientFactory,
        participant: Participant) -> None:
    proc = tc_factory(file_url)
    tc = client_factory(proc)
    before = lease_holders(proc)
    acknowledged: dict[str, str] = {}
    stopping = asyncio.Event()
    turn = itertools.count()

    async def writer() -> None:
        while not stopping.is_set():
            # Each call is repeated while the answer is 'retry': 503, or the connection of a
            # killed worker (for up to 60 s, past every wait of this test).
            r = await until_served(tc.http, "POST", "/v1/transactions", timeout_s=60, connection_errors=True)
            assert r.status_code == 200, r.text
            txn = r.json()["txn_id"]
            r = await until_served(tc.http, "POST", f"/v1/transactions/{txn}/partitions",
                                   timeout_s=60, connection_errors=True, json={"partitions": [P0]})
            assert r.status_code == 200, r.text
            action = "commit" if next(turn) % 2 else "abort"
            r = await until_served(tc.http, "POST", f"/v1/transactions/{txn}/{action}",
                                   timeout_s=60, connection_errors=True)
            assert r.status_code == 200, r.text
            acknowledged[txn] = r.json()["state"]

    writers = [asyncio.create_task(writer()) for _ in range(12)]
    try:
        await eventually(lambda: _more_than(acknowledged, 30), timeout_s=30, what="a workload under way")
        os.kill(workers_of(proc)[1], signal.SIGKILL)
        killed_at = len(acknowledged)

        async def moved() -> bool:
            # One member is gone (its heartbeat expired) and every id is leased to a live
            # worker: its siblings, or the worker the supervisor started in its place.
            holders, live = lease_holders(proc), live_members(proc)
            return (len(set(before.values()) - live) == 1 and None not in holders.values()
                    and set(holders.values()) <= live and len(live) == 4)

        await eventually(moved, timeout_s=30, what="the killed worker's ids to move to live workers")
        await eventually(lambda: _more_than(acknowledged, killed_at + 30), timeout_s=30,
                         what="the workload to go on after the takeover")
        stopping.set()
        await asyncio.gather(*writers)
    finally:
        for w in writers:
            w.cancel()

    assert participant.violations == []
    for txn, state in acknowledged.items():
        r = await until_served(tc.http, "GET", f"/v1/transactions/{txn}",
                               timeout_s=60, connection_errors=True)
        body = r.json()
        assert body["state"] == state, (txn, body)
        action = "commit" if state == "COMMITTED" else "abort"
        assert participant.actions(txn) == {("partition", P0): action}, txn
    # Every request posted to a mailbox was answered and left it, the dead owner's too.
    await eventually(lambda: _drained(proc), what="every mailbox empty, nothing pending")
    assert proc.proc is not None
    proc.stop()
    assert proc.proc.returncode == 0, proc.log_tail()


async def _more_than(acknowledged: dict[str, str], n: int) -> bool:
    return len(acknowledged) > n


async def _drained(proc: ServiceProcess) -> bool:
    return all(v == (0, 0) for v in mailbox_backlog(proc).values())


async def log_entries(tc: TcClient, cid: int) -> int:
    stats = await tc.admin(f"coordinatorInternalStats/{cid}")
    return sum(s["entries"] for s in stats["transactionLogStats"]["ledgers"])


async def test_redis_down_is_503_and_the_workers_recover_when_it_returns(
        file_url: str, tc_factory: TcFactory, client_factory: ClientFactory) -> None:
    port = free_port()
    server = redis_server(port)
    server.__enter__()
    try:
        proc = tc_factory(file_url, redis_url=f"redis://127.0.0.1:{port}/0")
        tc = client_factory(proc)
        txns = [await tc.create() for _ in range(8)]
        for txn in txns:
            await tc.add_partitions(txn, [P0])
        assert {t: (await tc.abort(t))["state"] for t in txns} == dict.fromkeys(txns, "ABORTED")

        # Forty concurrent calls for forty transactions of one coordinator id (created on one
        # connection, so by one worker on its id), most through the owner's mailbox: their
        # records reach the log in batched entries, not one entry each. (Calls for one
        # transaction are ordered by its lock: they could not share an entry.)
        async with httpx.AsyncClient(base_url=proc.url) as one_worker:
            batch = [(await one_worker.post("/v1/transactions", json={})).json()["txn_id"] for _ in range(40)]
        cid = int(batch[0].split(":")[0]) >> 48
        assert {int(t.split(":")[0]) >> 48 for t in batch} == {cid}
        before = await log_entries(tc, cid)
        await asyncio.gather(*(tc.add_partitions(t, [P0]) for t in batch))
        assert await log_entries(tc, cid) - before < 40 / 2
    finally:
        server.__exit__(None, None, None)

    # Redis gone: a call that lands on a sibling of the owner cannot be forwarded (503); one
    # that lands on the owner is served there. Never another answer, never a lost state.
    statuses = []
    for txn in txns * 2:
        r = await tc.http.get(f"/v1/transactions/{txn}")
        statuses.append(r.status_code)
        assert r.status_code in (200, 503), r.text
        if r.status_code == 200:
            assert r.json()["state"] == "ABORTED"
        else:
            assert r.json()["error"] == "unavailable"
    assert 503 in statuses

    with redis_server(port):  # back, empty: the workers lease their ids again and recreate the mailboxes
        async def all_served() -> bool:
            for txn in txns:
                r = await tc.http.get(f"/v1/transactions/{txn}")
                if r.status_code != 200 or r.json()["state"] != "ABORTED":
                    return False
            return True

        await eventually(all_served, timeout_s=30, what="every transaction answered again through Redis")
        r = await until_served(tc.http, "POST", "/v1/transactions", timeout_s=60, connection_errors=True)
        txn = r.json()["txn_id"]
        r = await until_served(tc.http, "POST", f"/v1/transactions/{txn}/partitions",
                               timeout_s=60, connection_errors=True, json={"partitions": [P0]})
        assert r.status_code == 200, r.text
        r = await until_served(tc.http, "POST", f"/v1/transactions/{txn}/commit",
                               timeout_s=60, connection_errors=True)
        assert r.json()["state"] == "COMMITTED", r.text
        proc.stop()


async def test_a_scrape_of_any_worker_counts_the_whole_port(
        file_url: str, tc_factory: TcFactory, client_factory: ClientFactory) -> None:
    # Two ids over four workers: two of them own no coordinator, and answer for the port all the same.
    proc = tc_factory(file_url, coordinator_ids="0,1")
    tc = client_factory(proc)  # a new connection per request: the kernel picks the worker
    txns = [await tc.create() for _ in range(24)]
    for txn in txns:
        await tc.abort(txn)

    async def scraped() -> dict[str, float]:
        r = await tc.http.get("/metrics")
        assert r.status_code == 200, r.text
        families = list(text_string_to_metric_families(r.text))
        names = [f.name for f in families]
        assert len(names) == len(set(names)), "a metric family twice"
        return {f"{f.name}/{s.name}": sum(x.value for x in f.samples if x.name == s.name)
                for f in families for s in f.samples}

    for _ in range(16):  # each scrape lands on any of the 4 workers, and answers for all of them
        totals = await scraped()
        assert totals["pulsar_txn_created/pulsar_txn_created_total"] == 24, totals
        assert totals["pulsar_txn_created_count/pulsar_txn_created_count"] == 24
        assert totals["pulsar_txn_aborted/pulsar_txn_aborted_total"] == 24
        assert totals["streamtx_service_ready/streamtx_service_ready"] == 1

    async def settled() -> bool:  # a sibling's gauges reach its file every second
        return (await scraped())["pulsar_txn_active_count/pulsar_txn_active_count"] == 0

    await eventually(settled, what="no active transaction on any worker")

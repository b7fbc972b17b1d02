"""The Spark jobs read what the services themselves write, with auth on and off (issue 22 item 7).

The whole suite runs as real processes on file ledgers (auth on: JWTs, so
every NEW record carries its opener's subject, as in the compose file and the
chart); a transaction commits, one aborts, one stays open, with produces and
acks inside them. Then the histograms and compaction jobs read every ledger
the services wrote: transaction log, pending-ack log, partitions, the
transaction-buffer snapshots. The histograms job crashed on the logs written
with auth on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.suite import Suite, receive

from streamtx.auth import issue
from streamtx.client import StreamtxClient
from streamtx.jobs import compact, histograms
from streamtx.jobs.sources import PARTITION, PENDINGACK, SNAPSHOT, TXNLOG, find_ledgers

SECRET = "spark-secret-spark-secret-spark-0123"
AUTH = {
    "STREAMTX_AUTH_JWT_SECRET": SECRET,
    "STREAMTX_SERVICE_TOKEN": issue(SECRET, subject="svc", roles=["service"]),
}


async def _traffic(url: str, token: str | None) -> None:
    src, out = "persistent://a/n/in", "persistent://a/n/out"
    admin_token = issue(SECRET, subject="ops", roles=["admin"]) if token else None
    async with StreamtxClient(url, token=admin_token) as admin:
        await admin.create_topic(src, 1)
        await admin.create_topic(out, 1)
    async with StreamtxClient(url, token=token) as client:
        feed = await client.producer(src, name="feed")
        for i in range(3):
            await feed.send(f"m{i}".encode())
        consumer = await client.consumer(src, "work", "earliest", "Shared")
        got = await receive(consumer, 3)
        assert len(got) == 3
        sink = await client.producer(out, name="sink")
        async with client.transaction(timeout_ms=60_000) as txn:  # commits
            await sink.send(b"one", txn=txn)
            await consumer.ack(got[:1], txn=txn)
        aborted = await client.new_transaction(timeout_ms=60_000)
        await sink.send(b"two", txn=aborted)
        await consumer.ack(got[1:2], txn=aborted)
        await aborted.abort()
        still_open = await client.new_transaction(timeout_ms=600_000)
        await sink.send(b"three", txn=still_open)


@pytest.fixture(scope="module", params=["auth-off", "auth-on"])
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp(request.param)
    auth = request.param == "auth-on"
    env = {**(AUTH if auth else {}), "STREAMTX_SNAPSHOT_EVERY_OPS": "1"}
    url = f"file://{tmp / 'ledgers'}"
    with Suite(url, tmp, env=env) as suite:
        token = issue(SECRET, subject="app-a", roles=["client"], tenants=["a"]) if auth else None
        asyncio.run(_traffic(suite.url, token))
    return url


def test_the_jobs_read_every_ledger_the_services_wrote(spark: Any, written: str) -> None:
    kinds = {ref.kind for ref in find_ledgers(written)}
    assert {TXNLOG, PENDINGACK, PARTITION, SNAPSHOT} <= kinds, kinds

    res = histograms.compute(spark, written)
    states = {dict(labels)["state"]: n for labels, n in res.gauges["txns"].items()}
    assert states == {"COMMITTED": 1, "ABORTED": 1, "OPEN": 1}, states
    msgs = {dict(labels)["topic"]: n for labels, n in res.gauges["partition_messages"].items()}
    assert sum(msgs.values()) == 6, msgs  # 3 plain, 3 in transactions (aborted ones were written too)
    assert set(msgs) == {"persistent://a/n/in", "persistent://a/n/out"}, msgs
    acked = {dict(labels)["topic"] for labels in res.histograms["pending_ack_log_records_per_entry"]}
    assert acked == {"persistent://a/n/in"}, acked  # the same label as the messages' (item 9)

    reports = compact.run(spark, written, commit=False)
    assert {r.kind for r in reports} >= {TXNLOG, PENDINGACK, SNAPSHOT}, reports

"""The Grafana dashboards: lint, then every panel's query against a real Prometheus.

The test that matters starts the suite and Debian's Prometheus with the repo's
scrape config (deploy/prometheus/prometheus.yml, only the targets' addresses
replaced) and alert rules, and beside the suite a coordinator of two worker
processes over Redis (STREAMTX_WORKERS: the mailbox panels), runs a
transactional workload on both, and evaluates every
query of every panel over the run through Prometheus's HTTP API: each must
parse and return data. Variables are expanded as Grafana would with "All".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from streamtx.client import StreamtxClient
from streamtx.errors import ConflictError
from tests.deploy import dashboards
from tests.support.procs import redis_server
from tests.support.prometheus import Prometheus, prometheus_server
from tests.support.services import ServiceProcess
from tests.support.suite import ORDER, Suite, eventually, receive

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "charts" / "streamtx" / "files" / "prometheus" / "alerts.yml"
EXPECTED = {"overview.json", "transactions.json", "batched-log.json", "transaction-buffer.json",
            "pending-acks.json", "replication.json", "spark-jobs.json"}
#: Needs two clusters to have data: checked by tests/integration/replication instead.
GEO = {"replication.json"}
#: Fed by a Spark job through the Pushgateway: every query and variable checked against a
#: real Prometheus by tests/spark/test_dashboard.py (it reuses the run's Spark session).
SPARK = {"spark-jobs.json"}


# --- lint ---------------------------------------------------------------------


def test_the_dashboards_are_there() -> None:
    assert EXPECTED <= set(dashboards.load())


@pytest.mark.parametrize("name", sorted(dashboards.load()))
def test_dashboard_lint(name: str) -> None:
    board = dashboards.load()[name]
    assert board["uid"].startswith("streamtx-") and board["title"].startswith("streamtx / ")
    ids = [p["id"] for p in dashboards.panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "cluster" in variables
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    for panel in dashboards.panels(board):
        if panel["type"] == "row":
            continue
        where = f"{name}: {panel['title']}"
        assert panel["datasource"] == datasource, where
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
        assert panel.get("description"), f"{where}: no description"
        assert panel["targets"], where
        for target in panel["targets"]:
            assert target["datasource"] == datasource and target["expr"].strip(), where
            used = {m for m in ("$cluster", "$coordinator", "$topic") if m in target["expr"]}
            assert used <= {f"${v}" for v in variables}, f"{where}: undefined variable"
        assert panel["gridPos"]["w"] <= 24, where
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == datasource, var["name"]


@pytest.mark.parametrize("name", sorted(dashboards.load()))
def test_grafana_models_decode_the_dashboard(name: str) -> None:
    """Decoded with the Grafana Foundation SDK's Dashboard model and encoded again,
    every panel keeps its id, type, unit, data source and queries."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    board = dashboards.load()[name]
    again = json.loads(JSONEncoder().encode(Dashboard.from_json(board)))
    assert again["uid"] == board["uid"] and again["title"] == board["title"]

    def essentials(b: dict[str, Any]) -> list[Any]:
        return [(p["id"], p["type"], p.get("fieldConfig", {}).get("defaults", {}).get("unit"),
                 p.get("datasource"), [(t["refId"], t["expr"]) for t in p.get("targets", [])])
                for p in dashboards.panels(b)]

    assert essentials(again) == essentials(board)
    names = [v["name"] for v in board["templating"]["list"]]
    assert [v["name"] for v in again["templating"]["list"]] == names


def test_dashboard_uids_are_unique() -> None:
    uids = [b["uid"] for b in dashboards.load().values()]
    assert len(uids) == len(set(uids))


# --- against a real Prometheus ------------------------------------------------

SCRAPE_S = 1


def scrape_config(suite: Suite, workers: ServiceProcess) -> dict[str, Any]:
    """The repo's scrape config with the suite's addresses (and the workers' coordinator
    beside the suite's) and this test's pace."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"}
    config["rule_files"] = [str(ALERTS)]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "streamtx"]
    assert {s["labels"]["service"] for s in job["static_configs"]} == set(suite.procs)
    for static in job["static_configs"]:
        service = static["labels"]["service"]
        static["targets"] = [f"127.0.0.1:{suite.procs[service].port}"]
        static["labels"]["cluster"] = "standalone"
    job["static_configs"].append({"targets": [f"127.0.0.1:{workers.port}"],
                                  "labels": {"service": "coordinator", "cluster": "standalone"}})
    config["scrape_configs"] = [job]
    return config


@contextlib.contextmanager
def workers_coordinator(tmp: Path) -> Iterator[ServiceProcess]:
    """A coordinator of two worker processes over a real Redis, each owning one coordinator id:
    a call that lands on the other id's worker goes through the Redis mailboxes (their panels).
    Its transactions have no participants, so it needs no broker."""
    with redis_server() as redis_url:
        proc = ServiceProcess("coordinator", {
            "STREAMTX_LEDGER_URL": f"file://{tmp / 'workers-ledgers'}", "STREAMTX_TEST_LOG_DIR": str(tmp),
            "STREAMTX_WORKERS": "2", "STREAMTX_REDIS_URL": redis_url, "STREAMTX_COORDINATOR_IDS": "0,1",
            "STREAMTX_MEMBER": "tc", "STREAMTX_LEASE_TTL_MS": "1500"})
        workers: list[int] = []
        try:
            proc.start(60)
            with redis.Redis.from_url(redis_url, decode_responses=True) as r:
                def holders() -> set[str | None]:
                    return {r.get(f"streamtx:standalone:coordinator:lease:{cid}") for cid in (0, 1)}

                deadline = time.monotonic() + 60
                while None in holders() or len({str(h).rpartition("|")[0] for h in holders()}) < 2:
                    assert time.monotonic() < deadline, f"ids not spread over the workers: {holders()}"
                    time.sleep(0.1)
            workers = proc.children()
            yield proc
        finally:
            proc.stop()
            # A worker still stopping after its supervisor was killed (a busy machine) would
            # outlive the test: the workers are ours, so they go too.
            for pid in workers:
                with contextlib.suppress(OSError):
                    if b"streamtx.coordinator" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(pid, signal.SIGKILL)


async def both(*runs: Coroutine[Any, Any, None]) -> None:
    await asyncio.gather(*runs)


async def forwarding_workload(url: str, txns: int = 40) -> None:
    """Transactions opened and committed on fresh connections: the kernel hands each to either
    worker, so about half the commits reach the sibling of the id's owner and are forwarded.
    Paced over several scrapes, so the rates have samples to span."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:

        async def post(path: str, body: dict[str, Any] | None = None) -> httpx.Response:
            # 503 while an id moves between the workers (a late lease renewal on a busy
            # machine): again (a commit is idempotent; at worst a second open transaction).
            for _ in range(100):
                r = await http.post(path, json=body)
                if r.status_code != 503:
                    return r
                await asyncio.sleep(0.2)
            return r

        for _ in range(txns):
            txn = (await post("/v1/transactions", {"timeout_ms": 60_000})).json()["txn_id"]
            assert (await post(f"/v1/transactions/{txn}/commit")).status_code == 200
            await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, float, float]]:
    """A suite and a Prometheus scraping it, after a workload: (prometheus, start, end)."""
    tmp = tmp_path_factory.mktemp("observed")
    suite = Suite(
        f"file://{tmp / 'ledgers'}", tmp, services=ORDER,
        coordinator_env={"STREAMTX_TIMEOUT_CHECK_INTERVAL_MS": "100"},
        broker_env={"STREAMTX_SNAPSHOT_EVERY_OPS": "5", "STREAMTX_SNAPSHOT_INTERVAL_S": "0.5"},
    )
    with (suite, workers_coordinator(tmp) as workers,
          prometheus_server(scrape_config(suite, workers), tmp) as prom):
        start = time.time()
        prom.wait_scraped({"streamtx"}, since=start)
        asyncio.run(both(workload(suite.url), forwarding_workload(workers.url)))
        end = time.time()
        prom.wait_scraped({"streamtx"}, since=end + SCRAPE_S)
        yield prom, start, time.time()


async def workload(url: str, rounds: int = 40) -> None:
    """Consume-transform-produce transactions, with aborts, an ack conflict, a timeout."""
    src, out = (f"persistent://t/n/{s}-{uuid.uuid4().hex[:6]}" for s in ("src", "out"))
    async with StreamtxClient(url) as client:
        await client.create_topic(src, 2)
        await client.create_topic(out, 2)
        feed = await client.producer(src, name="feed")
        sink = await client.producer(out, name="sink")
        worker = await client.consumer(src, "work", "earliest", "Shared", name="w1")
        rival = await client.consumer(src, "work", name="w2")
        # Held open through the run: the output's maxReadPosition lags behind.
        holder = await client.new_transaction(timeout_ms=120_000)
        await sink.send(b"held", partition=0, txn=holder)
        doomed = await client.new_transaction(timeout_ms=300)  # times out
        await sink.send(b"doomed", partition=1, txn=doomed)
        for i in range(rounds):
            for k in range(5):
                await feed.send(f"m{i}-{k}".encode(), key=f"k{k}")
            got = await receive(worker, 5, timeout_s=5)
            txn = await client.new_transaction(timeout_ms=30_000)
            for m in got:
                await sink.send(m.value.upper(), key=m.key, txn=txn)
            await worker.ack(got, txn=txn)
            if i % 10 == 3:  # another txn acking the same ids: the 409 conflict
                other = await client.new_transaction(timeout_ms=30_000)
                with pytest.raises(ConflictError):
                    await rival.ack(got[:1], txn=other)
                await other.abort()
            if i % 7 == 5:
                await txn.abort()
                await worker.nack(got)
            else:
                await txn.commit()
            await asyncio.sleep(0.2)

        async def timed_out() -> bool:
            return bool((await client.transaction_metadata(doomed.txn_id))["state"] == "TIMEOUT")

        await eventually(timed_out, what="the short txn times out")
        await holder.commit()


def test_every_panel_query_returns_data(observed: tuple[Prometheus, float, float]) -> None:
    prom, start, end = observed
    values = {"cluster": ".+", "coordinator": ".+", "topic": ".+", "datasource": "prometheus"}
    empty: list[str] = []
    checked = 0
    for name, board in dashboards.load().items():
        if name in GEO | SPARK:
            continue
        n, none = dashboards.empty_queries(prom, name, board, values, start, end, f"{10 * SCRAPE_S}s")
        checked, empty = checked + n, empty + none
    assert checked >= 40
    assert empty == []


def test_every_variable_has_values(observed: tuple[Prometheus, float, float]) -> None:
    prom, start, end = observed
    missing = [m for name, board in dashboards.load().items() if name not in SPARK
               for m in dashboards.variables_without_values(prom, name, board, start, end)]
    assert missing == []


def test_alert_rules_load_and_evaluate(observed: tuple[Prometheus, float, float]) -> None:
    prom, _, _ = observed
    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == sum(len(g["rules"]) for g in yaml.safe_load(ALERTS.read_text())["groups"])
    assert all(r["health"] == "ok" for r in rules), [r for r in rules if r["health"] != "ok"]
    # A healthy run pages nobody.
    firing = [r["name"] for r in rules if r["state"] == "firing"]
    assert firing == []


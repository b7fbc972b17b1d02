"""Fixtures: a real coordinator process over real HTTP, and a real participant app."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import kafka_url
from tests.integration.coordinator.participant import Participant, running_participant
from tests.support.services import ServiceProcess
from tests.support.suite import until_served

TOPIC = "persistent://t/n/x"


class TcClient:
    """The coordinator's REST API, for tests (``expect`` is the status asserted)."""

    def __init__(self, proc: ServiceProcess) -> None:
        self.proc = proc
        # Against workers on one port, a new connection per request: each lands on any worker
        # (the kernel's choice), so most calls for a transaction reach a sibling of its owner.
        fresh = proc.env.get("STREAMTX_WORKERS", "1") != "1"
        self.http = httpx.AsyncClient(base_url=proc.url, timeout=60, limits=httpx.Limits(
            max_keepalive_connections=0 if fresh else None))

    async def call(self, method: str, path: str, expect: int | None = 200, **kw: Any) -> Any:
        r = await self.http.request(method, path, **kw)
        if expect is not None:
            assert r.status_code == expect, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    async def create(self, timeout_ms: int | None = None, expect: int = 200) -> str:
        body = {} if timeout_ms is None else {"timeout_ms": timeout_ms}
        if expect == 200:
            # A worker whose lease lapsed under load (1.5 s leases on 2 busy cores) has no
            # coordinator until the ids settle again: 503, which a client waits out (API.md).
            r = await until_served(self.http, "POST", "/v1/transactions", timeout_s=30, json=body)
            assert r.status_code == 200, f"POST /v1/transactions: {r.status_code} {r.text}"
            return str(r.json()["txn_id"])
        out = await self.call("POST", "/v1/transactions", expect, json=body)
        return out

    async def get(self, txn: str, expect: int = 200) -> Any:
        return await self.call("GET", f"/v1/transactions/{txn}", expect)

    async def add_partitions(self, txn: str, partitions: list[str], expect: int = 200) -> Any:
        return await self.call("POST", f"/v1/transactions/{txn}/partitions", expect,
                               json={"partitions": partitions})

    async def add_subscriptions(self, txn: str, subs: list[tuple[str, str]], expect: int = 200) -> Any:
        body = {"subscriptions": [{"topic": t, "subscription": s} for t, s in subs]}
        return await self.call("POST", f"/v1/transactions/{txn}/subscriptions", expect, json=body)

    async def commit(self, txn: str, expect: int | None = 200) -> Any:
        return await self.call("POST", f"/v1/transactions/{txn}/commit", expect)

    async def abort(self, txn: str, expect: int | None = 200) -> Any:
        return await self.call("POST", f"/v1/transactions/{txn}/abort", expect)

    async def admin(self, path: str, method: str = "GET", expect: int = 200, **kw: Any) -> Any:
        return await self.call(method, f"/admin/v3/transactions/{path}", expect, **kw)

    async def wait_state(self, txn: str, states: set[str], timeout_s: float = 15.0) -> Any:
        """Poll until the transaction is in one of ``states``; its body."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            body = await self.get(txn, expect=None)  # type: ignore[arg-type]
            if body.get("state") in states:
                return body
            assert asyncio.get_running_loop().time() < deadline, f"{txn} stuck: {body}"
            await asyncio.sleep(0.05)

    async def aclose(self) -> None:
        await self.http.aclose()


TcFactory = Callable[..., ServiceProcess]
ClientFactory = Callable[[ServiceProcess], TcClient]


@pytest.fixture(scope="module")
def participant_server() -> Iterator[Participant]:
    with running_participant() as p:
        yield p


@pytest.fixture
def participant(participant_server: Participant) -> Participant:
    participant_server.reset()
    return participant_server


@pytest.fixture(params=["file", "kafka"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A durable ledger URL per backend; kafka starts the session's tansu broker."""
    if request.param == "file":
        return f"file://{tmp_path / 'ledgers'}"
    return kafka_url(request.getfixturevalue("kafka_bootstrap"))


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'ledgers'}"


@pytest.fixture
def tc_workers(request: pytest.FixtureRequest) -> int:
    """Worker processes of the coordinator ``tc_factory`` starts: 1, or what a test parametrises
    (``@pytest.mark.parametrize("tc_workers", [1, 4], indirect=True)``)."""
    return int(getattr(request, "param", 1))


@pytest.fixture
def tc_factory(tmp_path: Path, participant: Participant, tc_workers: int,
               request: pytest.FixtureRequest) -> Iterator[TcFactory]:
    """``start(ledger_url, **settings)`` runs a coordinator process wired to the participant
    (with ``tc_workers`` > 1: that many workers on its port, over the session's Redis, one
    coordinator id each unless the test names the ids)."""
    procs: list[ServiceProcess] = []

    def start(ledger_url: str, *, ready: bool = True, **settings: Any) -> ServiceProcess:
        if tc_workers > 1:
            settings = {**workers_settings(tc_workers, request.getfixturevalue("redis_url")), **settings}
        env = {
            "STREAMTX_LEDGER_URL": ledger_url,
            "STREAMTX_TEST_LOG_DIR": str(tmp_path),
            "STREAMTX_BROKER_URL": participant.url,
            "STREAMTX_PENDINGACK_URL": participant.url,
            "STREAMTX_TIMEOUT_CHECK_INTERVAL_MS": "50",
            "STREAMTX_HOUSEKEEPING_INTERVAL_MS": "100",
            "STREAMTX_FANOUT_BACKOFF_MS": "20",
            "STREAMTX_FANOUT_MAX_BACKOFF_MS": "200",
            **{f"STREAMTX_{k.upper()}": str(v) for k, v in settings.items()},
        }
        proc = ServiceProcess("coordinator", env).start(ready=ready)
        procs.append(proc)
        if ready and tc_workers > 1:
            wait_workers(proc, tc_workers)
        return proc

    yield start
    for p in procs:
        p.stop()


def workers_settings(workers: int, redis_url: str) -> dict[str, Any]:
    return {"workers": workers, "redis_url": redis_url, "cluster": f"w{uuid.uuid4().hex[:8]}",
            "coordinator_ids": ",".join(map(str, range(workers))), "lease_ttl_ms": 1500, "member": "tc"}


def lease_holders(proc: ServiceProcess) -> dict[int, str | None]:
    """Coordinator id -> the member holding its lease, read from Redis."""
    env = proc.env
    ids = [int(i) for i in env["STREAMTX_COORDINATOR_IDS"].split(",")]
    with redis.Redis.from_url(env["STREAMTX_REDIS_URL"], decode_responses=True) as r:
        raw = {cid: r.get(f"streamtx:{env['STREAMTX_CLUSTER']}:coordinator:lease:{cid}") for cid in ids}
    return {cid: None if v is None else str(v).rpartition("|")[0] for cid, v in raw.items()}


def wait_workers(proc: ServiceProcess, workers: int, timeout_s: float = 60.0) -> None:
    """Until every coordinator id is leased and ``workers`` members hold them (each worker
    listens once it is ready, so then every connection lands on a ready worker)."""
    deadline = time.monotonic() + timeout_s
    while True:
        holders = lease_holders(proc)
        if None not in holders.values() and len(set(holders.values())) == min(workers, len(holders)):
            break
        assert time.monotonic() < deadline, f"the ids were not spread over {workers} workers: {holders}"
        time.sleep(0.1)
    proc.wait_ready()


@pytest.fixture
async def client_factory() -> AsyncIterator[ClientFactory]:
    clients: list[TcClient] = []

    def make(proc: ServiceProcess) -> TcClient:
        c = TcClient(proc)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.aclose()
